"""`atwhois` answers what needs no network without loading the network stack: help, the
version, a typo'd identifier, a fresh answer from its cache; and a lookup loads one HTTP
client stack, not two. Pinned by what gets imported (timing is `bench startup`'s)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devnet.atwhois import ATWHOIS, Daemon, run
from devnet.network import DevnetState

HEAVY = ("aiohttp", "httpx", "dns", "redis", "asyncio", "sqlite3", "cryptography", "coincurve")
PROBE = """
import sys
from atwhois.cli.main import main
try:
    code = main({args!r})
except SystemExit as exit:
    code = exit.code
loaded = sorted(m for m in {heavy!r} if m in sys.modules)
print(code, " ".join(loaded), file=sys.stderr)
"""


def loaded_by(args: list[str], env: dict[str, str] | None = None) -> tuple[str, list[str]]:
    probe = PROBE.format(args=args, heavy=HEAVY)
    environ = {**os.environ, **(env or {})}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=environ
    )
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
        (["serve", "--help"], "0"),
        (["audit", "--help"], "0"),
        (["lokup", "alice.example.com"], "2"),
        (["plc"], "2"),
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


def test_a_lookup_loads_one_http_client_stack(devnet: DevnetState) -> None:
    """Resolving here: aiohttp (the fetcher) and dnspython, never httpx as well."""
    code, loaded = loaded_by(["alice.test"], devnet.env())
    assert code == "0"
    assert {"aiohttp", "dns"} <= set(loaded) and "httpx" not in loaded


def test_a_fresh_cache_hit_loads_no_network_stack(devnet: DevnetState, tmp_path: Path) -> None:
    """The resolver's edges are built when first used: an answer the cache holds fresh is
    given without importing aiohttp, dnspython or httpx (a miss, first, does load them),
    nor cryptography for a K-256 key (coincurve checks those; P-256 loads it)."""
    cache = ["--cache", f"sqlite:///{tmp_path / 'cache.db'}", "alice.test"]
    assert loaded_by(cache, devnet.env())[0] == "0"  # the miss that fills the cache
    code, loaded = loaded_by(cache, devnet.env())
    assert code == "0"
    assert not {"aiohttp", "dns", "httpx", "cryptography"} & set(loaded), loaded


def test_asking_a_daemon_loads_no_client_library(devnet: DevnetState, daemon: Daemon) -> None:
    """`--server`: the standard library's http.client, neither httpx nor aiohttp (nor
    dnspython: the daemon resolves)."""
    code, loaded = loaded_by(["--server", daemon.url, "alice.test"], devnet.env())
    assert code == "0"
    assert not {"aiohttp", "dns", "httpx"} & set(loaded), loaded


def test_a_reader_that_leaves_is_no_error(tmp_path: Path) -> None:
    """`atwhois watch list --json | head`: the pipe closes under the writer. No traceback,
    the exit status of a process ended by SIGPIPE."""
    env = {**os.environ, "ATWHOIS_AUDIT_DB": str(tmp_path / "audit.db")}
    # more than a pipe holds (64 KiB) in either format: the writer must still be writing
    # when the reader leaves (3,000 made a 56 KB plain list, written whole before the
    # reader closed when the machine was busy: exit 0, not 141)
    names = [f"h{i}.example.com" for i in range(8000)]
    assert run(["watch", "add", *names], env=env)[0] == 0
    for args in (["watch", "list", "--json"], ["watch", "list"]):
        child = subprocess.Popen(
            [ATWHOIS, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert child.stdout is not None and child.stderr is not None
        child.stdout.read(10)  # the reader takes a little, then leaves
        child.stdout.close()
        stderr = child.stderr.read().decode()
        assert child.wait(30) == 141, stderr
        assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr


def test_the_batch_progress_never_shares_a_line_with_a_result(tmp_path: Path) -> None:
    """On a terminal, the `done/total` counter on stderr is erased before each result and at
    the end: a result line never starts after a stale counter."""
    import pty

    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(f"bad{i} handle!" for i in range(6)) + "\nalice.invalid\n")
    leader, follower = pty.openpty()
    child = subprocess.Popen(
        [ATWHOIS, "--file", str(ids)], stdin=subprocess.DEVNULL, stdout=follower, stderr=follower
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert child.wait(30) == 2
    raw = b"".join(chunks).decode()
    assert "7/7" in raw  # the counter was shown
    lines = terminal(raw)
    results = [line for line in lines if "invalid input" in line]
    assert len(results) == 7
    assert all(line.startswith(("bad", "alice.invalid")) for line in results), results
    assert not any(re.search(r"\d+/\d+", line) for line in lines), lines


def terminal(raw: str) -> list[str]:
    """The lines a terminal shows for `raw`: `\r` returns to the start of the line,
    `ESC[K` erases to its end, other characters overwrite; colour codes are dropped."""
    lines: list[str] = []
    line: list[str] = []
    column = 0
    for token in re.findall(r"\x1b\[[0-9;]*[A-Za-z]|\r\n|.", raw, re.DOTALL):
        if token in ("\n", "\r\n"):
            lines.append("".join(line).rstrip())
            line, column = [], 0
        elif token == "\r":
            column = 0
        elif token == "\x1b[K":
            del line[column:]
        elif token.startswith("\x1b["):
            continue
        else:
            line[column : column + 1] = [token]
            column += 1
    if line:
        lines.append("".join(line).rstrip())
    return [text for text in lines if text]
