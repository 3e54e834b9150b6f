"""Where the mirror keeps the directory: verified operations, per-DID state, what it refused
and what it flagged. SQLite by default (one file, WAL: the follower writes while the API
reads), PostgreSQL for operators who outgrow one machine (several daemons read one
database; one writes, held by an advisory lock).

One schema, one set of statements: the two backends differ only in how they connect, in
the placeholder (`?` against `%s`) and in a few words of DDL.
"""

from __future__ import annotations

import asyncio
import fcntl
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO, TypeVar

from foundation import data_path
from foundation.sql import POSTGRES_SCHEMES, in_chunks, marks
from resolver.errors import AtwhoisError, SchemaMismatch

from .records import ENTRY_CAP, BadLine, Batch, Rejection, StoredOp

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS plc_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS plc_ops (
    seq BIGINT PRIMARY KEY,
    did TEXT NOT NULL,
    cid TEXT NOT NULL,
    created_at TEXT NOT NULL,
    entry TEXT NOT NULL,
    signer SMALLINT NOT NULL,
    nullified SMALLINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS plc_ops_did ON plc_ops (did, cid);
CREATE INDEX IF NOT EXISTS plc_ops_created ON plc_ops (created_at);
CREATE TABLE IF NOT EXISTS plc_dids (
    did TEXT PRIMARY KEY,
    state TEXT,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS plc_rejected (
    did TEXT NOT NULL,
    cid TEXT NOT NULL,
    created_at TEXT NOT NULL,
    rule TEXT NOT NULL,
    message TEXT NOT NULL,
    entry TEXT NOT NULL,
    seen_at TEXT NOT NULL,
    PRIMARY KEY (did, cid)
);
CREATE TABLE IF NOT EXISTS plc_bad_lines (
    digest TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    entry TEXT NOT NULL,
    seen_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS plc_bad_lines_seen ON plc_bad_lines (seen_at, digest);
CREATE TABLE IF NOT EXISTS plc_flags (
    did TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    since TEXT NOT NULL
);
"""
BAD_LINES_KEPT = 10_000  # the newest lines that did not parse, kept as evidence
BAD_LINES_SLACK = 1_000  # kept past that between two prunes (a prune walks the whole table)


class SqlMirrorStore:
    """The statements, over a DB-API connection for writing and one for reading."""

    name = "sql"
    location = ""  # what `open_mirror_store` opens again (a worker process does)
    writable = True  # False: another process writes; this one reads
    _writer_lock: TextIO | None = None  # SQLite's: held open while this process writes
    _placeholder = "?"

    def __init__(self, writer: Any, reader: Any) -> None:
        self._writer = writer
        self._reader = reader
        # The reader is shared by the API and the follower's thread; writes have their own
        # connection and lock, so that reads go on (WAL, MVCC) while a page is written.
        self._read_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._next_seq = 1 + self.head()
        self._bad_since_prune = BAD_LINES_SLACK  # the first write with bad lines prunes

    def _sql(self, text: str) -> str:
        return text if self._placeholder == "?" else text.replace("?", self._placeholder)

    def _rows(self, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._read_lock:
            cursor = self._reader.cursor()
            cursor.execute(self._sql(text), params)
            return list(cursor.fetchall())

    def _one(self, text: str, params: Sequence[Any] = ()) -> Any:
        rows = self._rows(text, params)
        return rows[0][0] if rows else None

    def meta(self) -> dict[str, str]:
        return {name: value for name, value in self._rows("SELECT name, value FROM plc_meta")}

    def known(self, dids: Iterable[str]) -> set[tuple[str, str]]:
        """Which (did, cid) of these DIDs are kept already, verified: a page served again
        is skipped, not applied twice. Refused lines are not among them: what a line claims
        is no reason to skip the genuine op when it comes."""
        pairs: set[tuple[str, str]] = set()
        for chunk in _chunks(dids):
            rows = self._rows(f"SELECT did, cid FROM plc_ops WHERE did IN ({marks(chunk)})", chunk)
            pairs.update((did, cid) for did, cid in rows)
        return pairs

    def refusals(self, dids: Iterable[str]) -> dict[tuple[str, str], str]:
        """The lines of these DIDs kept as refused, by (did, cid), as kept (capped): a line
        served again as it was is known evidence, not a new refusal."""
        found: dict[tuple[str, str], str] = {}
        for chunk in _chunks(dids):
            rows = self._rows(
                f"SELECT did, cid, entry FROM plc_rejected WHERE did IN ({marks(chunk)})", chunk
            )
            found.update(((did, cid), entry) for did, cid, entry in rows)
        return found

    def logs(self, dids: Iterable[str]) -> dict[str, list[StoredOp]]:
        """The verified ops of these DIDs, in order."""
        logs: dict[str, list[StoredOp]] = {}
        for chunk in _chunks(dids):
            for row in self._rows(
                f"SELECT seq, did, cid, created_at, entry, signer, nullified FROM plc_ops "
                f"WHERE did IN ({marks(chunk)}) ORDER BY seq",
                chunk,
            ):
                logs.setdefault(row[1], []).append(_op(row))
        return logs

    def log(self, did: str) -> list[StoredOp]:
        rows = self._rows(
            "SELECT seq, did, cid, created_at, entry, signer, nullified FROM plc_ops "
            "WHERE did = ? ORDER BY seq",
            (did,),
        )
        return [_op(row) for row in rows]

    def state(self, did: str) -> tuple[bool, str | None]:
        """(whether the DID is known, its state's JSON: None when tombstoned)."""
        rows = self._rows("SELECT state FROM plc_dids WHERE did = ?", (did,))
        return (True, rows[0][0]) if rows else (False, None)

    def export(
        self, *, after_seq: int | None, after_time: str | None, count: int
    ) -> list[StoredOp]:
        columns = "seq, did, cid, created_at, entry, signer, nullified"
        if after_seq is not None:
            rows = self._rows(
                f"SELECT {columns} FROM plc_ops WHERE seq > ? ORDER BY seq LIMIT ?",
                (after_seq, count),
            )
        else:
            rows = self._rows(
                f"SELECT {columns} FROM plc_ops WHERE created_at > ? "
                "ORDER BY created_at, seq LIMIT ?",
                (after_time or "", count),
            )
        return [_op(row) for row in rows]

    def head(self) -> int:
        """The newest `seq` stored (0: none)."""
        return int(self._one("SELECT COALESCE(MAX(seq), 0) FROM plc_ops") or 0)

    def rejected(self, limit: int) -> list[Rejection]:
        rows = self._rows(
            "SELECT did, cid, created_at, rule, message, entry, seen_at FROM plc_rejected "
            "ORDER BY seen_at DESC, created_at DESC LIMIT ?",
            (limit,),
        )
        return [Rejection(*row) for row in rows]

    def bad_lines(self, limit: int) -> list[BadLine]:
        rows = self._rows(
            "SELECT digest, reason, entry, seen_at FROM plc_bad_lines "
            "ORDER BY seen_at DESC, digest LIMIT ?",
            (limit,),
        )
        return [BadLine(*row) for row in rows]

    def flags(self, limit: int) -> list[tuple[str, str, str]]:
        rows = self._rows(
            "SELECT did, reason, since FROM plc_flags ORDER BY since DESC LIMIT ?", (limit,)
        )
        return [(row[0], row[1], row[2]) for row in rows]

    def counts(self) -> dict[str, int]:
        return {
            "ops": int(self._one("SELECT COUNT(*) FROM plc_ops") or 0),
            "dids": int(self._one("SELECT COUNT(*) FROM plc_dids") or 0),
            "tombstoned": int(self._one("SELECT COUNT(*) FROM plc_dids WHERE state IS NULL") or 0),
            "rejected": int(self._one("SELECT COUNT(*) FROM plc_rejected") or 0),
            "flagged": int(self._one("SELECT COUNT(*) FROM plc_flags") or 0),
            "bad_lines": int(self._one("SELECT COUNT(*) FROM plc_bad_lines") or 0),
        }

    def write(self, batch: Batch) -> None:
        """One transaction: all of `batch`, or (on any failure, raised) none of it, the
        connection left ready for the next write."""
        with self._write_lock:
            cursor = self._writer.cursor()
            self._begin(cursor)
            try:
                self._write_batch(cursor, batch)
            except BaseException:
                self._writer.rollback()
                raise
            self._writer.commit()
            self._next_seq += len(batch.ops)

    def _write_batch(self, cursor: Any, batch: Batch) -> None:
        sql = self._sql
        first = self._next_seq
        cursor.executemany(
            sql(
                "INSERT INTO plc_ops (seq, did, cid, created_at, entry, signer) "
                "VALUES (?, ?, ?, ?, ?, ?)"
            ),
            [(first + i, *op) for i, op in enumerate(batch.ops)],
        )
        cursor.executemany(
            sql("UPDATE plc_ops SET nullified = 1 WHERE did = ? AND cid = ?"), batch.nullified
        )
        cursor.executemany(
            sql(
                "INSERT INTO plc_dids (did, state, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (did) DO UPDATE SET state = excluded.state, "
                "updated_at = excluded.updated_at"
            ),
            [(did, state, at) for did, (state, at) in batch.states.items()],
        )
        cursor.executemany(
            sql(
                "INSERT INTO plc_rejected VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (did, cid) DO NOTHING"
            ),
            [
                (r.did, r.cid, r.created_at, r.rule, r.message, r.entry[:ENTRY_CAP], r.seen_at)
                for r in batch.rejected
            ],
        )
        cursor.executemany(
            sql(
                "INSERT INTO plc_flags VALUES (?, ?, ?) ON CONFLICT (did) DO UPDATE "
                "SET reason = excluded.reason"
            ),
            [(did, reason, since) for did, (reason, since) in batch.flags.items()],
        )
        if batch.bad_lines:
            cursor.executemany(
                sql(
                    "INSERT INTO plc_bad_lines VALUES (?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING"
                ),
                [(b.digest, b.reason, b.entry, b.seen_at) for b in batch.bad_lines],
            )
            self._bad_since_prune += len(batch.bad_lines)
            if self._bad_since_prune >= BAD_LINES_SLACK:
                cursor.execute(
                    sql(
                        "DELETE FROM plc_bad_lines WHERE digest IN (SELECT digest FROM "
                        "plc_bad_lines ORDER BY seen_at DESC, digest "
                        "LIMIT 1000000000 OFFSET ?)"
                    ),
                    (BAD_LINES_KEPT,),
                )
                self._bad_since_prune = 0
        cursor.executemany(
            sql(
                "INSERT INTO plc_meta VALUES (?, ?) ON CONFLICT (name) DO UPDATE "
                "SET value = excluded.value"
            ),
            list(batch.meta.items()),
        )

    def flag(self, did: str, reason: str, since: str) -> None:
        self.write(Batch(flags={did: (reason, since)}))

    def _begin(self, cursor: Any) -> None:
        """Opens the write transaction (DB-API drivers open one implicitly)."""

    def close(self) -> None:
        self._reader.close()
        self._writer.close()
        if self._writer_lock is not None:
            self._writer_lock.close()


T = TypeVar("T")


async def read_from(store: SqlMirrorStore, read: Callable[[], T]) -> T:
    """A read of the store from the event loop: SQLite's are quick and run on the loop; a
    network database's go to a thread, not to hold the loop for a round trip."""
    if store.name == "sqlite":
        return read()
    return await asyncio.to_thread(read)


def _chunks(dids: Iterable[str]) -> Iterator[list[str]]:
    """Each DID once, in order (neighbouring keys, neighbouring pages), in chunks."""
    return in_chunks(sorted(set(dids)))


def _op(row: Sequence[Any]) -> StoredOp:
    return StoredOp(int(row[0]), row[1], row[2], row[3], row[4], int(row[5]), bool(row[6]))


class SqliteMirrorStore(SqlMirrorStore):
    name = "sqlite"

    def __init__(self, path: Path, *, writable: bool = True) -> None:
        self.path = path
        self.location = str(path)
        self.writable = writable
        if not writable:  # a verifying worker, a second daemon: reads what the writer commits
            read_only = path.resolve().as_uri() + "?mode=ro"
            reader = sqlite3.connect(
                read_only, uri=True, check_same_thread=False, isolation_level=None
            )
            reader.execute("PRAGMA busy_timeout=5000")
            super().__init__(reader, reader)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        # One writer: a second process on the same file reads instead (`open_mirror_store`)
        self._writer_lock = path.with_name(path.name + ".writer").open("a")
        try:
            fcntl.flock(self._writer_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._writer_lock.close()
            raise WriterElsewhere(f"{path}: another mirror process is writing it") from None
        writer = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        for pragma in ("busy_timeout=5000", "journal_mode=WAL", "synchronous=NORMAL"):
            writer.execute(f"PRAGMA {pragma}")
        writer.executescript(_SCHEMA)
        version = writer.execute("SELECT value FROM plc_meta WHERE name='schema_version'")
        row = version.fetchone()
        if row is not None and int(row[0]) != SCHEMA_VERSION:
            raise SchemaMismatch(f"{path}: a mirror of schema {row[0]}, not {SCHEMA_VERSION}")
        writer.execute(
            "INSERT OR IGNORE INTO plc_meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )
        reader = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        reader.execute("PRAGMA busy_timeout=5000")
        super().__init__(writer, reader)

    def _begin(self, cursor: Any) -> None:
        cursor.execute("BEGIN IMMEDIATE")


class PostgresMirrorStore(SqlMirrorStore):
    """PostgreSQL through psycopg 3. The writer takes an advisory lock: a second mirror
    process on the same database reads, and refuses to write rather than interleave."""

    name = "postgresql"
    _placeholder = "%s"
    _LOCK = 0x706C636D  # "plcm"

    def __init__(self, url: str, *, writable: bool = True) -> None:
        import psycopg  # only those who use PostgreSQL load its driver

        self.location = url
        self.writable = writable
        if not writable:  # a reader (a verifying worker, a second daemon): no DDL, no lock
            reader = psycopg.connect(url, autocommit=True)
            super().__init__(reader, reader)
            return
        writer = psycopg.connect(url)
        with writer.cursor() as cursor:
            cursor.execute(_SCHEMA)
            cursor.execute(
                "INSERT INTO plc_meta VALUES ('schema_version', %s) ON CONFLICT DO NOTHING",
                (str(SCHEMA_VERSION),),
            )
            cursor.execute("SELECT value FROM plc_meta WHERE name = 'schema_version'")
            row = cursor.fetchone()
            if row is not None and int(row[0]) != SCHEMA_VERSION:
                raise SchemaMismatch(f"a mirror of schema {row[0]}, not {SCHEMA_VERSION}")
            cursor.execute("SELECT pg_try_advisory_lock(%s)", (self._LOCK,))
            held = cursor.fetchone()
            if not (held and held[0]):
                writer.close()
                raise WriterElsewhere("another mirror process is writing this database")
        writer.commit()
        reader = psycopg.connect(url, autocommit=True)
        super().__init__(writer, reader)


class WriterElsewhere(AtwhoisError, ValueError):
    """Another process is the mirror's writer."""


def open_mirror_store(where: str | Path, *, writable: bool = True) -> SqlMirrorStore:
    """`postgresql://…` (or `postgres://…`), else a SQLite file path (`sqlite:///PATH` too).
    Writable unless another process writes it already: then a reader of what it writes."""
    text = str(where)
    postgres = text.startswith(POSTGRES_SCHEMES)
    if writable:
        try:
            if postgres:
                return PostgresMirrorStore(text)
            return SqliteMirrorStore(Path(text.removeprefix("sqlite://")))
        except WriterElsewhere:
            pass
    if postgres:
        return PostgresMirrorStore(text, writable=False)
    return SqliteMirrorStore(Path(text.removeprefix("sqlite://")), writable=False)


def default_mirror_path() -> Path:
    """Beside the audit history: a mirror is data that took hours to verify, not a cache."""
    return data_path("plc-mirror.db")
