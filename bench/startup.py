"""How long `atwhois` takes to answer when it has nothing to resolve: `--help`, `--version`,
invalid input (text and JSON), a subcommand's help, a mistyped command — against
`python -c pass` (the interpreter's own start-up) measured in the same run, interleaved.
Medians of N runs.

    python -m bench startup [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ATWHOIS = str(Path(sys.executable).with_name("atwhois"))
# name -> (command, the exit code a correct answer has)
CASES = {
    "--help": ([ATWHOIS, "--help"], 0),
    "--version": ([ATWHOIS, "--version"], 0),
    "invalid input": ([ATWHOIS, "not a handle!"], 2),
    "invalid input --json": ([ATWHOIS, "--json", "alice.invalid"], 2),
    "plc verify-export --help": ([ATWHOIS, "plc", "verify-export", "--help"], 0),
    "serve --help": ([ATWHOIS, "serve", "--help"], 0),
    "a mistyped command": ([ATWHOIS, "lokup", "alice.example.com"], 2),
}
BASELINE = ([sys.executable, "-c", "pass"], 0)
TARGET_MS = 150


def once(command: list[str], expected: int) -> float:
    """Milliseconds for one run; a wrong exit code is a wrong answer, not a time."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=False)
    if done.returncode != expected:
        raise SystemExit(f"{command[1:]} exited {done.returncode}, not {expected}")
    return (time.perf_counter() - started) * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name in ["python -c pass", *CASES]}
    for _ in range(args.runs):  # interleaved: the machine's noise falls on every case alike
        times["python -c pass"].append(once(*BASELINE))
        for name, (command, expected) in CASES.items():
            times[name].append(once(command, expected))
    base = statistics.median(times["python -c pass"])
    print(f"{'case':28} {'median ms':>10} {'vs python -c pass':>18}")
    for name, samples in times.items():
        median = statistics.median(samples)
        verdict = "" if name == "python -c pass" else ("ok" if median <= TARGET_MS else "SLOW")
        print(f"{name:28} {median:10.1f} {median / base:17.1f}x  {verdict}")
    print(f"target: {TARGET_MS} ms for each case on this machine")


if __name__ == "__main__":
    main()
