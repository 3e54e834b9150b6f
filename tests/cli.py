"""Running the real `atwhois` executable from tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ATWHOIS = str(Path(sys.executable).with_name("atwhois"))


def run(
    args: list[str],
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    cwd: Path | None = None,
) -> tuple[int, str, str]:
    """Exit code, stdout, stderr."""
    done = subprocess.run(
        [ATWHOIS, *args],
        env=env,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr
