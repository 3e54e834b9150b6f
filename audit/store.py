"""The audit store: watch-list, runs, checks and findings, in one SQLite file (durable data,
unlike the cache: it is never dropped)."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checks import Check, Finding

SCHEMA_VERSION = 1
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


def default_audit_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "atwhois" / "audit.db"


@dataclass(frozen=True, slots=True)
class Watched:
    identifier: str
    label: str | None = None
    added_at: float = 0.0


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
        if row is not None and int(row[0]) != SCHEMA_VERSION:
            raise RuntimeError(
                f"{path}: audit schema {row[0]}, this atwhois reads "
                f"{SCHEMA_VERSION}; refusing to touch it"
            )
        self._db.execute(
            "INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )

    def close(self) -> None:
        self._db.close()

    # --- the watch-list ---------------------------------------------------------------

    def watch_add(self, identifier: str, label: str | None = None) -> bool:
        """True if it was not watched before (the label is updated either way)."""
        known = self._db.execute("SELECT 1 FROM watch WHERE identifier=?", (identifier,))
        new = known.fetchone() is None
        self._db.execute(
            "INSERT INTO watch VALUES (?, ?, ?) ON CONFLICT(identifier) DO UPDATE SET "
            "label=excluded.label",
            (identifier, label, time.time()),
        )
        return new

    def watch_remove(self, identifier: str) -> bool:
        return self._db.execute("DELETE FROM watch WHERE identifier=?", (identifier,)).rowcount > 0

    def watch_list(self) -> list[Watched]:
        rows = self._db.execute("SELECT identifier, label, added_at FROM watch ORDER BY identifier")
        return [Watched(*row) for row in rows]

    # --- runs, checks, findings -------------------------------------------------------

    def start_run(self, source: str) -> int:
        cursor = self._db.execute(
            "INSERT INTO runs (started_at, source) VALUES (?, ?)", (time.time(), source)
        )
        return int(cursor.lastrowid or 0)

    def finish_run(self, run_id: int, summary: dict[str, Any]) -> None:
        self._db.execute(
            "UPDATE runs SET finished_at=?, summary=? WHERE id=?",
            (time.time(), json.dumps(summary), run_id),
        )

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

    def record(self, run_id: int, check: Check, findings: list[Finding], failures: int) -> None:
        self._db.execute("BEGIN")
        try:
            cursor = self._db.execute(
                "INSERT INTO checks (run_id, identifier, checked_at, status, data) "
                "VALUES (?, ?, ?, ?, ?)",
                (run_id, check.identifier, check.checked_at, check.status, check.encode()),
            )
            reached = None if check.transient else cursor.lastrowid
            self._db.execute(
                "INSERT INTO streaks VALUES (?, ?, ?) ON CONFLICT(identifier) DO UPDATE SET "
                "failures=excluded.failures, last_reached=COALESCE(excluded.last_reached, "
                "streaks.last_reached)",
                (check.identifier, failures, reached),
            )
            self._db.executemany(
                "INSERT INTO findings (run_id, identifier, at, kind, detail) "
                "VALUES (?, ?, ?, ?, ?)",
                [(run_id, f.identifier, f.at, f.kind, f.detail) for f in findings],
            )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT id, started_at, finished_at, source, summary FROM runs ORDER BY id DESC "
            "LIMIT ?",
            (limit,),
        )
        return [
            {
                "id": r[0],
                "started_at": r[1],
                "finished_at": r[2],
                "source": r[3],
                "summary": json.loads(r[4]) if r[4] else None,
            }
            for r in rows
        ]

    def findings(self, since: float = 0.0, limit: int = 1000) -> list[Finding]:
        rows = self._db.execute(
            "SELECT identifier, kind, detail, at FROM findings WHERE at >= ? ORDER BY id LIMIT ?",
            (since, limit),
        )
        return [Finding(*row) for row in rows]

    def run_findings(self, run_id: int) -> list[Finding]:
        rows = self._db.execute(
            "SELECT identifier, kind, detail, at FROM findings WHERE run_id=? ORDER BY id",
            (run_id,),
        )
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
