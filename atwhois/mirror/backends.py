"""How the mirror's store is opened: a SQLite file (its writer holds a lock file; another
process opening it reads) or a PostgreSQL database (its writer holds an advisory lock).
The statements are `mirror.store`'s, the same for both."""

from __future__ import annotations

import contextlib
import fcntl
import queue
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from atwhois.foundation import data_path
from atwhois.foundation.sql import POSTGRES, dialect_of, sqlite_connect
from atwhois.resolver.errors import AtwhoisError

from .store import SqlMirrorStore

# Every connection keeps 64 MiB of pages (SQLite's default is 2 MiB): the rows of the DIDs
# a page or a reader asks about are spread over the whole file.
_CONNECTION_PRAGMAS = ("cache_size=-65536",)
WAL_PAGES = 16384  # the write-ahead log's pages (4 KiB) before it is folded into the file


def _connected(target: str, *pragmas: str, uri: bool = False) -> sqlite3.Connection:
    """A connection of the mirror's (autocommit: the store opens its transactions), with
    those every connection has, then `pragmas`."""
    return sqlite_connect(target, *_CONNECTION_PRAGMAS, *pragmas, uri=uri)


class SqliteMirrorStore(SqlMirrorStore):
    name = "sqlite"

    def __init__(self, path: Path, *, writable: bool = True) -> None:
        self.path = path
        self.location = str(path)
        self.writable = writable
        if not writable:  # a verifying worker, a second daemon: reads what the writer commits
            reader = _connected(path.resolve().as_uri() + "?mode=ro", uri=True)
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
        # A page of ops rewrites a page of the file for nearly each of its DIDs (their rows
        # are spread over the whole table): the log is folded back every 64 MiB, not every
        # 4 MiB (SQLite's default, about one page of ops), so that a file page rewritten by
        # several pages of ops is written back once (100,000 ops at 500,000: 4.5 us of
        # system time an op less, the writes a third shorter).
        writer = _connected(
            str(path), "journal_mode=WAL", "synchronous=NORMAL", f"wal_autocheckpoint={WAL_PAGES}"
        )
        super().__init__(writer, _connected(str(path)))

    def _begin(self, cursor: Any) -> None:
        cursor.execute("BEGIN IMMEDIATE")


READERS = 6  # PostgreSQL connections reading at once (the default executor's threads, on two cores)


class PostgresMirrorStore(SqlMirrorStore):
    """PostgreSQL through psycopg 3. The writer takes an advisory lock: a second mirror
    process on the same database reads, and refuses to write rather than interleave."""

    name = "postgresql"
    _dialect = POSTGRES
    _LOCK = 0x706C636D  # "plcm"

    def __init__(self, url: str, *, writable: bool = True) -> None:
        import psycopg  # only those who use PostgreSQL load its driver

        self.location = url
        self.writable = writable
        self._idle: queue.SimpleQueue[Any] = queue.SimpleQueue()  # readers not in use
        self._readers_open = 1
        self._pool_lock = threading.Lock()
        if not writable:  # a reader (a verifying worker, a second daemon): no DDL, no lock
            reader = psycopg.connect(url, autocommit=True)
            self._idle.put(reader)
            super().__init__(reader, reader)
            return
        writer = psycopg.connect(url)
        with writer.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", (self._LOCK,))
            held = cursor.fetchone()
        writer.commit()
        if not (held and held[0]):
            writer.close()
            raise WriterElsewhere("another mirror process is writing this database")
        reader = psycopg.connect(url, autocommit=True)
        self._idle.put(reader)
        super().__init__(writer, reader)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Any]:
        """A reader of the pool: each read is a round trip to the server, and the API's
        reads run in threads, several at once (one connection held them to one at a time:
        a tenth of the bare handler's rate in `python -m bench mirror --scale`)."""
        connection = self._idle_reader()
        try:
            yield connection
        finally:
            if connection.broken:  # the server went away: the next read opens another
                connection.close()
                with self._pool_lock:
                    self._readers_open -= 1
            else:
                self._idle.put(connection)

    def _idle_reader(self) -> Any:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._pool_lock:
            opening = self._readers_open < READERS
            self._readers_open += opening
        if opening:
            import psycopg

            return psycopg.connect(self.location, autocommit=True)
        return self._idle.get()

    def close(self) -> None:
        while True:
            try:
                connection = self._idle.get_nowait()
            except queue.Empty:
                break
            connection.close()
        super().close()

    def _streaming_cursor(self) -> Any:
        return self._writer.cursor(name="atwhois_mirror_rows")  # on the server, not all here


class WriterElsewhere(AtwhoisError, ValueError):
    """Another process is the mirror's writer."""


def open_mirror_store(where: str | Path, *, writable: bool = True) -> SqlMirrorStore:
    """`postgresql://…` (or `postgres://…`), else a SQLite file path (`sqlite:///PATH` too).
    Writable unless another process writes it already: then a reader of what it writes."""
    text = str(where)
    postgres = dialect_of(text) is POSTGRES
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
