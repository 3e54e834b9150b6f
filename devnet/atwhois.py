"""The real `atwhois` executable, run from tests and benchmarks: a command to completion
(`run`), or `atwhois serve` as a child process (`running_daemon`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

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


@dataclass
class Daemon:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self, timeout: float = 30) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def log_lines(self) -> list[dict[str, object]]:
        lines = []
        for line in self.log.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                lines.append(json.loads(line))
        return lines


@contextlib.contextmanager
def running_daemon(
    env: dict[str, str],
    log: Path,
    *args: str,
    command: tuple[str, ...] = ("serve", "--port", "0"),
) -> Iterator[Daemon]:
    """`atwhois serve` (or another serving `command`), once it logs that it listens."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [ATWHOIS, *command, *args],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    daemon = None
    try:
        deadline = time.monotonic() + 30
        while daemon is None:
            for line in log.read_text().splitlines():
                if '"listening"' in line:
                    daemon = Daemon(json.loads(line)["url"], process, log)
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"atwhois {command[0]} did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield daemon
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def error_name(response: httpx.Response) -> str | None:
    """The XRPC error an answer names, when its body is a JSON object with one."""
    try:
        body = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, str) else None
