"""What the SQL stores (the cache's, the PLC mirror's, the audits') share: how a SQLite
connection is opened and how long it waits for a lock (one policy, below), how a
PostgreSQL database is named beside a SQLite file, and keys asked for in chunks, each one
`IN (…)` within the bound SQLite puts on a statement's parameters."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
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

Key = TypeVar("Key")
CHUNK = 500  # parameters of one `IN (…)`: SQLite allows some thousands, older builds 999


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
