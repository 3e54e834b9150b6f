"""The embedded default: one SQLite file in WAL mode, a versioned schema, survives restarts.

Queries are point lookups on a primary key of a local file, so they run on the event loop
thread: a thread hop would cost more than the query. A lock held by another process is
waited for briefly only (`busy_timeout`); past that the query fails and the memory tier in
front answers alone, rather than stalling every request behind it.

Other processes may write the same file (`atwhois cache purge`, a cron audit, the other
workers of `serve --workers`): every write also appends the keys it changed to a change
log, in the same transaction, and `watch` reads the log's new rows once SQLite's
`data_version` says another connection committed, so the others drop exactly the keys that
changed (or everything, when the log was pruned past what they had read).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from atwhois.foundation.sql import BUSY_MS, sqlite_connect

from ..compact import plc_bytes, plc_did
from .base import OnChange, Stored, UnusableStore
from .nonces import SQLITE_SCHEMA, SqliteNonces

# 1: WITHOUT ROWID in 4 KiB pages: each ~1.5 KB value spilled into mostly empty overflow
# pages (5.3 KB on disk per identity). 2: a rowid table, its key in an index of its own and
# an index of expiry times. 3 (issue 69): entries are compact (~60 B an entry, `compact`),
# so the key and its row are one cell of one b-tree again (16 KiB pages keep a value of up
# to 4 KB in it), and expired rows are found by a walk over the keys (`_sweep`), not an
# index. 4 (issue 69): the key is bytes, a did:plc's its 15 (`_stored`: 17 bytes where its
# name takes 32), and the expiry is in tenths of a second from 2026 (`_EPOCH`: 4 bytes where
# milliseconds from 1970 took 6); 16 bytes of an identity's ~200 on disk.
SCHEMA_VERSION = 4
_ENTRIES = """
CREATE TABLE IF NOT EXISTS {name} (
    key BLOB PRIMARY KEY,
    value BLOB NOT NULL,
    expires INTEGER NOT NULL  -- tenths of a second since _EPOCH, cut: never outlives its time
) WITHOUT ROWID;
"""
_EPOCH = 1767225600  # 2026-01-01T00:00:00Z: 4-byte tenths until 2032, 6-byte ones after
# A did:plc's entry, the most common key, as the table keeps it: `d`, a byte no key's text
# has there (every other key is its UTF-8, `d:` for a DID's), its 15 bytes. It sorts among
# the `d` keys, so a walk of every DID held (`sweep.HELD`) is one range of the table's key.
_PLC_KEY, _PLC_STORED = "d:did:plc:", b"d\x01"
_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
    + _ENTRIES.format(name="entries")
    + """
CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, even once the log is empty
    key TEXT NOT NULL,
    writer TEXT NOT NULL
);
"""
    + SQLITE_SCHEMA
)
_PAGE_SIZE = 16384
_SWEEP_EVERY = 1000  # writes between deletions of expired rows (and old changes)
_SWEEP_ROWS = 4 * _SWEEP_EVERY  # rows a sweep looks at: more than were written meanwhile
_CHANGES_KEPT = 10_000  # rows of the change log kept: a reader further behind drops everything
_WATCH_SECONDS = 0.1  # how often another process's commits are looked for


class SqliteStore:
    """The cache's entries in a SQLite file: kept across restarts, shared by the processes
    that open the same file (a daemon's workers, its audits), each change heard by the
    others (`watch`); the nonces of the replay check in a table of their own."""

    name = "sqlite"

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._clock = clock
        try:
            self._db = sqlite_connect(path, waiting="opening")
            self._open()
        except sqlite3.Error as err:  # a folder, a file of another kind, no permission
            raise UnusableStore(f"SQLite cache {path}: {err}") from err
        self._writes = 0
        self._swept_to = b""  # the last key the last sweep looked at
        self._writer = os.urandom(8).hex()  # this connection, in the change log

    def _open(self) -> None:
        # Opening waits as long as it takes another process (a worker of `serve --workers`
        # started at the same moment) to create the schema; queries later wait briefly only
        # (`foundation.sql.BUSY_MS`).
        # Before WAL (which fixes it): a new file's pages hold ten ~1.5 KB entries, where
        # 4 KiB pages held two and wasted a third of the file.
        self._db.execute(f"PRAGMA page_size={_PAGE_SIZE}")
        self._enter_wal()
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._migrate()
        self._db.execute(f"PRAGMA busy_timeout={BUSY_MS['serving']}")

    def _enter_wal(self) -> None:
        # Switching the journal mode does not wait on the busy handler: a process that opens
        # the file while another switches it is told "locked" at once, so it asks again.
        deadline = time.monotonic() + BUSY_MS["opening"] / 1000
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _migrate(self) -> None:
        self._db.executescript(_SCHEMA)
        self._db.execute("BEGIN IMMEDIATE")  # one process migrates; the others find it done
        try:
            row = self._db.execute("SELECT value FROM meta WHERE name='schema_version'").fetchone()
            version = SCHEMA_VERSION if row is None else int(row[0])
            if version in _EARLIER:
                self._copy_from(version)
            self._db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        if version not in (*_EARLIER, SCHEMA_VERSION):
            # A cache from the first schema holds nothing worth converting: start empty, in
            # pages of today's size when no other process has the file open.
            self._db.executescript("DROP TABLE entries;" + _SCHEMA)
            with contextlib.suppress(sqlite3.OperationalError):
                self._db.executescript(
                    f"PRAGMA journal_mode=DELETE; PRAGMA page_size={_PAGE_SIZE}; VACUUM;"
                )
            self._enter_wal()

    def _copy_from(self, version: int) -> None:
        """An earlier schema's entries, as they are, into this one's table (issue 69): in
        place, at start, nothing resolved again; the expired ones left behind. Their values
        are read as they were written and made compact as each is written again
        (`Entry.decode` reads every form)."""
        named, expires = _EARLIER[version]
        self._db.execute("DROP TABLE IF EXISTS entries_compact")
        self._db.execute(_ENTRIES.format(name="entries_compact"))
        self._db.create_function(
            "stored_key", 1, lambda key: _stored(named(key)), deterministic=True
        )
        self._db.execute(
            f"INSERT OR REPLACE INTO entries_compact SELECT stored_key(key), value, {expires}"
            f" FROM entries WHERE {expires} > ?",
            (self._now(),),
        )
        self._db.execute("DROP TABLE entries")  # and its indexes
        self._db.execute("ALTER TABLE entries_compact RENAME TO entries")

    async def get(self, key: str) -> Stored | None:
        row = self._db.execute(
            "SELECT value, expires FROM entries WHERE key = ? AND expires > ?",
            (_stored(key), self._now()),
        ).fetchone()
        return Stored(bytes(row[0]), _EPOCH + row[1] / 10) if row else None

    async def put(self, key: str, value: bytes, expires_at: float) -> None:
        upsert = "INSERT OR REPLACE INTO entries (key, value, expires) VALUES (?, ?, ?)"
        self._write([(upsert, [(_stored(key), value, _tenths(expires_at))])], [key])
        self._writes += 1
        if self._writes % _SWEEP_EVERY == 0:
            self._sweep()

    def _sweep(self) -> None:
        """Delete the expired rows among the next keys after the last sweep's (from the
        first again past the last): each sweep looks at more rows than were written since
        the one before, so the walk comes round while the table grows."""
        rows = self._db.execute(
            "SELECT key, expires FROM entries WHERE key > ? ORDER BY key LIMIT ?",
            (self._swept_to, _SWEEP_ROWS),
        ).fetchall()
        now = self._now()
        expired = [(key,) for key, expires in rows if expires <= now]
        self._swept_to = rows[-1][0] if len(rows) == _SWEEP_ROWS else b""
        self._db.executemany("DELETE FROM entries WHERE key = ?", expired)
        self._db.execute(
            "DELETE FROM changes WHERE seq <= (SELECT max(seq) FROM changes) - ?",
            (_CHANGES_KEPT,),
        )

    def nonces(self) -> SqliteNonces:
        """The nonces seen, in this file's own table: every process on it sees them."""
        return SqliteNonces(self._db)

    async def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        self._write([("DELETE FROM entries WHERE key = ?", [(_stored(k),) for k in keys])], keys)

    def _write(
        self, statements: list[tuple[str, list[tuple[object, ...]]]], keys: list[str]
    ) -> None:
        """The statements and the change log's rows for `keys`, in one transaction."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for sql, rows in statements:
                self._db.executemany(sql, rows)
            self._db.executemany(
                "INSERT INTO changes (key, writer) VALUES (?, ?)", [(k, self._writer) for k in keys]
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    async def count(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM entries").fetchone()[0])

    async def scan(self, prefix: str, limit: int) -> list[tuple[str, bytes]]:
        found: list[tuple[str, bytes]] = []
        for start, end in _ranges(prefix):  # each a range of the primary key, by its index
            rows = self._db.execute(
                "SELECT key, value FROM entries WHERE key >= ? AND key < ? AND expires > ?",
                (start, end, self._now()),
            )
            named = ((_named(key), bytes(value)) for key, value in rows)
            found += itertools.islice(
                ((k, v) for k, v in named if k.startswith(prefix)), limit - len(found)
            )
        return found

    async def walk(self, prefix: str, limit: int, position: str = "") -> tuple[list[str], str]:
        # in the primary key's order (its ranges in turn), from the key after the last one
        # given (the position: that key's bytes in hex), by its index
        try:
            after = bytes.fromhex(position)
        except ValueError:  # another store's position: the walk starts again
            after = b""
        page: list[str] = []
        left = limit  # rows this page may still read
        for start, end in _ranges(prefix):
            if end <= after:
                continue
            rows = self._db.execute(
                "SELECT key FROM entries WHERE key >= ? AND key > ? AND key < ? AND expires > ?"
                " ORDER BY key LIMIT ?",
                (start, after, end, self._now(), left),
            ).fetchall()
            page += [name for (key,) in rows if (name := _named(key)).startswith(prefix)]
            left -= len(rows)
            if left == 0:
                return page, bytes(rows[-1][0]).hex()
        return page, ""

    def _now(self) -> int:
        # 10 us on: the time an entry was said to expire (`Stored.expires_at`, a float the
        # tenths were turned into) is past it, whichever way that float was rounded
        return _tenths(self._clock() + 1e-5)

    async def watch(self, on_change: OnChange, ready: Callable[[], Awaitable[None]]) -> None:
        version = self._data_version()
        seen = self._db.execute("SELECT coalesce(max(seq), 0) FROM changes").fetchone()[0]
        await ready()
        while True:
            await asyncio.sleep(_WATCH_SECONDS)
            now = self._data_version()
            if now == version:
                continue
            version = now
            oldest = self._db.execute("SELECT min(seq) FROM changes").fetchone()[0]
            rows = self._db.execute(
                "SELECT seq, key, writer FROM changes WHERE seq > ? ORDER BY seq", (seen,)
            ).fetchall()
            if oldest is not None and oldest > seen + 1:
                on_change(None)  # pruned past what was read: anything may have changed
            elif keys := list({key: None for _, key, writer in rows if writer != self._writer}):
                on_change(keys)
            seen = rows[-1][0] if rows else seen

    def _data_version(self) -> int:
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    async def close(self) -> None:
        self._db.close()


def _tenths(at: float) -> int:
    """A time as the table keeps it: tenths of a second since `_EPOCH`, cut (an entry never
    outlives its time, as in Redis)."""
    return math.floor((at - _EPOCH) * 10)


def _stored(key: str) -> bytes:
    """`key` as the table keeps it (`_PLC_STORED`)."""
    packed = plc_bytes(key[2:]) if key.startswith(_PLC_KEY) else None
    return key.encode() if packed is None else _PLC_STORED + packed


def _named(stored: bytes) -> str:
    if stored.startswith(_PLC_STORED):
        return "d:" + plc_did(stored[len(_PLC_STORED) :])
    return bytes(stored).decode()


def _ranges(prefix: str) -> list[tuple[bytes, bytes]]:
    """Where the keys that start with `prefix` are in the table, in its order: a prefix that
    a did:plc's key may start with (`d:`, `d:did:pl`, `d:did:plc:abc`) has them among the
    packed keys too; the caller keeps those whose names start with it."""
    written = prefix.encode()
    if _PLC_STORED.startswith(written):  # "" or "d": one range holds the packed keys too
        return [(written, _after(written))]
    if _PLC_KEY.startswith(prefix) or prefix.startswith(_PLC_KEY):
        return [(_PLC_STORED, _after(_PLC_STORED)), (written, _after(written))]
    return [(written, _after(written))]


def _after(prefix: bytes) -> bytes:
    """The least bytes greater than every bytes that start with `prefix` (past them all when
    it is empty or all 0xff: every key is shorter than this)."""
    kept = prefix.rstrip(b"\xff")
    return kept[:-1] + bytes([kept[-1] + 1]) if kept else b"\xff" * 1024


def _from_v3(key: str) -> str:
    return _PLC_KEY + key[3:] if key.startswith("d:\x01") else key


# The schemas whose entries are copied in (`_copy_from`): how each named a key, and its
# expiry in this schema's terms (SQL of its columns).
_EARLIER: dict[int, tuple[Callable[[str], str], str]] = {
    2: (lambda key: key, f"CAST((expires_at - {_EPOCH}) * 10 AS INTEGER)"),
    3: (_from_v3, f"(expires_ms - {_EPOCH * 1000}) / 100"),
}
