"""Where cache entries live. One small interface, three stores (memory, SQLite, Redis in
`cache.stores.redis`), a memory tier in front of the shared ones, one behaviour suite; and
beside each store's entries, the nonces seen (`nonces`)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from atwhois.foundation import cache_path, defaults
from atwhois.resolver.errors import AtwhoisError

from .base import SharedStore, Store, Stored
from .memory import MemoryStore
from .nonces import Claim, MemoryNonces, NonceStore, NoncesUnavailable
from .sqlite import SqliteStore
from .tiered import StoreUnavailable, Tier, TieredStore, in_memory

__all__ = [
    "Claim",
    "MemoryNonces",
    "MemoryStore",
    "NonceStore",
    "NoncesUnavailable",
    "SharedStore",
    "SqliteStore",
    "Store",
    "StoreUnavailable",
    "Stored",
    "Tier",
    "TieredStore",
    "UnknownStore",
    "in_memory",
    "open_store",
]


class UnknownStore(AtwhoisError, ValueError):
    """A cache URL of no kind atwhois knows."""


DEFAULT_MEMORY_BYTES = int(defaults.MEMORY_CACHE_MB * defaults.MIB)


def default_sqlite_path() -> Path:
    return cache_path("cache.db")


def open_store(
    url: str | None = None,
    *,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    decoded_share: float = 0.75,
    redis_buckets: int = defaults.REDIS_BUCKETS,
) -> Tier:
    """`memory:`, `sqlite:///PATH` (or a plain path; the default is the embedded SQLite file
    under the user's cache folder), `redis://HOST:PORT/DB?prefix=atwhois:`,
    `redis-cluster://HOST:PORT[,HOST:PORT…]?prefix=atwhois:` (`rediss://`,
    `rediss-cluster://`: over TLS; `USER:PASSWORD@` before the hosts). The shared
    stores get a memory tier of `memory_bytes` in front, which follows their changes; up to
    `decoded_share` of it holds decoded entries. A new Redis cache keeps its entries in
    `redis_buckets` hashes (one already made, in its own number)."""

    def memory() -> MemoryStore:
        return MemoryStore(memory_bytes, decoded_share=decoded_share)

    if url is None or url == "":
        return TieredStore(memory(), SqliteStore(default_sqlite_path()))
    parts = urlsplit(url)
    if parts.scheme in ("memory", "mem"):
        return memory()
    if parts.scheme in ("redis", "rediss", "redis-cluster", "rediss-cluster"):
        # only when asked for: the client costs 6 MiB of RSS
        from .redis import RedisStore
        from .redis_cluster import RedisClusterStore

        prefix = parse_qs(parts.query).get("prefix", ["atwhois:"])[0]
        clean = parts._replace(query="").geturl()
        kind = RedisClusterStore if parts.scheme.endswith("-cluster") else RedisStore
        return TieredStore(memory(), kind(clean, prefix=prefix, buckets=redis_buckets))
    if parts.scheme not in ("sqlite", ""):
        raise UnknownStore(
            f"cache {url!r}: not memory:, sqlite:///PATH, redis://, redis-cluster:// or a file path"
        )
    path = Path(parts.path) if parts.scheme == "sqlite" else Path(url)
    return TieredStore(memory(), SqliteStore(path))
