"""The audit store's connection: a SQLite file (the default: one host, several processes at
most), or PostgreSQL (`postgresql://…`: several hosts share one watch-list and its runs).

One set of statements, written with `?` and SQLite's words, spelled for the backend by its
`foundation.sql.Dialect` (the placeholder, a few words of DDL, `FOR UPDATE SKIP LOCKED`,
which SQLite needs not: its writers take turns). What the dialect does not say is how a
writer is kept alone: SQLite's `BEGIN IMMEDIATE` takes the file's write lock; PostgreSQL
takes an advisory lock where a transaction must not interleave with another process's.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from atwhois.foundation.sql import POSTGRES, dialect_of, sqlite_connect

_TURN_LOCK = 0x61756474  # "audt": PostgreSQL's advisory lock for `Database.serialized`


class Database:
    """One connection, used by one thread at a time (the lock), in autocommit mode:
    `transaction` groups statements."""

    def __init__(self, where: str | Path) -> None:
        self.location = str(where)
        self.dialect = dialect_of(where)
        self.postgres = self.dialect is POSTGRES
        self._depth = 0
        self._lock = threading.RLock()
        self._connection: Any
        if self.postgres:
            self._connection = self._connect_postgres()
            return
        path = Path(self.location.removeprefix("sqlite://"))
        path.parent.mkdir(parents=True, exist_ok=True)
        self._connection = sqlite_connect(path, "journal_mode=WAL", "synchronous=NORMAL")

    def _connect_postgres(self) -> Any:
        import psycopg  # only those who keep audits on PostgreSQL load its driver

        # prepare_threshold=None: each statement planned for its values. Prepared, an
        # `IN (…)` of a batch got a generic plan that scanned the checks table whole.
        return psycopg.connect(self.location, autocommit=True, prepare_threshold=None)

    def _open(self) -> Any:
        """The connection, opened again when PostgreSQL dropped it (a restart, an
        administrator's `pg_terminate_backend`): the statement that found it dropped
        failed, and the daemon's next ones go on rather than failing until it restarts.
        Never inside a transaction: its earlier statements went with the old connection."""
        if self.postgres and not self._depth and self._connection.closed:
            self._connection = self._connect_postgres()
        return self._connection

    def _sql(self, text: str) -> str:
        return self.dialect.sql(text)

    def execute(self, text: str, params: Sequence[Any] = ()) -> Any:
        with self._lock:
            return self._open().execute(self._sql(text), params)

    def rows(self, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._open().execute(self._sql(text), params).fetchall())

    def one(self, text: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        rows = self.rows(text, params)
        return rows[0] if rows else None

    def many(self, text: str, params: Sequence[Sequence[Any]]) -> None:
        if not params:  # psycopg refuses an empty batch
            return
        with self._lock:
            self._open().cursor().executemany(self._sql(text), params)

    @contextlib.contextmanager
    def transaction(self, *, serialized: bool = False) -> Iterator[None]:
        """All or nothing. Nested: part of the outer one. `serialized`: no other process's
        serialized transaction runs at the same time (SQLite's writers always take turns)."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            connection = self._open()
            self._depth = 1
            try:
                if self.postgres:
                    with connection.transaction():
                        if serialized:
                            connection.execute("SELECT pg_advisory_xact_lock(%s)", (_TURN_LOCK,))
                        yield
                else:
                    connection.execute("BEGIN IMMEDIATE")
                    try:
                        yield
                    except BaseException:
                        connection.execute("ROLLBACK")
                        raise
                    connection.execute("COMMIT")
            finally:
                self._depth = 0

    def close(self) -> None:
        self._connection.close()
