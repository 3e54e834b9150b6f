"""What event streams say about accounts (`#account`, Sync 1.1): one table of the statuses
(`STATUSES`) and what a reader sees for each, and the marks a daemon's resolvers share (its
lookups and its audits).

- `active: false`, whatever the status (deactivated, takendown, suspended, deleted, or one
  not known yet): the DID document still resolves, the account does not serve: every answer
  about the DID is `did_deactivated`, with the status and what it means as the reason.
- `active: true` with `desynchronized` or `throttled`: the account serves; the relay says
  its repository is out of sync, or its host's events are being held back. Answers stay
  what they are, with a warning (`account_desynchronized`, `account_throttled`).
- `active: true` with no status (or another): the account serves; any mark is lifted.

Kept in the store across restarts as a row per DID (`account:{did}`), so that an event costs
one write whatever the number of accounts marked, and bounded in number (`MAX_MARKED`):
past it, new marks are refused and counted, never an unbounded map."""

from __future__ import annotations

import contextlib
import json
from typing import NamedTuple

from .stores import Store, StoreUnavailable

PREFIX = "account:"  # the store rows: account:{did} -> its status ("active:" when it serves)
LEGACY_KEY = "stream-inactive-accounts"  # one entry {did: status}, as earlier versions kept
KEEP = 365 * 24 * 3600.0
MAX_MARKED = 100_000
_SERVING = "active:"


class Meaning(NamedTuple):
    serves: bool  # whether an account with this status (and `active: true`) serves
    means: str  # what it means, for a reader


STATUSES: dict[str, Meaning] = {
    "deactivated": Meaning(False, "deactivated by its owner"),
    "takendown": Meaning(False, "taken down by its host or a moderation service"),
    "suspended": Meaning(False, "suspended for a time by its host"),
    "deleted": Meaning(False, "deleted"),
    "desynchronized": Meaning(True, "its repository is out of sync at the relay"),
    "throttled": Meaning(True, "its host's events are held back by the relay"),
}


class Mark(NamedTuple):
    """What a stream last said of an account that is not plainly active."""

    serves: bool
    status: str

    @property
    def reason(self) -> str:
        meaning = STATUSES.get(self.status)
        explained = f"{self.status} ({meaning.means})" if meaning else self.status
        return f"the account is {explained}"

    @property
    def warning(self) -> str:
        return f"account_{self.status}"


def mark_of(active: bool, status: str | None) -> Mark | None:
    """The mark an `#account` event makes (None: a plainly active account)."""
    if not active:
        return Mark(False, status or "inactive")
    meaning = STATUSES.get(status or "")
    if status and meaning is not None and meaning.serves:
        return Mark(True, status)
    return None


class AccountStates:
    def __init__(self, max_marked: int = MAX_MARKED) -> None:
        self._marks: dict[str, Mark] = {}
        self.max_marked = max_marked
        self.refused = 0  # marks past `max_marked`

    def get(self, did: str) -> Mark | None:
        return self._marks.get(did) if self._marks else None

    def status(self, did: str) -> str | None:
        """Why the account of `did` does not serve, or None while it does (or nobody said)."""
        mark = self.get(did)
        return mark.status if mark is not None and not mark.serves else None

    def __len__(self) -> int:
        return len(self._marks)

    async def mark(self, store: Store, did: str, mark: Mark | None, now: float) -> bool:
        """`did`'s account is as `mark` says (None: plainly active), here and in the store;
        whether that changed anything (a mark past the bound changes nothing: it is
        counted)."""
        before = self._marks.get(did)
        if mark == before:
            return False
        if mark is None:
            del self._marks[did]
            with contextlib.suppress(StoreUnavailable):  # the store is told once it answers
                await store.delete([PREFIX + did])
            return True
        if before is None and len(self._marks) >= self.max_marked:
            self.refused += 1
            return False
        self._marks[did] = mark
        row = (_SERVING if mark.serves else "") + mark.status
        await store.put(PREFIX + did, row.encode(), now + KEEP)
        return True

    async def load(self, store: Store, now: float) -> None:
        """What an earlier run kept (rows, and the one entry of earlier versions, moved to
        rows); unreadable ones are ignored: the stream says again."""
        for key, value in await store.scan(PREFIX, self.max_marked):
            with contextlib.suppress(UnicodeDecodeError):
                row = value.decode()
                serves = row.startswith(_SERVING)
                self._marks[key.removeprefix(PREFIX)] = Mark(serves, row.removeprefix(_SERVING))
        legacy = await store.get(LEGACY_KEY)
        if legacy is None:
            return
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            for did, status in dict(json.loads(legacy.value)).items():
                if isinstance(did, str) and isinstance(status, str):
                    await self.mark(store, did, Mark(False, status), now)
        await store.delete([LEGACY_KEY])
