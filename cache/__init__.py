"""Cache of verified bindings: `CachedResolver`, the freshness policy, the stores."""

from .policy import Lifetime, Policy
from .resolver import CachedResolver
from .stores import MemoryStore, SqliteStore, Store, TieredStore, open_store

__all__ = [
    "CachedResolver",
    "Lifetime",
    "MemoryStore",
    "Policy",
    "SqliteStore",
    "Store",
    "TieredStore",
    "open_store",
]
