"""Following one relay's (or PDS's) `com.atproto.sync.subscribeRepos`: connect, decode each
frame (`frames.decode`), hand identity and account events to the daemon, remember the
cursor in the cache store, and reconnect with jittered back-off when the connection drops.

What it does with a frame:
- `#identity`, `#account`: to `on_event`, in order; their `seq` becomes the cursor.
- `#commit`, `#sync`, unknown types: skipped; their `seq` becomes the cursor.
- `#info OutdatedCursor`: the relay no longer has what came after our cursor and starts
  from its oldest event; counted and logged, the stream goes on.
- an error frame: the relay closes; `FutureCursor` means our cursor is ahead of it (a
  relay that lost state, or another relay): the cursor is dropped, then we reconnect.
- a malformed frame: counted and skipped (a stranger's bytes never stop the stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from cache.stores.base import Store
from foundation import Backoff

from .frames import (
    AccountEvent,
    ErrorFrame,
    IdentityEvent,
    InfoEvent,
    MalformedFrame,
    Skipped,
    decode,
)

log = logging.getLogger("atwhois.stream")
OnEvent = Callable[[IdentityEvent | AccountEvent], Awaitable[None]]
PATH = "/xrpc/com.atproto.sync.subscribeRepos"


class Cursor(Protocol):
    """Where the cursor lives between connections and restarts."""

    async def load(self) -> int | None: ...

    async def save(self, seq: int | None) -> None: ...


@dataclass
class MemoryCursor:
    seq: int | None = None

    async def load(self) -> int | None:
        return self.seq

    async def save(self, seq: int | None) -> None:
        self.seq = seq


class StoreCursor:
    """The cursor as an entry of the cache store: it survives a restart, and with Redis the
    daemons that follow one relay share it."""

    KEEP = 30 * 24 * 3600.0  # a month: older than any relay's backfill window

    def __init__(self, store: Store, url: str) -> None:
        self.store, self.key = store, f"stream-cursor:{url.rstrip('/')}"

    async def load(self) -> int | None:
        stored = await self.store.get(self.key)
        text = stored.value.decode("ascii", "replace") if stored else ""
        return int(text) if text.isdigit() else None

    async def save(self, seq: int | None) -> None:
        if seq is None:
            await self.store.delete([self.key])
        else:
            await self.store.put(self.key, str(seq).encode(), time.time() + self.KEEP)


@dataclass
class StreamState:
    """What `/_health` and `/metrics` say about the stream."""

    url: str
    connected: bool = False
    cursor: int | None = None
    reconnects: int = 0
    events: Counter[str] = field(default_factory=Counter)  # by type, skipped ones included
    malformed: int = 0
    outdated_cursor: int = 0
    lag_s: float | None = None  # now minus the last event's own time
    last_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "connected": self.connected,
            "cursor": self.cursor,
            "reconnects": self.reconnects,
            "events": dict(self.events),
            "malformed": self.malformed,
            "outdated_cursor": self.outdated_cursor,
            "lag_s": None if self.lag_s is None else round(self.lag_s, 3),
            "last_error": self.last_error,
        }


class Subscriber:
    def __init__(
        self,
        url: str,
        on_event: OnEvent,
        cursor: Cursor,
        *,
        backoff: Backoff | None = None,
        save_every: float = 1.0,
        max_frame: int = 5 * 1024 * 1024,
    ) -> None:
        self.url = url.rstrip("/")
        self.on_event, self.cursor = on_event, cursor
        self.backoff = backoff or Backoff()
        self.save_every, self.max_frame = save_every, max_frame
        self.state = StreamState(self.url)
        self._saved_at = 0.0

    async def run(self) -> None:
        """Until cancelled: connect, follow, and after a drop wait and connect again."""
        self.state.cursor = await self.cursor.load()
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    await self._follow(session)
                except (TimeoutError, aiohttp.ClientError, ConnectionError) as err:
                    self.state.last_error = f"{type(err).__name__}: {err}"
                finally:
                    self.state.connected = False
                    await self.cursor.save(self.state.cursor)
                self.state.reconnects += 1
                wait = self.backoff.next()
                log.info(
                    json.dumps(
                        {
                            "event": "stream_reconnect",
                            "url": self.url,
                            "in_s": round(wait, 2),
                            "error": self.state.last_error,
                        }
                    )
                )
                await asyncio.sleep(wait)

    async def _follow(self, session: aiohttp.ClientSession) -> None:
        params = {} if self.state.cursor is None else {"cursor": str(self.state.cursor)}
        async with session.ws_connect(
            self.url + PATH, params=params, max_msg_size=self.max_frame, heartbeat=30
        ) as ws:
            self.state.connected = True
            async for message in ws:
                if message.type is not aiohttp.WSMsgType.BINARY:
                    if message.type is aiohttp.WSMsgType.ERROR:
                        raise ConnectionError(str(ws.exception()))
                    continue
                if not await self.feed(message.data):
                    return
            self.state.last_error = f"closed by the relay ({ws.close_code})"

    async def feed(self, raw: bytes) -> bool:
        """One frame; False when the relay said it is closing."""
        try:
            event = decode(raw)
        except MalformedFrame as err:
            self.state.malformed += 1
            self.state.last_error = str(err)
            return True
        if isinstance(event, ErrorFrame):
            self.state.events["error"] += 1
            self.state.last_error = f"{event.error}: {event.message or ''}".strip()
            if event.error == "FutureCursor":
                self.state.cursor = None  # ahead of this relay: start from its present
            return False
        if isinstance(event, InfoEvent):
            self.state.events["#info"] += 1
            if event.name == "OutdatedCursor":
                self.state.outdated_cursor += 1
                log.warning(json.dumps({"event": "stream_outdated_cursor", "url": self.url}))
            return True
        self.backoff.reset()  # events arrive: the connection is good
        if isinstance(event, Skipped):
            self.state.events[event.kind] += 1
            if event.seq is not None:
                await self._advance(event.seq)
            return True
        self.state.events["#identity" if isinstance(event, IdentityEvent) else "#account"] += 1
        self.state.lag_s = _lag(event.time)
        await self.on_event(event)
        await self._advance(event.seq)
        return True

    async def _advance(self, seq: int) -> None:
        self.state.cursor = seq
        now = time.monotonic()
        if now - self._saved_at >= self.save_every:
            self._saved_at = now
            await self.cursor.save(seq)


def _lag(stamp: str) -> float | None:
    with contextlib.suppress(ValueError):
        moment = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        if moment.tzinfo is not None:
            return time.time() - moment.timestamp()
    return None
