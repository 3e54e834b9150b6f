"""A memory tier in front of a shared store (SQLite, Redis): what a daemon reads comes from
memory, and must not be older there than in the store.

- While the tier follows the store's changes (`watch`: Redis pub/sub, SQLite's data
  version), a memory entry is dropped as soon as another process changes or purges it; when
  it cannot follow them, a value read from below is trusted for half a second only. Once
  following again, what memory held is read from below again before it answers (changes
  may have been missed meanwhile), but kept: while the store below fails it still answers.
- A store that can lose writes it acknowledged (a Redis Cluster's failover) says so
  (`failovers`): the tier tells `gaps`, which re-verify what is held.
- When the store below fails, the tier answers alone: degraded, never failing. Failures
  are counted and described (`health`), the store is left alone for a second (a cluster's,
  a fifth of one) before it is tried again, and the keys it could not be told about are
  deleted there once it answers again, so an old value is never read back after a write
  or purge it missed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from atwhois.resolver.errors import AtwhoisError

from .base import OnChange, Store, Stored
from .memory import Decoder, MemoryStore, Slot
from .nonces import NonceStore

T = TypeVar("T")
log = logging.getLogger("atwhois.cache")

_UNWATCHED_TRUST = 0.5  # seconds a value read from below is trusted when changes are not followed
_RETRY_AFTER = 1.0  # seconds the store below is left alone after a failure
_DEGRADED_FOR = 5.0  # seconds a failure keeps the tier reported as degraded
_MAX_UNSYNCED = 10_000  # keys remembered for deletion below once it answers again


class StoreUnavailable(AtwhoisError):
    """The store below did not take a change (a purge); the memory tier did."""


_STOP_WITHIN = 2.0  # seconds the watch of a closing tier may take to stop


class _Failed:
    """What a call to the store below gives when it failed or was not tried."""


_FAILED = _Failed()


class TieredStore:
    def __init__(
        self,
        memory: MemoryStore,
        below: Store,
        *,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.memory = memory
        self.below = below
        self.name = f"memory+{below.name}"
        # told of the keys changed, here or by other processes (None: anything may have)
        self.listeners: list[OnChange] = memory.listeners
        self.announce = memory.announce
        # told when the store below may have lost writes (what is held is re-verified)
        self.gaps: list[Callable[[], None]] = []
        self._failovers = 0  # the store's failovers the gaps were told of
        # seconds the store is left alone after a failure: its own, where it has one (a
        # cluster's: the end of its failover is told to nobody)
        self._retry_after: float = getattr(below, "retry_after", _RETRY_AFTER)
        self.errors = 0  # failures of the store below, ever
        # Entries expire by the memory tier's clock; how long the store below is trusted or
        # left alone is a matter of elapsed real time.
        self._timer = timer
        self._error: str | None = None
        self._failed_at = 0.0
        self._retry_at = 0.0
        self._unsynced: dict[str, None] = {}  # keys to delete below when it answers again
        self._writing: dict[str, int] = {}  # keys with a write on its way below: how many
        self._watcher: asyncio.Task[None] | None = None
        self._watching = False
        self._trusted_from = 0.0  # memory's values read before are read again (by the timer)
        self._watch_error: str | None = None
        self._changes = 0  # notices of other processes' changes received, ever
        self._closed = False

    # --- reads ------------------------------------------------------------------------

    async def get(self, key: str) -> Stored | None:
        slot = await self._current(key)
        return Stored(slot.value, slot.expires_at) if slot is not None else None

    async def decoded(self, key: str, decode: Decoder) -> Any:
        slot = await self._current(key)
        return self.memory.decode(key, slot, decode) if slot is not None else None

    async def _current(self, key: str) -> Slot | None:
        self._follow_changes()
        slot = self.memory.slot(key)
        now = self._timer()
        followed = self._watching and slot is not None and slot.loaded_at >= self._trusted_from
        if slot is not None and (followed or now - slot.loaded_at < _UNWATCHED_TRUST):
            return slot
        changes = self._changes
        found = await self._below(lambda: self.below.get(key))
        if isinstance(found, _Failed):
            return slot  # degraded: memory is all there is
        if found is None:
            await self.memory.delete([key])
            return None
        if self._changes != changes:
            # A change was announced while this value was on its way: it may be older than
            # the change, so it answers this read only and is not kept.
            return Slot(found.value, found.expires_at)
        if slot is None or slot.value != found.value:
            return self.memory.keep(key, found.value, found.expires_at, now)
        self.memory.refresh(key, now, found.expires_at)  # the slot is a copy: said to memory
        slot.loaded_at, slot.expires_at = now, found.expires_at
        return slot

    # --- writes -----------------------------------------------------------------------

    async def put(self, key: str, value: bytes, expires_at: float) -> None:
        self.memory.keep(key, value, expires_at, self._timer())
        self.announce([key])
        self._writing[key] = self._writing.get(key, 0) + 1
        try:
            written = await self._below(lambda: self.below.put(key, value, expires_at))
        finally:
            if self._writing[key] == 1:
                del self._writing[key]
            else:
                self._writing[key] -= 1
        if isinstance(written, _Failed):
            self._remember_unsynced([key])

    def nonces(self) -> NonceStore:
        """The store below's, which other processes share: none in memory, where they
        would push identities out (and one process's memory cannot rule out a replay)."""
        return self.below.nonces()

    def spare(self, keys: Iterable[str]) -> None:
        """Drop these entries from memory, where the store below holds them as they are: the
        caller keeps what it needs of them (the daemon's rendered answers; a hot identity
        was held twice, issue 18), and a read brings them back. Not while the store below
        fails or has changes to catch up on (memory then answers for it), nor while a write
        of the key is on its way there (memory holds the newer value)."""
        if self._error is not None:  # also while it has missed writes: they end together
            return
        for key in keys:
            if key not in self._writing:
                self.memory.forget(key)

    async def delete(self, keys: Iterable[str]) -> None:
        """Raises `StoreUnavailable` when the store below did not take it (it is retried
        there once the store answers again)."""
        keys = list(keys)
        await self.memory.delete(keys)  # which tells the listeners
        if isinstance(await self._below(lambda: self.below.delete(keys)), _Failed):
            self._remember_unsynced(keys)
            raise StoreUnavailable(f"{self.below.name}: {self._error or 'unavailable'}")

    def _remember_unsynced(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._unsynced[key] = None
        while len(self._unsynced) > _MAX_UNSYNCED:
            del self._unsynced[next(iter(self._unsynced))]

    # --- the store below, failing ------------------------------------------------------

    async def _below(self, call: Callable[[], Awaitable[T]]) -> T | _Failed:
        if self._timer() < self._retry_at:
            return _FAILED
        try:
            result = await call()
        except Exception as err:  # whatever the store raises, the tier answers alone
            self._fail(err)
            return _FAILED
        if self._error is not None or self._unsynced:
            await self._resync()
        return result

    def _fail(self, err: Exception) -> None:
        now = self._timer()
        self.errors += 1
        if self._error is None:
            log.warning("cache store %s failed, answering from memory", self.below.name)
        self._error = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        self._failed_at, self._retry_at = now, now + self._retry_after

    async def _resync(self) -> None:
        """The store answers again: delete there what it missed, then say so."""
        keys, errors = list(self._unsynced), self.errors
        try:
            if keys:
                await self.below.delete(keys)
        except Exception as err:
            self._fail(err)
            return
        for key in keys:
            self._unsynced.pop(key, None)
        if self.errors != errors:
            return  # another call failed meanwhile: its error and its keys stand
        if self._error is not None:
            log.warning("cache store %s answers again", self.below.name)
        self._error = None

    async def health(self) -> list[str]:
        """Why the tier is degraded (empty: it is not). Tries the store below first when
        it failed or has changes to replay there (the probe replays them), so the answer
        recovers by itself, without waiting for a request that writes."""
        if self._error is not None or self._unsynced:
            await self._below(lambda: self.below.get("health:probe"))
        reasons = []
        if self._error is not None and self._timer() - self._failed_at < _DEGRADED_FOR:
            reasons.append(f"cache store {self.below.name} failing, answering from memory")
        elif self._error is not None or self._unsynced:
            reasons.append(f"cache store {self.below.name} missed changes not yet replayed")
        if self._watcher is not None and not self._watching:
            why = f": {self._watch_error}" if self._watch_error else ""
            reasons.append(f"changes by other processes are not followed{why}")
        return reasons

    @property
    def used_bytes(self) -> int:
        return self.memory.used_bytes

    # --- following other processes' changes ------------------------------------------

    def _follow_changes(self) -> None:
        if self._watcher is None and not self._closed and hasattr(self.below, "watch"):
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        backoff = 0.1
        while not self._closed:
            try:
                await self.below.watch(self._changed, self._following)  # type: ignore[attr-defined]
            except Exception as err:
                self._watch_error = f"{type(err).__name__}: {err}"
            if self._watching:
                backoff = 0.1
            self._watching = False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def _following(self) -> None:
        # What changed while nobody listened is unknown: what memory holds is read again
        # from the store (once it has been told what it missed, so nothing dropped is read
        # back from it) before it answers, and answers alone while the store fails (a
        # cluster's failover: forgotten, a held identity would be resolved anew, or missed).
        await self._resync()
        self._changes += 1
        self._trusted_from = self._timer()
        self.announce(None)
        self._watching, self._watch_error = True, None
        failovers = getattr(self.below, "failovers", 0)  # only a cluster's store has them
        if failovers != self._failovers:
            self._failovers = failovers
            # The store just named its new masters: it is asked again at once, not after
            # a pause its failover earned, so the pass walks what it holds, not memory.
            self._retry_at = 0.0
            for gap in self.gaps:
                gap()

    def _changed(self, keys: Sequence[str] | None) -> None:
        self._changes += 1
        if keys is None:
            self.memory.clear()
        else:
            for key in keys:
                self.memory.forget(key)
        self.announce(keys)

    @property
    def following(self) -> bool:
        """Whether other processes' changes reach `listeners` now (else what was read from
        below is trusted for half a second only)."""
        return self._watching

    # --- the rest ---------------------------------------------------------------------

    async def scan(self, prefix: str, limit: int) -> list[tuple[str, bytes]]:
        found = await self._below(lambda: self.below.scan(prefix, limit))
        return await self.memory.scan(prefix, limit) if isinstance(found, _Failed) else found

    async def walk(self, prefix: str, limit: int, position: str = "") -> tuple[list[str], str]:
        found = await self._below(lambda: self.below.walk(prefix, limit, position))
        if isinstance(found, _Failed):  # what memory holds (a position from below: anew)
            return await self.memory.walk(prefix, limit, position)
        return found

    async def count(self) -> int:
        counted = await self._below(self.below.count)
        return await self.memory.count() if isinstance(counted, _Failed) else counted

    async def close(self) -> None:
        self._closed = True
        watcher = self._watcher
        if watcher is not None:
            watcher.cancel()
            await asyncio.sleep(0)  # its chance to stop as asked
        await self.memory.close()
        # A read of redis-py's may swallow the cancellation and wait on: closing the store's
        # connections ends it, and the watcher then sees the tier closed.
        await self.below.close()
        if watcher is not None:
            await asyncio.wait({watcher}, timeout=_STOP_WITHIN)
            if watcher.done() and not watcher.cancelled():
                watcher.exception()  # retrieved: a closed store's watch has nothing to say


Tier = MemoryStore | TieredStore  # what a `CachedResolver` reads through


def in_memory(
    store: Store, max_bytes: int = 64 * 1024 * 1024, clock: Callable[[], float] = time.time
) -> Tier:
    """`store` with a memory tier in front, unless it is one or has one already."""
    if isinstance(store, MemoryStore | TieredStore):
        return store
    return TieredStore(MemoryStore(max_bytes, clock), store)
