"""How long `atwhois` takes to answer on the command line, as a ratio to `python -c pass`
(the interpreter's own start-up) measured in the same run, interleaved; medians of N runs.

- Answers without the network: `--help`, `--version`, invalid input (text and JSON), a
  subcommand's help, a mistyped command. Target: 3x.
- On the test network (started here): a lookup resolved here (target 6x), a `--cache` hit
  (the answer fresh in a SQLite cache; target 4x), and a lookup asked of a daemon
  (`--server`; no target, for comparison).
- The floors: the libraries a lookup cannot do without, imported alone (asyncio,
  dnspython, cryptography, and aiohttp or h11), and what a cache hit cannot do without
  (asyncio): what no work on atwhois's own code can go below.
- The outbound HTTP stacks, each imported alone: what the choice of each costs a command
  that loads it (docs/architecture.md, "Outbound HTTP").

Byte code is cached as on any installed copy (pip compiles at install; an editable checkout
writes `__pycache__` on first run). A machine that sets PYTHONDONTWRITEBYTECODE would time
compiling every module on every run instead, so the children cache theirs in a folder of
this run (PYTHONPYCACHEPREFIX) and one warm-up run of each case fills it.

    python -m bench startup [--runs 15]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from bench import Row
from devnet.atwhois import running_daemon
from devnet.network import running_devnet

ATWHOIS = str(Path(sys.executable).with_name("atwhois"))
BASELINE = "python -c pass"
NO_NETWORK_TARGET = 3.0


class Case(NamedTuple):
    command: list[str]
    code: int  # the exit code a correct answer has
    target: float | None  # the ratio to the baseline it must stay within


def no_network_cases() -> dict[str, Case]:
    return {
        "--help": Case([ATWHOIS, "--help"], 0, NO_NETWORK_TARGET),
        "--version": Case([ATWHOIS, "--version"], 0, NO_NETWORK_TARGET),
        "invalid input": Case([ATWHOIS, "not a handle!"], 2, NO_NETWORK_TARGET),
        "invalid input --json": Case([ATWHOIS, "--json", "alice.invalid"], 2, NO_NETWORK_TARGET),
        "plc verify-export --help": Case(
            [ATWHOIS, "plc", "verify-export", "--help"], 0, NO_NETWORK_TARGET
        ),
        "serve --help": Case([ATWHOIS, "serve", "--help"], 0, NO_NETWORK_TARGET),
        "a mistyped command": Case([ATWHOIS, "lokup", "alice.example.com"], 2, NO_NETWORK_TARGET),
    }


def floor_cases() -> dict[str, Case]:
    python = sys.executable
    lookup = (
        "import asyncio, dns.asyncresolver; import cryptography.hazmat.primitives.asymmetric.ec"
    )
    return {
        "floor: lookup's libraries (aiohttp)": Case(
            [python, "-c", lookup + "; import aiohttp"], 0, None
        ),
        "floor: lookup's libraries (h11)": Case(
            [python, "-c", lookup + "; import h11, ssl"], 0, None
        ),
        "floor: a cache hit's (asyncio)": Case([python, "-c", "import asyncio, sqlite3"], 0, None),
        # What each outbound HTTP stack costs a command that loads it (docs/architecture.md
        # says why each stays): the client of a daemon (`--server`) loads http.client alone.
        "stack: http.client (a daemon's client)": Case(
            [python, "-c", "import http.client, ssl"], 0, None
        ),
        "stack: aiohttp (the fetcher, the streams)": Case(
            [python, "-c", "import aiohttp"], 0, None
        ),
        "stack: httpx (DoH, the mirror's upstream)": Case([python, "-c", "import httpx"], 0, None),
        "stack: websockets (the mirror's upstream stream)": Case(
            [python, "-c", "import websockets.sync.client"], 0, None
        ),
    }


@contextlib.contextmanager
def network_cases(workdir: Path) -> Iterator[tuple[dict[str, Case], dict[str, str]]]:
    """The test network and a daemon on it, with the cases that use them and their env."""
    with running_devnet(workdir) as devnet:
        env = devnet.env()
        cache = f"sqlite:///{workdir / 'cache.db'}"
        with running_daemon(env, workdir / "serve.log", "--cache", "memory:") as daemon:
            yield (
                {
                    "lookup (test network)": Case([ATWHOIS, "alice.test"], 0, 6.0),
                    "--cache hit (test network)": Case(
                        [ATWHOIS, "--cache", cache, "alice.test"], 0, 4.0
                    ),
                    "--server (a daemon)": Case(
                        [ATWHOIS, "--server", daemon.url, "alice.test"], 0, None
                    ),
                },
                env,
            )


def once(case: Case, env: dict[str, str]) -> float:
    """Milliseconds for one run; a wrong exit code is a wrong answer, not a time."""
    started = time.perf_counter()
    done = subprocess.run(case.command, capture_output=True, check=False, env=env)
    if done.returncode != case.code:
        raise SystemExit(
            f"{case.command[1:]} exited {done.returncode}, not {case.code}: {done.stderr[-500:]!r}"
        )
    return (time.perf_counter() - started) * 1000


def measure(cases: dict[str, Case], env: dict[str, str], runs: int) -> dict[str, float]:
    """Median milliseconds of each case, interleaved (the machine's noise falls on every
    case alike), after one warm-up run of each (byte code, the cache's entry, the daemon's)."""
    for case in cases.values():
        once(case, env)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, case in cases.items():
            times[name].append(once(case, env))
    return {name: statistics.median(samples) for name, samples in times.items()}


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="atwhois-startup-") as tmp:
        workdir = Path(tmp)
        environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        environ["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
        with network_cases(workdir) as (network, devnet_env):
            cases = {
                BASELINE: Case([sys.executable, "-c", "pass"], 0, None),
                **no_network_cases(),
                **network,
                **floor_cases(),
            }
            medians = measure(cases, {**environ, **devnet_env}, args.runs)
    base = medians[BASELINE]
    print(f"{'case':38} {'median ms':>10} {'ratio':>7} {'target':>7}")
    rows, missed = [], []
    for name, median in medians.items():
        target = cases[name].target
        verdict = ""
        if target is not None:
            verdict = "ok" if median <= target * base else "MISSED"
            if verdict == "MISSED":
                missed.append(name)
        shown = f"{target:.0f}x" if target is not None else ""
        print(f"{name:38} {median:10.1f} {median / base:6.2f}x {shown:>7}  {verdict}")
        if name != BASELINE:
            what = name if name.startswith("floor") else f"atwhois {name}"
            rows.append(Row(what, median, base, BASELINE, "ms", True))
    print(f"{len(missed)} target(s) missed" + (f": {', '.join(missed)}" if missed else ""))
    return rows


if __name__ == "__main__":
    main()
