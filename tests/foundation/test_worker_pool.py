"""The child processes of `foundation.pool`: a killed parent leaves none behind (a lone child,
a pool's workers, an audit's); a shutdown stops a pool's workers side by side, and none
tears its heap down object by object on the way out."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from atwhois.foundation.pool import RoutedPool
from devnet.process import children
from tests.support.waiting import until

# A parent that starts two workers, says their pids, and waits to be killed.
_PARENT = textwrap.dedent("""
    import os, sys, time
    from atwhois.foundation.pool import RoutedPool
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


# A parent that starts one child of its own (the stream's reader is one) and waits.
_LONE_PARENT = textwrap.dedent("""
    import time
    from atwhois.foundation.pool import child_process
    child = child_process(time.sleep, 600)
    child.start()
    print(child.pid, flush=True)
    time.sleep(600)
""")


@pytest.mark.parametrize("program", [_PARENT, _LONE_PARENT], ids=["pool", "child"])
def test_children_exit_when_their_parent_is_killed(program: str) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    workers: list[int] = []
    try:
        assert parent.stdout is not None
        workers += [int(pid) for pid in parent.stdout.readline().split()]
        assert workers and all(_alive(pid) for pid in workers)
        parent.send_signal(signal.SIGKILL)  # no shutdown: the workers are not told
        parent.wait()
        until(lambda: not any(_alive(pid) for pid in workers), timeout=10)
    finally:
        parent.kill()
        parent.wait()
        for pid in filter(_alive, workers):  # a failed test leaves none either
            os.kill(pid, signal.SIGKILL)


def _meet_on_exit(folder: str) -> None:
    """A worker that, on its way out, says so and waits (10 s at most) for the others to be
    on their way out too; alone if they never come (they were not told yet)."""

    def meet() -> None:
        Path(folder, f"{os.getpid()}.exiting").touch()
        try:
            until(lambda: len(list(Path(folder).glob("*.exiting"))) >= 2, timeout=10)
        except AssertionError:  # the others were not told while this one waited
            Path(folder, f"{os.getpid()}.alone").touch()

    atexit.register(meet)


def test_a_shutdown_tells_every_worker_before_waiting_for_any(tmp_path: Path) -> None:
    pool = RoutedPool(2, _meet_on_exit, (str(tmp_path),))
    pids = {pool.submit(worker, os.getpid).result() for worker in range(len(pool))}
    pool.shutdown()
    assert {path.name for path in tmp_path.iterdir()} == {f"{pid}.exiting" for pid in pids}


class _Teardown:
    """Stands for what an interpreter's exit does after the exit handlers the worker's own
    start registered (module teardown, the heap freed object by object): an exit handler
    registered as the worker receives its arguments, before it starts, so run after
    those. It leaves a mark if it runs."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return _expect_teardown, (self.folder,)


def _expect_teardown(folder: str) -> _Teardown:
    atexit.register(Path(folder, f"{os.getpid()}.torn-down").touch)
    return _Teardown(folder)


def test_a_worker_exits_without_the_interpreters_teardown(tmp_path: Path) -> None:
    pool = RoutedPool(2, id, (_Teardown(str(tmp_path)),))
    pids = [pool.submit(worker, os.getpid).result() for worker in range(len(pool))]
    pool.shutdown()
    assert not any(map(_alive, pids))
    assert list(tmp_path.iterdir()) == []  # exited, and nothing after its own exit handlers ran


# A parent that starts an audit run's two checking workers and waits to be killed.
_AUDIT_PARENT = textwrap.dedent("""
    import asyncio
    from atwhois.audit.processes import CheckerPool
    from atwhois.resolver import Config

    async def main():
        async with CheckerPool(2, Config(), "memory:", 2):
            print("ready", flush=True)
            await asyncio.sleep(600)

    asyncio.run(main())
""")


def test_audit_workers_exit_when_their_parent_is_killed() -> None:
    """Issue 56: `atwhois audit --workers`'s processes watch their parent as the routed
    pool's do (before, they lived on, reparented to PID 1, blocked on their queue)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _AUDIT_PARENT], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    workers: list[int] = []
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        workers += children(parent.pid)
        assert len(workers) >= 2 and all(_alive(pid) for pid in workers)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        until(lambda: not any(_alive(pid) for pid in workers), timeout=10)
    finally:
        parent.kill()
        parent.wait()
        for pid in filter(_alive, workers):
            os.kill(pid, signal.SIGKILL)
