"""Waiting for something the test caused to be seen, within a bound (past it, the test
fails): on this thread (`until`) or in the event loop (`eventually`)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable


def until(check: Callable[[], bool], timeout: float = 10) -> float:
    """Seconds until `check()` holds."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, "not seen in time"
        time.sleep(0.02)
    return time.monotonic() - started


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], timeout: float = 10, what: str = "not seen in time"
) -> None:
    """Until `check()` holds (a coroutine function is awaited: a lookup, say)."""
    deadline = time.monotonic() + timeout
    while not await _holds(check):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


async def _holds(check: Callable[[], bool | Awaitable[bool]]) -> bool:
    answer = check()
    return await answer if inspect.isawaitable(answer) else answer


async def while_running(
    work: Awaitable[object], done: Callable[[], bool], timeout: float = 10
) -> None:
    """`work` (a subscriber's `run()`, say) as a task, until `done()`; then cancelled."""
    task = asyncio.ensure_future(work)
    try:
        await eventually(done, timeout)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
