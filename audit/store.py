"""The audit store: watch-list, runs, checks, findings, each identity's current state and
the webhook deliveries not yet made, in one SQLite file (durable data, unlike the cache: it
is never dropped). Times are Unix seconds inside, ISO 8601 wherever they leave."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation import data_path
from resolver.errors import AtwhoisError, SchemaMismatch

from .checks import Check, iso
from .findings import KINDS, Finding

SCHEMA_VERSION = 2
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS watch (
    identifier TEXT PRIMARY KEY, label TEXT, added_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, started_at REAL NOT NULL, finished_at REAL, source TEXT NOT NULL,
    summary TEXT);
CREATE TABLE IF NOT EXISTS checks (
    id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, identifier TEXT NOT NULL,
    checked_at REAL NOT NULL, status TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS checks_by_identifier ON checks (identifier, id);
CREATE INDEX IF NOT EXISTS checks_by_run ON checks (run_id);
CREATE TABLE IF NOT EXISTS findings (
    id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, identifier TEXT NOT NULL,
    at REAL NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS findings_by_time ON findings (at);
CREATE TABLE IF NOT EXISTS streaks (
    identifier TEXT PRIMARY KEY, failures INTEGER NOT NULL,
    last_reached INTEGER);  -- the id of the last check that reached the upstream
"""
# Version 2: findings have a severity and their old and new values; runs a status and the
# process that owns them; each identity's state since when; undelivered webhook payloads.
_SCHEMA_2 = """
ALTER TABLE findings ADD COLUMN severity TEXT NOT NULL DEFAULT 'info';
ALTER TABLE findings ADD COLUMN old TEXT;
ALTER TABLE findings ADD COLUMN new TEXT;
ALTER TABLE runs ADD COLUMN status TEXT NOT NULL DEFAULT 'finished';
ALTER TABLE runs ADD COLUMN owner TEXT;
CREATE TABLE states (
    identifier TEXT PRIMARY KEY, status TEXT NOT NULL, since REAL NOT NULL, previous TEXT);
INSERT INTO states (identifier, status, since)
    SELECT identifier, status, max(checked_at) FROM checks GROUP BY identifier;
CREATE TABLE outbox (
    id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, created_at REAL NOT NULL,
    payload TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT);
"""


@dataclass(frozen=True, slots=True)
class State:
    """An identity's current status, since when, and the status before it."""

    status: str
    since: float
    previous: str | None


LABEL_MAX = 200  # characters of a watch label: a name for people, not a document


class LabelTooLong(AtwhoisError, ValueError):
    """A watch label over `LABEL_MAX` characters."""


def check_label(label: str | None) -> None:
    """Raises `LabelTooLong` for a label over `LABEL_MAX` characters (None: no label)."""
    if label is not None and len(label) > LABEL_MAX:
        raise LabelTooLong(f"a label of {len(label)} characters; at most {LABEL_MAX}")


def default_audit_path() -> Path:
    return data_path("audit.db")


@dataclass(frozen=True, slots=True)
class Watched:
    identifier: str
    label: str | None = None
    added_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"identifier": self.identifier, "label": self.label, "added_at": iso(self.added_at)}


class AuditStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)
        row = self._db.execute("SELECT value FROM meta WHERE name='schema_version'").fetchone()
        version = int(row[0]) if row is not None else 1
        if version not in (1, SCHEMA_VERSION):
            raise SchemaMismatch(
                f"{path}: audit schema {version}, this atwhois reads "
                f"{SCHEMA_VERSION}; refusing to touch it"
            )
        if version == 1:
            self._upgrade_to_2()
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self.close_interrupted_runs()

    def _upgrade_to_2(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            # another process may have upgraded it while this one waited for the lock
            row = self._db.execute("SELECT value FROM meta WHERE name='schema_version'")
            if (found := row.fetchone()) is not None and int(found[0]) == SCHEMA_VERSION:
                self._db.execute("COMMIT")
                return
            for statement in filter(str.strip, _SCHEMA_2.split(";")):
                self._db.execute(statement)
            self._db.executemany(
                "UPDATE findings SET severity=? WHERE kind=?",
                [(str(severity), kind) for kind, (severity, _) in KINDS.items()],
            )
            self._db.execute(
                "UPDATE findings SET kind='became_unverified' WHERE kind='became_invalid'"
            )
            self._db.execute("UPDATE runs SET status='interrupted' WHERE finished_at IS NULL")
            self._db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self._db.close()

    # --- the watch-list ---------------------------------------------------------------

    def watch_add(self, identifier: str, label: str | None = None) -> bool:
        """True if it was not watched before. A label given replaces the one kept; none
        given keeps it."""
        return self.watch_import([(identifier, label)]) == 1

    def watch_import(self, entries: Iterable[tuple[str, str | None]]) -> int:
        """Add many at once, in one transaction (all or none); how many were new. A label
        longer than `LABEL_MAX` characters is refused (`LabelTooLong`), the rest with it."""
        new = 0
        self._db.execute("BEGIN")
        try:
            for identifier, label in entries:
                check_label(label)
                known = self._db.execute("SELECT 1 FROM watch WHERE identifier=?", (identifier,))
                new += known.fetchone() is None
                self._db.execute(
                    "INSERT INTO watch VALUES (?, ?, ?) ON CONFLICT(identifier) DO UPDATE SET "
                    "label=COALESCE(excluded.label, watch.label)",
                    (identifier, label, time.time()),
                )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return new

    def watch_remove(self, identifier: str) -> bool:
        return self._db.execute("DELETE FROM watch WHERE identifier=?", (identifier,)).rowcount > 0

    def is_watched(self, identifier: str) -> bool:
        found = self._db.execute("SELECT 1 FROM watch WHERE identifier=?", (identifier,))
        return found.fetchone() is not None

    def watch_list(self) -> list[Watched]:
        rows = self._db.execute("SELECT identifier, label, added_at FROM watch ORDER BY identifier")
        return [Watched(*row) for row in rows]

    # --- runs, checks, findings -------------------------------------------------------

    def labels(self) -> dict[str, str]:
        rows = self._db.execute("SELECT identifier, label FROM watch WHERE label IS NOT NULL")
        return dict(rows.fetchall())

    def start_run(self, source: str) -> tuple[int, float]:
        started = time.time()
        cursor = self._db.execute(
            "INSERT INTO runs (started_at, source, status, owner) VALUES (?, ?, 'running', ?)",
            (started, source, self.owner),
        )
        return int(cursor.lastrowid or 0), started

    def finish_run(
        self, run_id: int, summary: dict[str, Any], status: str, finished_at: float
    ) -> None:
        self._db.execute(
            "UPDATE runs SET finished_at=?, summary=?, status=? WHERE id=?",
            (finished_at, json.dumps(summary), status, run_id),
        )

    def close_interrupted_runs(self) -> int:
        """Runs left `running` by a process of this host that is gone (killed, crashed) are
        marked `interrupted`, finished at their last check. Another host's runs are left to
        it."""
        host = socket.gethostname()
        closed = 0
        rows = self._db.execute("SELECT id, owner, started_at FROM runs WHERE status='running'")
        for run_id, owner, started in rows.fetchall():
            owner_host, _, pid = (owner or ":").rpartition(":")
            if owner_host != host or (pid.isdigit() and _alive(int(pid))):
                continue
            last = self._db.execute(
                "SELECT max(checked_at) FROM checks WHERE run_id=?", (run_id,)
            ).fetchone()[0]
            self._db.execute(
                "UPDATE runs SET status='interrupted', finished_at=? WHERE id=?",
                (last or started, run_id),
            )
            closed += 1
        return closed

    def previous(self, identifier: str) -> tuple[Check | None, int]:
        """The last check that reached the upstream, and the transient failures since."""
        row = self._db.execute(
            "SELECT s.failures, c.data FROM streaks s LEFT JOIN checks c ON c.id = s.last_reached "
            "WHERE s.identifier=?",
            (identifier,),
        ).fetchone()
        if row is None:
            return None, 0
        return (Check.from_json(json.loads(row[1])) if row[1] else None), int(row[0])

    def record(
        self, run_id: int, check: Check, findings: list[Finding], failures: int | None
    ) -> None:
        """One check, its findings, its failure streak (None: left as it was, for a check
        that failed in an upstream's outage) and the identity's state."""
        self._db.execute("BEGIN")
        try:
            cursor = self._db.execute(
                "INSERT INTO checks (run_id, identifier, checked_at, status, data) "
                "VALUES (?, ?, ?, ?, ?)",
                (run_id, check.identifier, check.checked_at, check.status, check.encode()),
            )
            if failures is not None:
                reached = None if check.transient else cursor.lastrowid
                self._db.execute(
                    "INSERT INTO streaks VALUES (?, ?, ?) ON CONFLICT(identifier) DO UPDATE SET "
                    "failures=excluded.failures, last_reached=COALESCE(excluded.last_reached, "
                    "streaks.last_reached)",
                    (check.identifier, failures, reached),
                )
            self._db.execute(
                "INSERT INTO states VALUES (?, ?, ?, NULL) ON CONFLICT(identifier) DO UPDATE SET "
                "previous=states.status, status=excluded.status, since=excluded.since "
                "WHERE states.status != excluded.status",
                (check.identifier, check.status, check.checked_at),
            )
            self._add_findings(run_id, findings)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def record_findings(self, run_id: int, findings: list[Finding]) -> None:
        """Findings about no one identity (an upstream's outage)."""
        self._add_findings(run_id, findings)

    def _add_findings(self, run_id: int, findings: list[Finding]) -> None:
        self._db.executemany(
            "INSERT INTO findings (run_id, identifier, at, kind, detail, severity, old, new) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (run_id, f.identifier, f.at, f.kind, f.detail, str(f.severity), f.old, f.new)
                for f in findings
            ],
        )

    def states(self, identifiers: Iterable[str]) -> dict[str, State]:
        wanted = list(identifiers)
        found: dict[str, State] = {}
        for start in range(0, len(wanted), 500):  # SQLite's bound on parameters
            chunk = wanted[start : start + 500]
            rows = self._db.execute(
                "SELECT identifier, status, since, previous FROM states WHERE identifier IN "
                f"({','.join('?' * len(chunk))})",
                chunk,
            )
            found.update((row[0], State(*row[1:])) for row in rows)
        return found

    # --- webhook deliveries not yet made ----------------------------------------------

    def outbox_add(self, run_id: int, payload: dict[str, Any]) -> int:
        cursor = self._db.execute(
            "INSERT INTO outbox (run_id, created_at, payload) VALUES (?, ?, ?)",
            (run_id, time.time(), json.dumps(payload, separators=(",", ":"))),
        )
        return int(cursor.lastrowid or 0)

    def outbox(self) -> list[tuple[int, dict[str, Any]]]:
        rows = self._db.execute("SELECT id, payload FROM outbox ORDER BY id")
        return [(row[0], json.loads(row[1])) for row in rows]

    def outbox_done(self, delivery: int) -> None:
        self._db.execute("DELETE FROM outbox WHERE id=?", (delivery,))

    def outbox_failed(self, delivery: int, error: str) -> None:
        self._db.execute(
            "UPDATE outbox SET attempts=attempts+1, last_error=? WHERE id=?", (error, delivery)
        )

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT id, started_at, finished_at, source, summary, status FROM runs "
            "ORDER BY id DESC LIMIT ?",
            (limit,),
        )
        return [
            {
                "id": r[0],
                "started_at": iso(r[1]),
                "finished_at": iso(r[2]),
                "source": r[3],
                "status": r[5],
                "summary": json.loads(r[4]) if r[4] else None,
            }
            for r in rows
        ]

    _FINDING = "SELECT identifier, kind, detail, at, old, new FROM findings"

    def findings(self, since: float = 0.0, limit: int = 1000) -> list[Finding]:
        rows = self._db.execute(
            f"{self._FINDING} WHERE at >= ? ORDER BY id LIMIT ?", (since, limit)
        )
        return [Finding(*row) for row in rows]

    def run_findings(self, run_id: int) -> list[Finding]:
        rows = self._db.execute(f"{self._FINDING} WHERE run_id=? ORDER BY id", (run_id,))
        return [Finding(*row) for row in rows]

    def run_checks(self, run_id: int) -> list[Check]:
        rows = self._db.execute("SELECT data FROM checks WHERE run_id=? ORDER BY id", (run_id,))
        return [Check.from_json(json.loads(row[0])) for row in rows]

    def history(self, identifier: str, limit: int = 50) -> list[Check]:
        rows = self._db.execute(
            "SELECT data FROM checks WHERE identifier=? ORDER BY id DESC LIMIT ?",
            (identifier, limit),
        )
        return [Check.from_json(json.loads(row[0])) for row in rows][::-1]

    def watched_by_status(self) -> Counter[str]:
        """The latest status of every watched identifier (never checked: "unchecked")."""
        rows = self._db.execute(
            "SELECT w.identifier, (SELECT status FROM checks c WHERE c.identifier = w.identifier "
            "ORDER BY c.id DESC LIMIT 1) FROM watch w"
        )
        return Counter(status or "unchecked" for _, status in rows)

    def findings_by_kind(self) -> Counter[str]:
        return Counter(dict(self._db.execute("SELECT kind, count(*) FROM findings GROUP BY kind")))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
