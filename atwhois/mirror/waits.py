"""Questions about DIDs a mirror does not know, held until its follower can answer them
(P-API-2): a sign-up looked up the moment its PDS made it is in the upstream already, or on
its way to the mirror over the upstream's stream.

A question ends as soon as one of these is true, whichever the follower's way of reading:
- an operation for its DID was applied (a poll's page, a stream's message): the store has it;
- a read of the upstream that began after the question has ended (a poll; while following a
  stream, a clean look at the export past the cursor, P-API-4): the view is complete as of
  the question, and a 404 read from it confirms the absence;
- the follower's read failed: no read comes sooner than its back-off, so the 404 the mirror
  has is answered, as not current.

The follower tells of each from its own thread (`applied`, `read_ended`); the questions wait
on the event loop, each woken through `call_soon_threadsafe`, never by looking again and
again. One poke stands for every question waiting (`Follower.poke` is an event: one read for
any number of pokes, reads a poke gap apart); while questions still wait after a read, the
follower is poked again, so a flood of them costs the upstream one read a poke gap at most.
At most `MAX_WAITING` questions are held at once: past that, one is answered at once (its
404 not current), so that nothing here grows with the questions asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Callable
from typing import Any

from .state import MirrorState

MAX_WAITING = 10_000  # questions held at once (one costs a few hundred bytes)


class Ended(enum.Enum):
    """Why a question stopped waiting: after each, the store is read again."""

    APPLIED = "applied"  # an operation for its DID was applied
    CURRENT = "current"  # the view is complete as of the question
    FAILED = "failed"  # the follower's read failed
    TIMEOUT = "timeout"  # the bound passed
    FULL = "full"  # `limit` questions wait already: answered at once
    # something was applied between the question's read and its waiting (a network
    # database's read runs off the loop): maybe its DID, so the store is read before waiting
    MAYBE = "maybe"


class _Waiter:
    __slots__ = ("asked_at", "done")

    def __init__(self, asked_at: float, done: asyncio.Future[Ended]) -> None:
        self.asked_at, self.done = asked_at, done

    def end(self, why: Ended) -> None:
        if not self.done.done():
            self.done.set_result(why)


class Waits:
    def __init__(
        self, state: MirrorState, poke: Callable[[], None], *, limit: int = MAX_WAITING
    ) -> None:
        """`poke`: asks the follower to read the upstream now (coalesced)."""
        self.state = state
        self._poke = poke
        self.limit = limit
        self._loop: asyncio.AbstractEventLoop | None = None
        self._by_did: dict[str, list[_Waiter]] = {}
        self.waiting = 0
        self._told = 0  # batches of applied DIDs handled on the loop

    # --- on the follower's thread --------------------------------------------------------

    def applied(self, dids: list[str]) -> None:
        """Operations for `dids` are written (readers see them). Told on the loop whether
        or not a question waits: one read before this may be waiting to register."""
        self._call(self._on_applied, dids)

    def read_ended(self) -> None:
        """A read of the upstream ended, well or not (`state` says which)."""
        if self.waiting:  # one registering meanwhile looks at the state itself
            self._call(self._on_read_ended)

    def _call(self, handler: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(handler, *args)

    # --- on the event loop --------------------------------------------------------------

    def mark(self) -> int:
        """Taken before a question's read of the store: what `until_known` compares."""
        self._loop = asyncio.get_running_loop()
        return self._told

    def refuses(self) -> bool:
        """Whether a question would not be answered better by waiting: this process does
        not read the upstream (another writes the store), or the follower's last read
        failed (no read comes sooner than its back-off)."""
        return self.state.role != "writer" or self.state.last_error is not None

    async def until_known(self, did: str, asked_at: float, mark: int, give_up: float) -> Ended:
        """Holds a question about `did`, which the store did not have when it was read
        after `mark`, until the follower can answer it, or `give_up` (monotonic) passes."""
        left = give_up - time.monotonic()
        if self.refuses():
            return Ended.FAILED
        if left <= 0:  # first: a question read again after a MAYBE keeps its bound
            return Ended.TIMEOUT
        if self._told != mark:
            return Ended.MAYBE
        if self.state.current_for(asked_at):
            return Ended.CURRENT
        if self.waiting >= self.limit:
            return Ended.FULL
        waiter = _Waiter(asked_at, asyncio.get_running_loop().create_future())
        self._by_did.setdefault(did, []).append(waiter)
        self.waiting += 1
        try:
            self._poke()
            async with asyncio.timeout(left):
                return await waiter.done
        except TimeoutError:
            return Ended.TIMEOUT
        finally:
            self.waiting -= 1
            waiters = self._by_did[did]
            waiters.remove(waiter)
            if not waiters:
                del self._by_did[did]

    def _on_applied(self, dids: list[str]) -> None:
        self._told += 1
        if self.waiting:
            for did in dids:
                for waiter in self._by_did.get(did, ()):
                    waiter.end(Ended.APPLIED)

    def _on_read_ended(self) -> None:
        state, still = self.state, False
        for waiters in self._by_did.values():
            for waiter in waiters:
                if waiter.done.done():
                    continue
                if state.current_for(waiter.asked_at):
                    waiter.end(Ended.CURRENT)
                elif self.refuses():
                    waiter.end(Ended.FAILED)
                else:
                    still = True
        if still:  # its upstream was behind, or the look not clean: read again, a gap on
            self._poke()
