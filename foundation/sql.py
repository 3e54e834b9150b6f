"""What the SQL stores (the PLC mirror's, the audits') share: how a PostgreSQL database is
named beside a SQLite file, and keys asked for in chunks, each one `IN (…)` within the
bound SQLite puts on a statement's parameters."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from typing import TypeVar

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
DATABASE_SCHEMES = ("sqlite://", *POSTGRES_SCHEMES)  # anything else given is a file's path

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
