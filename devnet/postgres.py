"""A scratch database on the machine's PostgreSQL (the one the test network's PLC directory
uses), made for one test or benchmark and dropped after it."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg

SERVER = os.environ.get("ATWHOIS_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")


@contextlib.contextmanager
def scratch_database(prefix: str = "atwhois") -> Iterator[str]:
    """Its URL; the database goes, connections and all, when the block ends."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield f"{SERVER}/{name}"
    finally:
        with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@contextlib.contextmanager
def database(backend: str, folder: Path, prefix: str = "atwhois") -> Iterator[str]:
    """Where a store that takes either keeps its data: a SQLite file in `folder` ("sqlite"),
    or a scratch database ("postgresql")."""
    if backend == "sqlite":
        yield str(folder / f"{prefix}.db")
        return
    with scratch_database(prefix) as url:
        yield url
