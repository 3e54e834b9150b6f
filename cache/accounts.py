"""Accounts that are not active (deactivated, takendown, suspended, deleted, ...), as an
event stream said: the DID document still resolves, the account does not serve. One map a
daemon's resolvers share (its lookups and its audits), kept in the store across restarts."""

from __future__ import annotations

import contextlib
import json

from .stores import Store

STORE_KEY = "stream-inactive-accounts"  # the store entry: {did: status}
KEEP = 365 * 24 * 3600.0


class AccountStates:
    def __init__(self) -> None:
        self._inactive: dict[str, str] = {}

    def status(self, did: str) -> str | None:
        """Why the account of `did` is not active, or None while it is (or nobody said)."""
        return self._inactive.get(did) if self._inactive else None

    def mark(self, did: str, status: str | None) -> bool:
        """`did`'s account is `status` (None: active); whether that changed anything."""
        before = self._inactive.get(did)
        if status is None:
            self._inactive.pop(did, None)
        else:
            self._inactive[did] = status
        return self._inactive.get(did) != before

    async def save(self, store: Store, now: float) -> None:
        await store.put(STORE_KEY, json.dumps(self._inactive).encode(), now + KEEP)

    async def load(self, store: Store) -> None:
        """What an earlier run saved (an unreadable entry is ignored: the stream says again)."""
        stored = await store.get(STORE_KEY)
        if stored is not None:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                self._inactive.update(json.loads(stored.value))
