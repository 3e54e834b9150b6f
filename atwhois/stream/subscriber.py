"""Following one relay's (or PDS's) `com.atproto.sync.subscribeRepos`, or a Jetstream
(`wires`: v1's `/subscribe` and v2's `subscribeEvents`, the same events as JSON): connect,
decode each frame (`frames`), hand identity and account events to the daemon, remember the
cursor in the cache store, and reconnect with jittered back-off when the connection drops.

What it does with a frame:
- `#identity`, `#account`: to `on_event`, in order; their `seq` (a Jetstream v1 message's
  time) becomes the cursor.
- `#commit`, `#sync`: skipped; their `seq` becomes the cursor. A message of a type not
  known yet is skipped and moves no cursor (Jetstream v2: as the reference client does).
- `#info OutdatedCursor`: the source no longer has what came after our cursor and starts
  from its oldest event (a relay; a Jetstream v2 instance clamping a time cursor): a gap
  (F-CUR-3), counted and logged; the stream goes on. An `#info` carries no seq.
- an error frame: the source closes; we reconnect from the cursor last applied, after a
  back-off. No error ends the following (F-CUR-5). A relay's `FutureCursor` means our
  cursor is ahead of it (a relay that lost state, or another relay): the cursor is dropped
  first. Jetstream v2 sends `ConsumerTooSlow` (we read too slowly: asked again from where
  we are) and `InternalError` (its read failed: the same).
- the upgrade refused before it happened: an instance without the path (404) is followed on
  the wire's fallback (Jetstream v1); a 400 is read for its XRPC error name (a plain GET of
  the same URL): `CursorTooOld` (below a Jetstream v2 instance's retention floor) is a gap,
  followed from the present (F-CUR-3); any other (`InvalidRequest`, `UnknownZstdDictionary`,
  a body that names none) is a failure, said in `last_error`, asked again after a back-off,
  never a gap (F-CUR-5).
- a malformed frame: counted and skipped (a stranger's bytes never stop the stream).
- a `seq` not after the cursor (the relay went back, or restarted with lower numbers; a
  Jetstream v1 time at the cursor's own is not that: the reference gives a whole batch of
  events one time): an upstream fault, counted and reported; the event is not applied,
  the connection is closed and opened again, with back-off, from our cursor. A relay that
  lost its numbers answers that with `FutureCursor`, and only then is it followed from its
  present (it said so). A Jetstream v2 instance starts a seq it has not reached yet at its
  live tip without a word: a resumed connection whose first event is below our cursor is
  that, a gap (F-CUR-3), and is followed from there.
- a cursor no source can have sent (F-CUR-1, `Wire.plausible`: a Jetstream time more than
  `FUTURE_MARGIN` ahead of now or before 10^15 µs, a Jetstream v2 seq of 10^15 or more, a
  relay's seq past 2^53): counted (`implausible`), not applied, the cursor not moved: one
  forged message cannot move the cursor where every later event looks old. A stored cursor
  that is not plausible either (written before this rule) is repaired when it is loaded: the
  stream is followed from its present, and the gap (what may have been missed) is counted
  and handed to `on_gap`, which re-verifies what the daemon holds. A cursor of a kind the
  wire cannot be asked from (a v2 seq, on an instance that turned out to have only v1) is a
  gap the same way (F-CUR-4).
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
from collections.abc import Awaitable, Callable

import aiohttp
import yarl

from atwhois.foundation import Backoff
from atwhois.foundation.version import agent
from atwhois.resolver.untrusted import parse_json

from .cursors import Cursor, Position, Time
from .frames import (
    MESSAGE_CHARS,
    NAME_CHARS,
    AccountEvent,
    ErrorFrame,
    IdentityEvent,
    InfoEvent,
    MalformedFrame,
    Skipped,
)
from .state import StreamState, kind_of
from .wires import FIREHOSE, Wire

log = logging.getLogger("atwhois.stream")
OnEvent = Callable[[IdentityEvent | AccountEvent], Awaitable[None]]
YIELD_EVERY = 16  # messages read before the event loop serves what else is waiting
ANSWER_BYTES = 64 * 1024  # read of an HTTP answer beside the stream (describeServer, a 400)


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
        self._asked: Position | None = None  # the cursor this connection asked from, until an event

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
        cursor = self.state.cursor
        if cursor is not None:
            asked = self.wire.resume(cursor)
            if asked is None:  # a v2 seq, and the instance turned out to have only v1
                await self._gap(f"{_said(cursor)} cannot be asked of {self.wire.path}")
            else:
                params.append(("cursor", asked))
        self._asked = self.state.cursor
        try:
            await self._connected(session, params)
        except aiohttp.WSServerHandshakeError as err:
            await self._refused(session, err, params)

    async def _refused(
        self,
        session: aiohttp.ClientSession,
        err: aiohttp.WSServerHandshakeError,
        params: list[tuple[str, str]],
    ) -> None:
        """The upgrade was refused. An instance without this path (404) is followed on the
        wire's fallback (Jetstream v1). A 400 names its XRPC error: `CursorTooOld` (below a
        v2 instance's retention floor) is a gap (F-CUR-3), and the stream goes on from the
        present; anything else is a failure, asked again after a back-off."""
        fallback = self.wire.fallback
        if err.status == 404 and fallback is not None:
            log.warning(
                json.dumps({"event": "stream_fallback", "url": self.url, "to": fallback.path})
            )
            self.wire = fallback
            return
        if err.status != 400:
            raise ConnectionError(f"the upgrade was refused: HTTP {err.status} {err.message}")
        name, said = await self._xrpc_error(session, params)
        if name == "CursorTooOld" and self.state.cursor is not None:
            await self._gap(f"{_said(self.state.cursor)} refused: CursorTooOld: {said}")
            return
        raise ConnectionError(
            f"the upgrade was refused: HTTP 400 {name or 'no XRPC error'}: {said}"
        )

    async def _xrpc_error(
        self, session: aiohttp.ClientSession, params: list[tuple[str, str]]
    ) -> tuple[str | None, str]:
        """The XRPC error name and message of a refused upgrade. aiohttp keeps no body of a
        failed handshake; the reference answers the same URL without the upgrade the same
        way (it checks the parameters and the cursor first), so it is asked again, plainly."""
        try:
            status, body = await self._get(session, _over_http(self.url + self.wire.path), params)
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as err:
            return None, f"asked again: {type(err).__name__}: {err}"
        try:
            answer = parse_json(body)
        except ValueError:
            answer = None
        error = answer.get("error") if isinstance(answer, dict) else None
        if status != 400 or not isinstance(error, str) or not isinstance(answer, dict):
            return None, f"asked again: HTTP {status}"
        said = answer.get("message")
        return error[:NAME_CHARS], said[:MESSAGE_CHARS] if isinstance(said, str) else ""

    async def _get(
        self, session: aiohttp.ClientSession, url: yarl.URL, params: list[tuple[str, str]]
    ) -> tuple[int, bytes]:
        """A GET beside the stream: its status and the first `ANSWER_BYTES` of its body."""
        async with session.get(
            url, params=params, timeout=aiohttp.ClientTimeout(total=10)
        ) as answer:
            body = b""
            while len(body) < ANSWER_BYTES:
                chunk = await answer.content.read(ANSWER_BYTES - len(body))
                if not chunk:
                    break
                body += chunk
            return answer.status, body

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
        describe = _over_http(self.url).with_path("/xrpc/com.atproto.server.describeServer")
        try:
            status, body = await self._get(session, describe, [])
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
        """One frame; False when the source said it is closing."""
        try:
            event = self.wire.decode(raw)
        except MalformedFrame as err:
            self.state.malformed += 1
            self.state.last_error = str(err)
            return True
        if isinstance(event, ErrorFrame):  # the source closes: asked again from our cursor
            self.state.events["error"] += 1
            self.state.last_error = f"{event.error}: {event.message or ''}".strip()
            if event.error == "FutureCursor" and self.wire.future_cursor_error:
                self.state.cursor = None  # ahead of this relay: start from its present
            return False
        if isinstance(event, InfoEvent):  # no seq: the cursor stays
            self.state.events["#info"] += 1
            if event.name == "OutdatedCursor":
                self.state.outdated_cursor += 1
                log.warning(json.dumps({"event": "stream_outdated_cursor", "url": self.url}))
                # followed from the oldest event kept: what came before it was missed (F-CUR-3)
                await self._gap(
                    "OutdatedCursor: the stream no longer holds what followed the cursor"
                )
            return True
        if event.seq is not None:
            placed = await self._place(self.wire.position(event.seq))
            if placed is not None:
                return placed
        self.backoff.reset()  # events arrive in order: the connection is good
        self._progress()
        if isinstance(event, Skipped):
            self.state.events[event.kind] += 1
            if event.seq is not None:
                await self._advance(self.wire.position(event.seq))
            return True
        self.state.events["#identity" if isinstance(event, IdentityEvent) else "#account"] += 1
        self.state.lag_s = _lag(event.time)
        await self.on_event(event)
        await self._advance(self.wire.position(event.seq))
        return True

    async def _place(self, position: Position) -> bool | None:
        """None: an event at `position` is applied. Else it is not, and the stream goes on
        (True) or the connection is closed (False)."""
        asked, self._asked = self._asked, None
        cursor = self.state.cursor
        if not self.wire.plausible(position):
            self.state.implausible += 1
            self.state.last_error = f"{_said(position)} is not one the stream can have sent"
            log.warning(
                json.dumps(
                    {"event": "stream_implausible_seq", "url": self.url, "seq": position.value}
                )
            )
            return True  # not applied; the cursor stays; the stream goes on
        # a first event, or a v2 instance's seq after the time a v1 run left: no order to keep
        if cursor is None or type(cursor) is not type(position):
            return None
        if self.wire.inclusive and position == cursor:
            return True  # the event at the cursor, sent again: applied already
        # v1 messages may share a time_us: the reference stamps a batch of events with one time
        if position.value > cursor.value or (isinstance(position, Time) and position == cursor):
            return None
        if self.wire.inclusive and asked == cursor:
            # a v2 instance starts a seq it has not reached at its live tip, without a word
            await self._gap(f"{_said(position)} after asking from {_said(cursor)}: its live tip")
            return None
        self.state.backwards += 1
        self.state.last_error = f"{_said(position)} is not after the cursor {cursor.value}"
        log.warning(
            json.dumps(
                {
                    "event": "stream_went_back",
                    "url": self.url,
                    "seq": position.value,
                    "cursor": cursor.value,
                }
            )
        )
        return False  # not followed: asked again from our cursor, after a back-off

    async def _repair(self, stored: Position) -> None:
        """A stored cursor no source can have sent: followed from the present instead."""
        was = {"event": "stream_cursor_repaired", "url": self.url, "was": stored.value}
        log.warning(json.dumps(was))
        await self._gap(f"stored cursor {_said(stored)} is not plausible: from the present")

    async def _gap(self, why: str) -> None:
        """Events may have been missed (the stream is followed from its present): the gap
        counted, logged and handed to `on_gap`."""
        self.state.gaps += 1
        self.state.cursor = None
        # The connection this gap opens from the present is the one it counts: not a gap
        # again (F-CUR-2) unless a connection is made and lost before a cursor. A refused
        # CursorTooOld counted twice without this.
        self._followed = False
        self.state.last_error = why
        log.warning(json.dumps({"event": "stream_gap", "url": self.url, "why": why}))
        await self.cursor.save(None)
        if self.on_gap is not None:
            await self.on_gap()

    async def _advance(self, position: Position) -> None:
        self.state.cursor = position
        now = time.monotonic()
        if now - self._saved_at >= self.save_every:
            self._saved_at = now
            await self.cursor.save(position)


def _said(position: Position) -> str:
    return f"{kind_of(position)} {position.value}"


def _over_http(url: str) -> yarl.URL:
    """A stream's ws(s) URL as the http(s) one of the same host and path."""
    parsed = yarl.URL(url)
    return parsed.with_scheme("https" if parsed.scheme in ("wss", "https") else "http")


def _lag(stamp: str) -> float | None:
    with contextlib.suppress(ValueError):
        moment = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        if moment.tzinfo is not None:
            return time.time() - moment.timestamp()
    return None
