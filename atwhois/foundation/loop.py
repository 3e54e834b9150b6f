"""The library's own event loop, for its sync calls (`atwhois.lookup`, …): one loop in a
thread of its own, started on the first sync call and kept for the process.

`asyncio.run` per call would make a loop and close it each time: a `Resolver` used by two
sync calls then holds connections made on a loop that is closed ("Event loop is closed").
A sync call made where a loop already runs (a notebook, an async framework's thread) could
not use `asyncio.run` at all. On a loop of its own, every sync call runs on the same loop,
from any thread, loop or none; the calling thread waits for the answer.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def library_loop() -> asyncio.AbstractEventLoop:
    """The loop the sync calls run on, started if it is not yet."""
    global _loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="atwhois-sync", daemon=True)
            thread.start()
            _loop = loop
        return _loop


def run_sync(call: Coroutine[Any, Any, T]) -> T:
    """`call` run to its end on the library's loop; the calling thread waits for it."""
    loop = library_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:  # called from a coroutine already on this loop: it would wait forever
        call.close()
        raise RuntimeError("a sync call of atwhois inside its own loop: await the async call")
    return asyncio.run_coroutine_threadsafe(call, loop).result()
