"""`atwhois` answers what needs no network without loading the network stack: help, the
version, a typo'd identifier. Pinned by what gets imported (timing is `bench startup`'s)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("aiohttp", "httpx", "dns", "redis", "asyncio", "sqlite3", "cryptography", "coincurve")
PROBE = """
import sys
from cli.main import main
try:
    code = main({args!r})
except SystemExit as exit:
    code = exit.code
loaded = sorted(m for m in {heavy!r} if m in sys.modules)
print(code, " ".join(loaded), file=sys.stderr)
"""


def loaded_by(args: list[str]) -> tuple[str, list[str]]:
    probe = PROBE.format(args=args, heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    code, *modules = done.stderr.strip().splitlines()[-1].split(" ")
    return code, [m for m in modules if m]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--help"], "0"),
        (["--version"], "0"),
        (["not a handle!"], "2"),
        (["--json", "alice.invalid"], "2"),
        (["did:example:123"], "2"),
        (["plc", "verify-export", "--help"], "0"),
        (["history", "--help"], "0"),
        (["cache", "--help"], "0"),
    ],
)
def test_nothing_heavy_is_imported_without_a_lookup(args: list[str], code: str) -> None:
    assert loaded_by(args) == (code, [])


def test_a_lookup_does_load_the_network_stack() -> None:
    """The probe can see an import: a real lookup (of nothing reachable) loads aiohttp."""
    code, loaded = loaded_by(
        ["--plc-url", "http://127.0.0.1:9", "--timeout", "0.2", "did:plc:" + "a" * 24]
    )
    assert "aiohttp" in loaded and code == "3"
