"""Where the nonces seen are kept (SA-JTI-2's replay check), apart from the cache's entries:
never in an LRU, never evicted while live, never counted against what identities may use.

Each nonce is held under its issuer's *share* until its token expires; a claim records it
only when it is new and the share holds fewer than its limit, in one step also among the
processes that share the store: a transaction in SQLite, a script in Redis over one key per
share (hash-tagged `{nonce:SHARE}`, so that a Redis Cluster holds a share on one node).
`MemoryNonces` keeps them in this process: the check then lasts as long as it.
"""

from __future__ import annotations

import heapq
import sqlite3
from typing import Literal, Protocol

from atwhois.resolver.errors import AtwhoisError

# first: recorded now; seen: held already (a replay); share: the share is full, not recorded
Claim = Literal["first", "seen", "share"]
_SWEEP_EVERY = 1000  # claims between deletions of every share's expired nonces (SQLite)


class NoncesUnavailable(AtwhoisError):
    """The store of the nonces could not be asked: whether a nonce was seen is unknown."""


class NonceStore(Protocol):
    name: str
    shared: bool  # whether other processes see the same nonces

    async def claim(
        self, share: str, nonce: str, expires_at: float, limit: int, now: float
    ) -> Claim:
        """Record `nonce` under `share` until `expires_at`, unless it is held there already
        or `share` holds `limit` live nonces at `now`: atomically, among processes too.
        Raises `NoncesUnavailable` when the store cannot be asked."""
        ...


class MemoryNonces:
    """In this process: a map per share and a heap of expiry times, never evicting."""

    name = "memory"
    shared = False

    def __init__(self) -> None:
        self._shares: dict[str, dict[str, float]] = {}
        self._expiring: list[tuple[float, str, str]] = []  # (expires_at, share, nonce)

    def __len__(self) -> int:
        return len(self._expiring)

    async def claim(
        self, share: str, nonce: str, expires_at: float, limit: int, now: float
    ) -> Claim:
        while self._expiring and self._expiring[0][0] <= now:
            _, gone_share, gone = heapq.heappop(self._expiring)
            held = self._shares[gone_share]
            del held[gone]  # one heap item per live nonce: a nonce is held once at a time
            if not held:
                del self._shares[gone_share]
        held = self._shares.get(share, {})
        if nonce in held:
            return "seen"
        if len(held) >= limit:
            return "share"
        self._shares[share] = held
        held[nonce] = expires_at
        heapq.heappush(self._expiring, (expires_at, share, nonce))
        return "first"


SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS nonces (
    share TEXT NOT NULL,
    nonce TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (share, nonce)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS nonces_expiry ON nonces (expires_at);
"""


class SqliteNonces:
    """In the SQLite cache file's `nonces` table (`SqliteStore.nonces`), which the processes
    on its host share: a claim is one `BEGIN IMMEDIATE` transaction."""

    name = "sqlite"
    shared = True

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._claims = 0

    async def claim(
        self, share: str, nonce: str, expires_at: float, limit: int, now: float
    ) -> Claim:
        try:
            return self._claim(share, nonce, expires_at, limit, now)
        except sqlite3.Error as err:  # locked past the busy timeout, a disk full, …
            raise NoncesUnavailable(f"SQLite: {err}") from err

    def _claim(self, share: str, nonce: str, expires_at: float, limit: int, now: float) -> Claim:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            self._claims += 1
            if self._claims % _SWEEP_EVERY == 0:  # shares whose issuers never came back
                db.execute("DELETE FROM nonces WHERE expires_at <= ?", (now,))
            else:
                db.execute("DELETE FROM nonces WHERE share = ? AND expires_at <= ?", (share, now))
            held = "SELECT 1 FROM nonces WHERE share = ? AND nonce = ?"
            count = "SELECT count(*) FROM nonces WHERE share = ?"
            if db.execute(held, (share, nonce)).fetchone():
                claim: Claim = "seen"
            elif db.execute(count, (share,)).fetchone()[0] >= limit:
                claim = "share"
            else:
                db.execute("INSERT INTO nonces VALUES (?, ?, ?)", (share, nonce, expires_at))
                claim = "first"
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return claim
