"""Waiting for something the test caused to be seen, within a bound (past it, the test
fails): on this thread (`until`) or in the event loop (`eventually`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def until(check: Callable[[], bool], timeout: float = 10) -> float:
    """Seconds until `check()` holds."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, "not seen in time"
        time.sleep(0.02)
    return time.monotonic() - started


async def eventually(check: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not seen in time"
        await asyncio.sleep(0.01)
