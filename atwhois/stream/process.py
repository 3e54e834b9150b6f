"""An event stream read in a process of its own (issue 55, item 7): the relay's firehose
is ~2,000 frames a second, 99.5 % of them commits that atwhois drops, and decoding them took
half a core of the event loop that answers requests. Here a child process (spawned; it exits
when its parent is gone) runs the `Subscriber` — the WebSocket, the frames, the role, the
back-off — and passes up only what the daemon acts on, in the order it came, over a pipe:
`#identity` and `#account` events, the cursor once they are passed, a snapshot of the
stream's state (for `/_health` and `/metrics`), and a gap when its stored cursor was
repaired. The daemon applies each event (claims stay with the daemon that answers: no other
process stores an answer), then saves the cursor that follows it, so a restart resumes
after the last event applied, never after one merely read.

A child that dies is started again (with back-off) from the last cursor saved; a parent
that is slow to apply events makes the pipe full, and the child stops reading the relay
until it drains (the relay may then drop it: it reconnects from its own cursor).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from typing import Any

from atwhois.foundation import Backoff
from atwhois.foundation.pool import SPAWN, child_process, in_background
from atwhois.foundation.version import agent

from .cursors import Cursor, Position
from .frames import AccountEvent, IdentityEvent
from .subscriber import Subscriber
from .wires import FIREHOSE, JETSTREAM, JETSTREAM2, Wire

log = logging.getLogger("atwhois.stream")
WIRES = {"firehose": FIREHOSE, "jetstream": JETSTREAM, "jetstream2": JETSTREAM2}
STATE_EVERY = 0.25  # seconds between two snapshots of the child's stream state
QUEUE = 1024  # messages from the child waiting to be applied, at most
# ("event", (event, its cursor)) | ("cursor", cursor) | ("state", state) | ("gap", None)
Message = tuple[str, Any]


class StreamProcess:
    """A `Subscriber`'s work in a child process: `run` (until cancelled) as a Subscriber's
    is, with `on_event`, the cursor kept in `cursor`, and `state` as the child last said."""

    def __init__(
        self,
        url: str,
        on_event: Callable[[IdentityEvent | AccountEvent], Awaitable[None]],
        cursor: Cursor,
        *,
        wire: str = "firehose",
        quiet_after: float = 30.0,
        on_gap: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.on_event, self.cursor, self.on_gap = on_event, cursor, on_gap
        self.wire = wire
        self.quiet_after = quiet_after
        self.state = Subscriber(self.url, on_event, cursor, wire=WIRES[wire]).state
        self.restarts = 0
        self._followed = False  # a child was connected (as its snapshots said)
        self._applied: tuple[Position | None] | None = None  # the cursor past what was applied

    async def run(self) -> None:
        """Starts the child, applies what it sends; starts it again if it dies. Stopped
        (cancelled), it saves the cursor past the last event applied."""
        backoff = Backoff(base=0.5, cap=30.0)
        try:
            while True:
                started = await self._follow()
                if started:
                    backoff.reset()
                self.restarts += 1
                wait = backoff.next()
                ended = {"event": "stream_process_ended", "url": self.url, "in_s": round(wait, 2)}
                log.warning(json.dumps(ended))
                await asyncio.sleep(wait)
        finally:
            if self._applied is not None:
                await self.cursor.save(self._applied[0])

    async def _follow(self) -> bool:
        """One child's life; True when it got as far as sending anything."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Message | None] = asyncio.Queue(QUEUE)
        receiving, sending = SPAWN.Pipe(duplex=False)
        # A child before this one followed the stream: without a cursor, a gap (F-CUR-2).
        child = child_process(
            _child,
            sending,
            self.url,
            self.wire,
            await self.cursor.load(),
            self.quiet_after,
            self._followed,
            agent(),  # the child is spawned: it knows nothing of this process's contact
        )
        child.start()
        sending.close()  # the child's end: EOF here once the child is gone
        reader = threading.Thread(target=_relay, args=(receiving, queue, loop), daemon=True)
        reader.start()
        heard = False
        try:
            while (message := await queue.get()) is not None:
                heard = True
                await self._apply(message)
        finally:
            if child.is_alive():
                child.kill()
            await asyncio.to_thread(child.join, 5)
            receiving.close()
        return heard

    async def _apply(self, message: Message) -> None:
        kind, value = message
        if kind == "event":
            event, position = value
            await self.on_event(event)
            self._applied = (position,)
        elif kind == "cursor":
            await self.cursor.save(value)
            self._applied = (value,)
        elif kind == "state":
            self.state = value
            self._followed = self._followed or value.connected
        elif kind == "gap":
            # The child's gap counts the connection from the present that follows it: only a
            # connection under way (the state sent just before says so) is followed since.
            self._followed = self.state.connected
            if self.on_gap is not None:
                await self.on_gap()


def _relay(
    receiving: Connection, queue: asyncio.Queue[Message | None], loop: asyncio.AbstractEventLoop
) -> None:
    """The pipe's messages into the daemon's queue, waiting while it is full; None at the
    end (the child is gone)."""
    try:
        while True:
            message = receiving.recv()
            asyncio.run_coroutine_threadsafe(queue.put(message), loop).result()
    except (EOFError, OSError, RuntimeError):  # the child's end closed; the loop stopping
        pass
    finally:
        if not loop.is_closed():
            asyncio.run_coroutine_threadsafe(queue.put(None), loop)


class _PipeCursor:
    """The child's cursor: it starts where the daemon saved it; what it would save goes up
    the pipe, after the events it follows."""

    def __init__(
        self, sending: Connection, position: Position | None, saved: Callable[[], None]
    ) -> None:
        self.sending, self.position, self.saved = sending, position, saved

    async def load(self) -> Position | None:
        return self.position

    async def save(self, position: Position | None) -> None:
        self.sending.send(("cursor", position))
        self.saved()


def _child(
    sending: Connection,
    url: str,
    wire: str,
    cursor: Position | None,
    quiet_after: float,
    followed_before: bool,
    user_agent: str,
) -> None:
    import uvloop

    # Decoding a relay's burst (ten times its usual rate, 99.5 % of it dropped) waits for
    # the answers: the events are behind a moment, no answer is (issue 69).
    in_background()
    uvloop.run(_read(sending, url, WIRES[wire], cursor, quiet_after, followed_before, user_agent))


async def _read(
    sending: Connection,
    url: str,
    wire: Wire,
    cursor: Position | None,
    quiet_after: float,
    followed_before: bool,
    user_agent: str,
) -> None:

    async def on_event(event: IdentityEvent | AccountEvent) -> None:
        # The state goes up before the event and after its cursor: whom the stream speaks
        # for decides what an #account event may do, and what the daemon says of the stream
        # (its counts, its cursor) is never behind what it applied. Such events are few.
        snapshot()
        # its cursor as the wire that read it says (a v2 seq, or a v1 time after a fallback)
        sending.send(("event", (event, subscriber.wire.position(event.seq))))

    async def on_gap() -> None:
        sending.send(("gap", None))

    subscriber = Subscriber(
        url,
        on_event,
        _PipeCursor(sending, cursor, lambda: snapshot()),
        quiet_after=quiet_after,
        wire=wire,
        on_gap=on_gap,
        followed_before=followed_before,
        user_agent=user_agent,
    )

    def snapshot() -> None:
        sending.send(("state", subscriber.state))

    async def snapshots() -> None:
        while True:
            snapshot()
            await asyncio.sleep(STATE_EVERY)

    await asyncio.gather(subscriber.run(), snapshots())
