"""Following one relay's (or PDS's) `com.atproto.sync.subscribeRepos`, or a Jetstream's
`/subscribe` (`JETSTREAM`: the same events as JSON): connect, decode each frame
(`frames.decode`, `frames.decode_jetstream`), hand identity and account events to the
daemon, remember the cursor in the cache store, and reconnect with jittered back-off when
the connection drops.

What it does with a frame:
- `#identity`, `#account`: to `on_event`, in order; their `seq` becomes the cursor.
- `#commit`, `#sync`, unknown types: skipped; their `seq` becomes the cursor.
- `#info OutdatedCursor`: the relay no longer has what came after our cursor and starts
  from its oldest event; counted and logged, the stream goes on.
- an error frame: the relay closes; `FutureCursor` means our cursor is ahead of it (a
  relay that lost state, or another relay): the cursor is dropped, then we reconnect.
- a malformed frame: counted and skipped (a stranger's bytes never stop the stream).
- a `seq` not after the cursor (the relay went back, or restarted with lower numbers): an
  upstream fault, counted and reported; the event is not applied, the connection is closed
  and opened again, with back-off, from our cursor. A relay that lost its numbers answers
  that with `FutureCursor`, and only then is it followed from its present (it said so).
- a `seq` no source can have sent (F-CUR-1, `Wire.plausible`: a Jetstream time more than
  `FUTURE_MARGIN` ahead of now, a relay's seq past 2^53): counted (`implausible`), not
  applied, the cursor not moved: one forged message cannot move the cursor where every later
  event looks old. A stored cursor that is not plausible either (written before this rule)
  is repaired when it is loaded: the stream is followed from its present, and the gap
  (what may have been missed) is counted and handed to `on_gap`, which re-verifies what
  the daemon holds.
- a connection lost before any frame gave a cursor (a quiet PDS, a child process killed):
  the next is opened from the present, which skips what happened in between. That is a
  gap too (F-CUR-2), counted and handed to `on_gap`; with a cursor, the stream replays.

Every connection must make progress: a complete message (an event, or the answer to our
ping) within `quiet_after` seconds, twice over; a frame that never ends (announced, then a
byte at a time) or a silent peer is a failure, and the stream is opened again.

Whom a stream speaks for (`role`, asked of the host once per connection until known): a
host that answers `com.atproto.server.describeServer` with its `did:web` is a PDS, which
speaks for the accounts it hosts; any other is a relay, which speaks for what it verified.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import yarl

from atwhois.foundation import Backoff
from atwhois.foundation.version import agent
from atwhois.resolver.untrusted import parse_json

from .cursors import Cursor
from .frames import AccountEvent, ErrorFrame, IdentityEvent, InfoEvent, MalformedFrame, Skipped
from .wires import FIREHOSE, V2_TIME, Wire

log = logging.getLogger("atwhois.stream")
OnEvent = Callable[[IdentityEvent | AccountEvent], Awaitable[None]]
YIELD_EVERY = 16  # messages read before the event loop serves what else is waiting


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
    backwards: int = 0  # frames whose seq was not after the cursor
    implausible: int = 0  # frames whose seq no source can have sent (not applied)
    gaps: int = 0  # stored cursors not plausible, repaired by starting from the present
    lag_s: float | None = None  # now minus the last event's own time
    last_error: str | None = None
    role: str | None = None  # "relay" or "pds", once the host said which
    pds_host: str | None = None  # a PDS's own host name (of its did:web)
    progress_at: float = field(default_factory=time.monotonic)  # a complete message
    stall_after: float = 90.0

    def problem(self, now: float | None = None) -> str | None:
        """Why this stream is not followed (None: it is): no complete message for longer
        than `stall_after` seconds, connected or not."""
        idle = (now or time.monotonic()) - self.progress_at
        if idle <= self.stall_after:
            return None
        why = f": {self.last_error}" if self.last_error else ""
        return f"no progress from the event stream {self.url} for {idle:.0f} s{why}"

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "connected": self.connected,
            "cursor": self.cursor,
            "reconnects": self.reconnects,
            "events": dict(self.events),
            "malformed": self.malformed,
            "outdated_cursor": self.outdated_cursor,
            "backwards": self.backwards,
            "implausible": self.implausible,
            "gaps": self.gaps,
            "lag_s": None if self.lag_s is None else round(self.lag_s, 3),
            "last_error": self.last_error,
            "role": self.role,
            "pds_host": self.pds_host,
            "problem": self.problem(),
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
        quiet_after: float = 30.0,
        wire: Wire = FIREHOSE,
        on_gap: Callable[[], Awaitable[None]] | None = None,
        followed_before: bool = False,
        user_agent: str | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.wire = wire
        # A connection was made before (by this subscriber, or by the process it replaces):
        # opened again without a cursor, what came in between is skipped.
        self._followed = followed_before
        self.user_agent = user_agent or agent()  # given by a parent process: its own
        self.on_event, self.cursor = on_event, cursor
        self.backoff = backoff or Backoff()
        self.save_every, self.max_frame = save_every, max_frame
        self.quiet_after = quiet_after
        self.on_gap = on_gap  # told when events may have been missed (a cursor repaired)
        # two quiet spells and the longest back-off: past that, nothing is being followed
        self.state = StreamState(self.url, stall_after=2 * quiet_after + self.backoff.cap)
        self._saved_at = 0.0

    async def run(self) -> None:
        """Until cancelled: connect, follow, and after a drop wait and connect again."""
        self.state.cursor = await self.cursor.load()
        if self.state.cursor is not None and not self.wire.plausible(self.state.cursor):
            await self._repair(self.state.cursor)
        async with aiohttp.ClientSession(headers={"User-Agent": self.user_agent}) as session:
            while True:
                try:
                    if self._followed and self.state.cursor is None:
                        await self._gap("followed before without a cursor: from the present")
                    if self.state.role is None:
                        await self._ask_role(session)
                    await self._follow(session)
                except (TimeoutError, aiohttp.ClientError, ConnectionError) as err:
                    self.state.last_error = f"{type(err).__name__}: {err}"
                finally:
                    self._followed = self._followed or self.state.connected
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
        params = list(self.wire.params)
        if self.state.cursor is not None:
            params.append(("cursor", self.wire.resume(self.state.cursor)))
        try:
            await self._connected(session, params)
        except aiohttp.WSServerHandshakeError as err:
            await self._refused(err)

    async def _refused(self, err: aiohttp.WSServerHandshakeError) -> None:
        """The upgrade was refused. An instance without this path (404) is followed on the
        wire's fallback (Jetstream v1); a cursor refused before the upgrade (400, v2's
        CursorTooOld: below the instance's retention floor) is a gap (F-CUR-3), and the
        stream goes on from the present. Anything else is a failure of the moment."""
        fallback = self.wire.fallback
        if err.status == 404 and fallback is not None:
            log.warning(
                json.dumps({"event": "stream_fallback", "url": self.url, "to": fallback.path})
            )
            self.wire = fallback
            if self.state.cursor is not None and not fallback.plausible(self.state.cursor):
                await self._gap("a cursor of another wire: from the present")
            return
        if err.status == 400 and self.state.cursor is not None:
            await self._gap(f"cursor {self.state.cursor} refused (HTTP 400, CursorTooOld)")
            return
        raise ConnectionError(f"the upgrade was refused: HTTP {err.status} {err.message}")

    async def _connected(
        self, session: aiohttp.ClientSession, params: list[tuple[str, str]]
    ) -> None:
        async with session.ws_connect(
            self.url + self.wire.path,
            params=params,
            protocols=self.wire.protocols,
            max_msg_size=self.max_frame,
            autoping=False,  # our pings and their answers are how progress is seen
            timeout=aiohttp.ClientWSTimeout(ws_close=1.0),  # a stalled peer: no long goodbye
        ) as ws:
            self.state.connected = True  # not progress yet: a message is
            pinged = False
            for received in itertools.count(1):
                if received % YIELD_EVERY == 0:
                    # A burst arrives buffered, and reading a buffered message never waits:
                    # without this the daemon answered no request until the burst was read.
                    await asyncio.sleep(0)
                try:
                    message = await ws.receive(timeout=self.quiet_after)
                except TimeoutError:
                    if pinged:  # quiet twice over: a silent peer, or a frame that never ends
                        raise TimeoutError(
                            f"no complete message for {2 * self.quiet_after:g} s"
                        ) from None
                    await ws.ping()
                    pinged = True
                    continue
                pinged = False
                kind = message.type
                if kind is aiohttp.WSMsgType.PING:
                    await ws.pong(message.data)
                elif kind in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                    data = message.data
                    if not await self.feed(data.encode() if isinstance(data, str) else data):
                        return
                elif kind is aiohttp.WSMsgType.ERROR:
                    raise ConnectionError(str(ws.exception()))
                elif kind in (
                    aiohttp.WSMsgType.CLOSE,
                    aiohttp.WSMsgType.CLOSING,
                    aiohttp.WSMsgType.CLOSED,
                ):
                    break
                else:  # a pong: the peer is there
                    self._progress()
            self.state.last_error = f"closed by the relay ({ws.close_code})"

    def _progress(self) -> None:
        self.state.progress_at = time.monotonic()

    async def _ask_role(self, session: aiohttp.ClientSession) -> None:
        """Whom the stream speaks for: a PDS names itself in `describeServer` (its
        `did:web`); a host without that method is a relay. A failure says nothing: asked
        again before the next connection, and meanwhile no account event is taken from it."""
        base = yarl.URL(self.url)
        http = base.with_scheme("https" if base.scheme in ("wss", "https") else "http")
        try:
            async with session.get(
                http.with_path("/xrpc/com.atproto.server.describeServer"),
                timeout=aiohttp.ClientTimeout(total=10),
            ) as answer:
                body = await answer.content.read(64 * 1024)
                status = answer.status
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as err:
            self.state.last_error = f"describeServer: {type(err).__name__}: {err}"
            return
        if status in (400, 404, 405, 501):
            self.state.role = "relay"
            return
        if status != 200:
            return  # a failure of the moment
        try:
            described = parse_json(body)
        except ValueError:
            described = None
        did = described.get("did") if isinstance(described, dict) else None
        if isinstance(did, str) and did.startswith("did:web:"):
            self.state.role, self.state.pds_host = "pds", did.removeprefix("did:web:").lower()
        else:
            self.state.role = "relay"  # answers the method, names no host of its own

    async def feed(self, raw: bytes) -> bool:
        """One frame; False when the relay said it is closing."""
        try:
            event = self.wire.decode(raw)
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
                # followed from the oldest event kept: what came before it was missed (F-CUR-3)
                await self._gap(
                    "OutdatedCursor: the stream no longer holds what followed the cursor"
                )
            elif event.name == "FutureCursor":  # v2: the cursor is not this instance's (F-CUR-3)
                await self._gap("FutureCursor: from the present")
            return True
        seq = event.seq
        if seq is not None and not self.wire.plausible(seq):
            self.state.implausible += 1
            self.state.last_error = f"seq {seq} is not one the stream can have sent"
            log.warning(
                json.dumps({"event": "stream_implausible_seq", "url": self.url, "seq": seq})
            )
            return True  # not applied; the cursor stays; the stream goes on
        if self.wire.inclusive and seq is not None and seq == self.state.cursor:
            return True  # the event at the cursor, sent again: applied already
        behind = self.state.cursor is not None and not (
            self.wire.inclusive and self.state.cursor >= V2_TIME  # a time cursor: seqs follow
        )
        if (
            seq is not None
            and self.state.cursor is not None
            and behind
            and seq <= self.state.cursor
        ):
            self.state.backwards += 1
            self.state.last_error = f"seq {seq} is not after the cursor {self.state.cursor}"
            log.warning(
                json.dumps(
                    {
                        "event": "stream_went_back",
                        "url": self.url,
                        "seq": seq,
                        "cursor": self.state.cursor,
                    }
                )
            )
            return False  # not followed: asked again from our cursor, after a back-off
        self.backoff.reset()  # events arrive in order: the connection is good
        self._progress()
        if isinstance(event, Skipped):
            self.state.events[event.kind] += 1
            if seq is not None:
                await self._advance(seq)
            return True
        self.state.events["#identity" if isinstance(event, IdentityEvent) else "#account"] += 1
        self.state.lag_s = _lag(event.time)
        await self.on_event(event)
        await self._advance(event.seq)
        return True

    async def _repair(self, stored: int) -> None:
        """A stored cursor no source can have sent: followed from the present instead."""
        log.warning(json.dumps({"event": "stream_cursor_repaired", "url": self.url, "was": stored}))
        await self._gap(f"stored cursor {stored} is not plausible: from the present")

    async def _gap(self, why: str) -> None:
        """Events may have been missed (the stream is followed from its present): the gap
        counted, logged and handed to `on_gap`."""
        self.state.gaps += 1
        self.state.cursor = None
        self.state.last_error = why
        log.warning(json.dumps({"event": "stream_gap", "url": self.url, "why": why}))
        await self.cursor.save(None)
        if self.on_gap is not None:
            await self.on_gap()

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
