"""Where cache entries live. One small interface, four implementations, one behaviour suite."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from .base import Store
from .memory import MemoryStore
from .redis import RedisStore
from .sqlite import SqliteStore
from .tiered import TieredStore

__all__ = ["MemoryStore", "RedisStore", "SqliteStore", "Store", "TieredStore", "open_store"]


def default_sqlite_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "atwhois" / "cache.db"


def open_store(url: str | None = None) -> Store:
    """`memory:`, `sqlite:///PATH` (or a plain path; the default is the embedded SQLite file
    under the user's cache folder), `redis://HOST:PORT/DB?prefix=atwhois:`. SQLite gets a
    memory tier in front; Redis does not (entries shared by several daemons are read there,
    so a purge by one is seen by all), unless `?memory=1`."""
    if url is None or url == "":
        return TieredStore(MemoryStore(), SqliteStore(default_sqlite_path()))
    parts = urlsplit(url)
    if parts.scheme in ("memory", "mem"):
        return MemoryStore()
    if parts.scheme in ("redis", "rediss"):
        query = parse_qs(parts.query)
        prefix = query.get("prefix", ["atwhois:"])[0]
        clean = parts._replace(query="").geturl()
        redis = RedisStore(clean, prefix=prefix)
        return TieredStore(MemoryStore(), redis) if query.get("memory") == ["1"] else redis
    path = Path(parts.path) if parts.scheme == "sqlite" else Path(url)
    return TieredStore(MemoryStore(), SqliteStore(path))
