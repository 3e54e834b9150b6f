"""The worker processes of `foundation.pool`: a killed parent leaves none behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from tests.support.waiting import until

# A parent that starts two workers, says their pids, and waits to be killed.
_PARENT = textwrap.dedent("""
    import os, sys, time
    from foundation.pool import RoutedPool
    pool = RoutedPool(2, int, ())
    pids = [pool.submit(w, os.getpid).result() for w in range(len(pool))]
    print(*pids, flush=True)
    time.sleep(600)
""")


def _alive(pid: int) -> bool:
    """Running (a zombie is gone, waiting for its reaper; a process may go between looks)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_workers_exit_when_their_parent_is_killed() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    workers: list[int] = []
    try:
        assert parent.stdout is not None
        workers += [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2 and all(_alive(pid) for pid in workers)
        parent.send_signal(signal.SIGKILL)  # no shutdown: the workers are not told
        parent.wait()
        until(lambda: not any(_alive(pid) for pid in workers), timeout=10)
    finally:
        parent.kill()
        parent.wait()
        for pid in filter(_alive, workers):  # a failed test leaves none either
            os.kill(pid, signal.SIGKILL)
