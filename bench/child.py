"""Run the `atwhois` CLI in a child process and measure it: wall time, CPU time, the
child's own peak RSS (VmHWM, which a fork of a large parent cannot inflate) and the largest
peak RSS among the processes it started (its workers), and how much of the CPU time was
its own."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass

_MEASURED_CLI = """
import resource, sys
from atwhois.cli.main import main
code = main(sys.argv[1:])
sys.stdout.flush()
status = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
print("VmHWM", status, file=sys.stderr)
print("ChildHWM", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
own = resource.getrusage(resource.RUSAGE_SELF)
print("SelfCPU", own.ru_utime + own.ru_stime, file=sys.stderr)
raise SystemExit(code)
"""


@dataclass(frozen=True)
class Measured:
    seconds: float
    cpu_seconds: float
    peak_mib: float
    stdout: str
    child_peak_mib: float = 0.0  # the largest of the processes it started and waited for
    own_cpu_seconds: float = 0.0  # of `cpu_seconds`, the child's own (not its workers')


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
    child_peak = int(done.stderr.split("ChildHWM")[-1].split()[0]) / 1024
    own_cpu = float(done.stderr.split("SelfCPU")[-1].split()[0])
    return Measured(seconds, cpu, peak, done.stdout, child_peak, own_cpu)
