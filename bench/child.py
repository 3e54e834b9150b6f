"""Run the `atwhois` CLI in a child process and measure it: wall time, CPU time and the
child's own peak RSS (VmHWM, which a fork of a large parent cannot inflate)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass

_MEASURED_CLI = """
import sys
from cli.main import main
code = main(sys.argv[1:])
sys.stdout.flush()
status = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
print("VmHWM", status, file=sys.stderr)
raise SystemExit(code)
"""


@dataclass(frozen=True)
class Measured:
    seconds: float
    cpu_seconds: float
    peak_mib: float
    stdout: str


def run_cli(args: list[str], env: dict[str, str] | None = None) -> Measured:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED_CLI, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1) or "VmHWM" not in done.stderr:
        raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    peak = int(done.stderr.split("VmHWM")[-1].split()[0]) / 1024
    return Measured(seconds, cpu, peak, done.stdout)
