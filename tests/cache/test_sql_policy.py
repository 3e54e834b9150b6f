"""One busy-timeout policy for every SQLite store (issue 56, `foundation.sql.BUSY_MS`): the
cache's queries wait briefly (its memory tier answers meanwhile), the audits' and the
mirror's writes wait for the writer before them, and each connection says so itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from atwhois.audit import AuditStore
from atwhois.cache.stores import SqliteStore
from atwhois.foundation.sql import BUSY_MS
from atwhois.mirror.backends import SqliteMirrorStore


def _waits(connection: Any) -> int:
    return int(connection.execute("PRAGMA busy_timeout").fetchone()[0])


def test_every_sqlite_store_waits_as_the_policy_says(tmp_path: Path) -> None:
    cache = SqliteStore(tmp_path / "cache.db")
    audits = AuditStore(tmp_path / "audit.db")
    mirror = SqliteMirrorStore(tmp_path / "mirror.db")
    try:
        assert _waits(cache._db) == BUSY_MS["serving"] < BUSY_MS["keeping"]
        assert _waits(audits.db._connection) == BUSY_MS["keeping"]
        assert _waits(mirror._writer) == _waits(mirror._reader) == BUSY_MS["keeping"]
    finally:
        mirror.close()
        audits.close()
