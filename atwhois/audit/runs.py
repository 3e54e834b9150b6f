"""Audit runs shared by processes, on one host or several (`audit.database`): a run's
identities are rows to check; each process claims a batch at a time for a lease it renews
while it lives, settles each identity as it records its check, and holds a transient
failure back for the end, when the run's failures are judged together. Whoever finds
nothing left to check finishes the run, once: judging what was held, the summary and the
webhook's delivery in one transaction.

A process that dies leaves its claims to run out; the others then take them over. A run no
live process takes part in any more is closed as `interrupted` by the next one that opens
the store. A watch-list run that is going on is joined, not started again beside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from atwhois.foundation import defaults
from atwhois.foundation.sql import in_chunks, marks

from .checks import Check
from .database import Database

WATCH_LIST = "watch-list"


@dataclass(frozen=True, slots=True)
class OpenRun:
    id: int
    started_at: float
    total: int  # identities in the run
    lease: float  # seconds a claim lasts unless renewed
    joined: bool  # another process had started it


class SharedRuns:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.owner = f"{socket.gethostname()}:{os.getpid()}"

    def open(self, source: str, identifiers: list[str] | None, lease: float) -> OpenRun:
        """A run of these identifiers (None: the watch-list's, joining one that live
        processes are running)."""
        now = time.time()
        with self.db.transaction(serialized=True):
            if identifiers is None:
                row = self._live(source, now)
                if row is not None:
                    self._attend(row[0], now)
                    return OpenRun(row[0], row[1], row[2] or 0, row[3], joined=True)
            found = self.db.one(
                "INSERT INTO runs (started_at, source, status, owner, lease) "
                "VALUES (?, ?, 'running', ?, ?) RETURNING id",
                (now, source, self.owner, lease),
            )
            assert found is not None
            run_id = int(found[0])
            if identifiers is None:
                self.db.execute(
                    "INSERT INTO run_items (run_id, identifier) SELECT ?, identifier FROM watch",
                    (run_id,),
                )
            else:
                self.db.many(
                    "INSERT INTO run_items (run_id, identifier) VALUES (?, ?) "
                    "ON CONFLICT DO NOTHING",
                    [(run_id, identifier) for identifier in identifiers],
                )
            counted = self.db.one("SELECT count(*) FROM run_items WHERE run_id=?", (run_id,))
            total = int(counted[0]) if counted else 0
            self.db.execute("UPDATE runs SET total=? WHERE id=?", (total, run_id))
            self._attend(run_id, now)
        if self.db.postgres:  # its statistics said "empty" since the last run: plans that
            self.db.execute("ANALYZE run_items")  # scan it whole for each claim
        return OpenRun(run_id, now, total, lease, joined=False)

    def _live(self, source: str, now: float) -> tuple[Any, ...] | None:
        """The run of `source` that live processes are running (id, start, total, lease)."""
        return self.db.one(
            "SELECT r.id, r.started_at, r.total, r.lease FROM runs r "
            "WHERE r.status = 'running' AND r.source = ? AND EXISTS (SELECT 1 FROM "
            "run_workers w WHERE w.run_id = r.id AND w.seen_at >= ? - r.lease) "
            "ORDER BY r.id DESC LIMIT 1",
            (source, now),
        )

    def due_in(self, source: str, interval: float) -> float:
        """Seconds until a run of `source` every `interval` is due, counted from the start
        of the last one, whichever process started it: 0 while live processes run one
        (to be joined), or when none ran yet."""
        now = time.time()
        if self._live(source, now) is not None:
            return 0.0
        row = self.db.one("SELECT max(started_at) FROM runs WHERE source=?", (source,))
        last = None if row is None or row[0] is None else float(row[0])
        return 0.0 if last is None else max(0.0, last + interval - now)

    def _attend(self, run_id: int, now: float) -> None:
        self.db.execute(
            "INSERT INTO run_workers VALUES (?, ?, ?) ON CONFLICT(run_id, owner) DO UPDATE SET "
            "seen_at=excluded.seen_at",
            (run_id, self.owner, now),
        )

    def claim(self, run: OpenRun, count: int, after: str = "") -> list[str]:
        """Up to `count` identities no live process holds, in order from after `after`,
        now this one's for a lease. Claiming from where the last batch ended walks the
        index past what is settled (PostgreSQL keeps deleted rows until a vacuum: a claim
        from the start would step over all of them every time)."""
        now = time.time()
        with self.db.transaction():
            rows = self.db.rows(
                "UPDATE run_items SET owner=?, lease_until=? WHERE run_id=? AND identifier IN "
                "(SELECT identifier FROM run_items WHERE run_id=? AND identifier > ? AND held IS "
                "NULL AND (owner IS NULL OR lease_until < ?) ORDER BY identifier "
                f"LIMIT ?{self.db.dialect.skip_locked}) RETURNING identifier",
                (self.owner, now + run.lease, run.id, run.id, after, now, count),
            )
        return sorted(row[0] for row in rows)

    def renew(self, run: OpenRun) -> None:
        """This process lives: its claims last another lease."""
        now = time.time()
        with self.db.transaction():
            self.db.execute(
                "UPDATE run_items SET lease_until=? WHERE run_id=? AND owner=? AND held IS NULL",
                (now + run.lease, run.id, self.owner),
            )
            self._attend(run.id, now)

    def settle(self, run_id: int, identifiers: list[str]) -> set[str]:
        """These identities are checked: those whose claim was not lost (taken over)."""
        settled: set[str] = set()
        for chunk in in_chunks(identifiers):
            rows = self.db.rows(
                f"DELETE FROM run_items WHERE run_id=? AND owner=? AND identifier IN "
                f"({marks(chunk)}) RETURNING identifier",
                (run_id, self.owner, *chunk),
            )
            settled.update(identifier for (identifier,) in rows)
        return settled

    def hold(self, run_id: int, checks: list[Check]) -> None:
        """Transient failures, judged at the end with the run's others (`finishing`)."""
        self.db.many(
            "UPDATE run_items SET held=? WHERE run_id=? AND identifier=? AND owner=? "
            "AND held IS NULL",
            [(check.encode(), run_id, check.identifier, self.owner) for check in checks],
        )

    def left(self, run_id: int) -> int:
        """Identities of the run not yet checked (claimed or not)."""
        row = self.db.one(
            "SELECT count(*) FROM run_items WHERE run_id=? AND held IS NULL", (run_id,)
        )
        return int(row[0]) if row else 0

    def status(self, run_id: int) -> str | None:
        row = self.db.one("SELECT status FROM runs WHERE id=?", (run_id,))
        return None if row is None else str(row[0])

    @contextlib.contextmanager
    def finishing(self, run_id: int) -> Iterator[list[Check] | None]:
        """The checks held back, when this process is the one to finish the run: nothing
        is left to check and no one finished it. The block runs in the transaction that
        finishes it (it must set the run's status), so it happens once, or not at all."""
        with self.db.transaction():
            mine = self.db.one(
                "UPDATE runs SET owner=? WHERE id=? AND status='running' AND NOT EXISTS "
                "(SELECT 1 FROM run_items WHERE run_id=? AND held IS NULL) RETURNING id",
                (self.owner, run_id, run_id),
            )
            if mine is None:
                yield None
                return
            rows = self.db.rows(
                "SELECT held FROM run_items WHERE run_id=? ORDER BY identifier", (run_id,)
            )
            yield [Check.from_json(json.loads(held)) for (held,) in rows]
            self._forget(run_id)

    def leave(self, run_id: int) -> bool:
        """This process gives up (it failed): what it claimed goes back to the others.
        True when no other live process takes part: then the run has failed."""
        now = time.time()
        with self.db.transaction(serialized=True):
            self.db.execute(
                "UPDATE run_items SET owner=NULL, lease_until=NULL WHERE run_id=? AND owner=? "
                "AND held IS NULL",
                (run_id, self.owner),
            )
            self.db.execute(
                "DELETE FROM run_workers WHERE run_id=? AND owner=?", (run_id, self.owner)
            )
            others = self.db.one(
                "SELECT count(*) FROM run_workers w JOIN runs r ON r.id = w.run_id "
                "WHERE w.run_id=? AND w.seen_at >= ? - r.lease",
                (run_id, now),
            )
            if others and others[0]:
                return False
            self._forget(run_id)
            self.db.execute(
                "UPDATE runs SET status='failed', finished_at=? WHERE id=? AND status='running'",
                (now, run_id),
            )
        return True

    def close_interrupted(self) -> int:
        """Runs left `running` with no live process: every process that took part is of
        this host and gone (killed, crashed), or none was seen for a lease. Closed as
        `interrupted`, finished at their last check."""
        host, now, closed = socket.gethostname(), time.time(), 0
        rows = self.db.rows("SELECT id, started_at, lease FROM runs WHERE status='running'")
        for run_id, started, lease in rows:
            workers = self.db.rows(
                "SELECT owner, seen_at FROM run_workers WHERE run_id=?", (run_id,)
            )
            gone_here = all(_gone(owner, host) for owner, _ in workers)
            lease = lease or defaults.AUDIT_LEASE
            silent = all(seen + lease < now for _, seen in workers)
            if not (gone_here or silent):
                continue
            with self.db.transaction(serialized=True):
                last = self.db.one("SELECT max(checked_at) FROM checks WHERE run_id=?", (run_id,))
                self.db.execute(
                    "UPDATE runs SET status='interrupted', finished_at=? WHERE id=? "
                    "AND status='running'",
                    ((last[0] if last else None) or started, run_id),
                )
                self._forget(run_id)
            closed += 1
        return closed

    def _forget(self, run_id: int) -> None:
        """A run's work rows, once it ended."""
        self.db.execute("DELETE FROM run_items WHERE run_id=?", (run_id,))
        self.db.execute("DELETE FROM run_workers WHERE run_id=?", (run_id,))


def _gone(owner: str, host: str) -> bool:
    """A process of this host that no longer runs."""
    owner_host, _, pid = owner.rpartition(":")
    if owner_host != host or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # someone else's process: alive
        return False
    return False
