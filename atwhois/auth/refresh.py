"""The refresh-once rule, for every verifier of signed data: a verdict a kept document may
have made wrong (a token's signature refused under it, SA-SIG-2; a record's commit, or its
PDS's refusal, R-REC-8) gets that document resolved afresh, once for every caller asking
at the same time, and not within `every` seconds of its last resolution, the kept one's
included: a flood of refusals for one DID costs its directory one resolution every `every`
seconds, however many callers, whatever they send.

    refresher = Refresher(lambda did: directory.document(did, fresh=True))
    if kept(identity):
        fresh = await refresher.refresh(did, identity)  # None: resolved lately, ask nothing
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Awaitable, Callable

from atwhois.foundation.lru import Lru
from atwhois.resolver.identity import Identity

REFRESH_EVERY = 5.0  # seconds: at most one resolution of a DID's document for refusals
REFRESHED_KEPT = 1 << 20  # bytes for the last refreshes (~100 bytes each)


class Refresher:
    """Identities resolved afresh by `resolve` (given the key a caller names them by: a DID,
    or a record's authority), at most one per key every `every` seconds of `clock`, which is
    the clock the kept identities' `checked_at` were read from. `count`: the refreshes it
    asked of `resolve`."""

    def __init__(
        self,
        resolve: Callable[[str], Awaitable[Identity]],
        *,
        every: float = REFRESH_EVERY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.resolve, self.every, self.clock = resolve, every, clock
        self._refreshed: Lru[str, float] = Lru(REFRESHED_KEPT, lambda key, _: 60 + len(key))
        self._refreshing: dict[str, asyncio.Task[Identity]] = {}
        self.count = 0

    async def refresh(self, key: str, used: Identity) -> Identity | None:
        """`key`'s identity resolved afresh: once for every caller asking at the same time,
        and not within `every` seconds of the last resolution of it, `used`'s included
        (None: resolved lately, nothing new to ask)."""
        task = self._refreshing.get(key)
        if task is None:
            now = self.clock()
            last = max(self._refreshed.get(key) or 0.0, resolved_at(used))
            if now - last < self.every:
                return None
            self._refreshed.put(key, now)
            self.count += 1
            task = self._refreshing[key] = asyncio.ensure_future(self.resolve(key))
            task.add_done_callback(lambda _: self._refreshing.pop(key, None))
        # one caller giving up does not cancel the refresh the others wait for
        return await asyncio.shield(task)


def kept(identity: Identity) -> bool:
    """Whether the identity came from a cache: only a kept one is refreshed (one resolved
    for this verification is as fresh as a refresh would make it)."""
    return identity.cache is not None and identity.cache.cached


def resolved_at(identity: Identity) -> float:
    """When the document `identity` rests on was resolved (0: unknown)."""
    try:
        return datetime.datetime.fromisoformat(identity.checked_at).timestamp()
    except ValueError:
        return 0.0
