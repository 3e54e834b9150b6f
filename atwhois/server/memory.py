"""What the daemon does about memory beyond its caches' byte bounds.

Under a flood of lookups of uncached identities, most of a daemon's memory that is not
cache is transient: TLS connections to strangers' hosts, documents on their way. Two
process-wide settings keep that small and give it back:

- asyncio reads TLS into a 256 KiB buffer per connection; the daemon opens two short
  connections per uncached did:web identity, and one TLS record (16 KiB) is the most a
  read returns anyway. 32 resolutions at once held 16 MiB of such buffers.
- glibc keeps freed memory in its heap; `malloc_trim` hands it back to the system, so the
  resident size follows what is live rather than the highest it ever was.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util

from aiohttp import web

TLS_READ_BUFFER = 16 * 1024
TRIM_SECONDS = 30.0


def _malloc_trim() -> ctypes._NamedFuncPointer | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    with contextlib.suppress(OSError, AttributeError):
        trim: ctypes._NamedFuncPointer = ctypes.CDLL(name).malloc_trim  # glibc only
        return trim
    return None


def trim_periodically(app: web.Application) -> None:
    """Give freed memory back every `TRIM_SECONDS` while the app runs (where glibc is)."""
    trim = _malloc_trim()
    if trim is None:
        return

    tasks: list[asyncio.Task[None]] = []

    async def run() -> None:
        while True:
            await asyncio.sleep(TRIM_SECONDS)
            trim(0)

    async def start(_: web.Application) -> None:
        tasks.append(asyncio.create_task(run()))

    async def stop(_: web.Application) -> None:
        for task in tasks:
            task.cancel()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
