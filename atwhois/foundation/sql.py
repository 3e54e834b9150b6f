"""What the SQL stores (the cache's, the PLC mirror's, the audits') share: how a SQLite
connection is opened and how long it waits for a lock (one policy, below), the dialects of
the two backends (one set of statements each store writes once, in SQLite's words, spelled
for PostgreSQL by `Dialect`), how a database is named, and keys asked for in chunks, each
one `IN (…)` within the bound SQLite puts on a statement's parameters."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import sqlite3

# How long a SQLite statement waits for another process's lock (busy_timeout), by what is
# waiting. Opening waits out another process creating the schema at the same moment; a
# write that must not be lost (an audit's finding, a mirrored operation) waits for the
# writer before it; an answer being served waits briefly only: past that, the cache's
# memory tier answers and the store is marked unavailable (a daemon does not hang on a
# lock another process holds).
BUSY_MS = {"opening": 30_000, "keeping": 10_000, "serving": 250}

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
DATABASE_SCHEMES = ("sqlite://", *POSTGRES_SCHEMES)  # anything else given is a file's path


@dataclass(frozen=True)
class Dialect:
    """How one backend spells what the stores' statements share."""

    name: str
    placeholder: str
    # The DDL's words that differ, by what they mean: `serial_key` a key the database
    # assigns, `seq_key` one the store assigns, `integer` 64 bits, `real` a double (a
    # PostgreSQL REAL is 32 bits: it would round Unix seconds to minutes), `blob` bytes,
    # `keyed` what follows a table kept in the order of its text key.
    words: Mapping[str, str]
    table_exists: str  # a query of one parameter, a table's name: a row when it exists
    skip_locked: str  # ends a claiming subquery: rows another transaction holds are left to it

    def sql(self, text: str) -> str:
        """A statement written with `?` in this backend's placeholder."""
        return text if self.placeholder == "?" else text.replace("?", self.placeholder)

    def ddl(self, text: str) -> str:
        """DDL written with the words' names (`{integer}`, `{real}`, …) in this backend's."""
        return text.format_map(self.words)


SQLITE = Dialect(
    "sqlite",
    "?",
    {
        "serial_key": "INTEGER PRIMARY KEY",
        "seq_key": "INTEGER PRIMARY KEY",  # the table's own rowid: no second index of it
        "integer": "INTEGER",
        "real": "REAL",
        "blob": "BLOB",
        "keyed": " WITHOUT ROWID",  # the key kept once, not beside a rowid
    },
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?",
    "",  # its writers take turns: nothing to skip
)
POSTGRES = Dialect(
    "postgresql",
    "%s",
    {
        "serial_key": "BIGSERIAL PRIMARY KEY",
        "seq_key": "BIGINT PRIMARY KEY",
        "integer": "BIGINT",
        "real": "DOUBLE PRECISION",
        "blob": "BYTEA",
        "keyed": "",
    },
    "SELECT 1 FROM information_schema.tables WHERE table_name = ? "
    "AND table_schema = current_schema()",
    " FOR UPDATE SKIP LOCKED",
)


def dialect_of(where: str | Path) -> Dialect:
    """The backend a store's location names: a PostgreSQL URL, else a SQLite file."""
    return POSTGRES if str(where).startswith(POSTGRES_SCHEMES) else SQLITE


def sqlite_connect(
    target: str | Path, *pragmas: str, waiting: str = "keeping", uri: bool = False
) -> sqlite3.Connection:
    """A SQLite connection in autocommit (the stores open their transactions), that waits
    for a lock as `BUSY_MS[waiting]` says, then with `pragmas` (after the wait is set: a
    journal-mode switch takes the lock too)."""
    import sqlite3  # here: what only names a database (the command line's help) loads none

    connection = sqlite3.connect(target, uri=uri, check_same_thread=False, isolation_level=None)
    for pragma in (f"busy_timeout={BUSY_MS[waiting]}", *pragmas):
        connection.execute(f"PRAGMA {pragma}")
    return connection


Key = TypeVar("Key")
CHUNK = 500  # parameters of one `IN (…)`: SQLite allows some thousands, older builds 999


def in_chunks(items: Iterable[Key], size: int = CHUNK) -> Iterator[list[Key]]:
    """Lists of at most `size`, in the order given, read as they are needed."""
    chunk: list[Key] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def marks(chunk: Sized) -> str:
    """The placeholders of an `IN (…)` of `chunk`."""
    return ",".join("?" * len(chunk))
