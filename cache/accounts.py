"""Accounts that are not active (deactivated, takendown, suspended, deleted, ...), as an
event stream said: the DID document still resolves, the account does not serve. One map a
daemon's resolvers share (its lookups and its audits), kept in the store across restarts as
a row per DID (`account:{did}`), so that an event costs one write whatever the number of
accounts marked, and bounded in number (`MAX_MARKED`): past it, new marks are refused and
counted, never an unbounded map."""

from __future__ import annotations

import contextlib
import json

from .stores import Store, StoreUnavailable

PREFIX = "account:"  # the store rows: account:{did} -> its status
LEGACY_KEY = "stream-inactive-accounts"  # one entry {did: status}, as earlier versions kept
KEEP = 365 * 24 * 3600.0
MAX_MARKED = 100_000


class AccountStates:
    def __init__(self, max_marked: int = MAX_MARKED) -> None:
        self._inactive: dict[str, str] = {}
        self.max_marked = max_marked
        self.refused = 0  # marks past `max_marked`

    def status(self, did: str) -> str | None:
        """Why the account of `did` is not active, or None while it is (or nobody said)."""
        return self._inactive.get(did) if self._inactive else None

    def __len__(self) -> int:
        return len(self._inactive)

    async def mark(self, store: Store, did: str, status: str | None, now: float) -> bool:
        """`did`'s account is `status` (None: active), here and in the store; whether that
        changed anything (a mark past the bound changes nothing: it is counted)."""
        before = self._inactive.get(did)
        if status == before:
            return False
        if status is None:
            del self._inactive[did]
            with contextlib.suppress(StoreUnavailable):  # the store is told once it answers
                await store.delete([PREFIX + did])
            return True
        if before is None and len(self._inactive) >= self.max_marked:
            self.refused += 1
            return False
        self._inactive[did] = status
        await store.put(PREFIX + did, status.encode(), now + KEEP)
        return True

    async def load(self, store: Store, now: float) -> None:
        """What an earlier run kept (rows, and the one entry of earlier versions, moved to
        rows); unreadable ones are ignored: the stream says again."""
        for key, value in await store.scan(PREFIX, self.max_marked):
            with contextlib.suppress(UnicodeDecodeError):
                self._inactive[key.removeprefix(PREFIX)] = value.decode()
        legacy = await store.get(LEGACY_KEY)
        if legacy is None:
            return
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            for did, status in dict(json.loads(legacy.value)).items():
                if isinstance(did, str) and isinstance(status, str):
                    await self.mark(store, did, status, now)
        await store.delete([LEGACY_KEY])
