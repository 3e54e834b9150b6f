"""Cache of verified bindings: `CachedResolver`, the freshness policy, the stores.

`CachedResolver` brings the resolver's network stack with it: imported on first use."""

from typing import TYPE_CHECKING, Any

from .keys import did_key, handle_key, identifier_of, resting_on
from .policy import Lifetime, Policy
from .stores import MemoryStore, SqliteStore, Store, Tier, TieredStore, open_store

if TYPE_CHECKING:
    from .resolver import CachedResolver

__all__ = [
    "CachedResolver",
    "Lifetime",
    "MemoryStore",
    "Policy",
    "SqliteStore",
    "Store",
    "Tier",
    "TieredStore",
    "did_key",
    "handle_key",
    "identifier_of",
    "open_store",
    "resting_on",
]


def __getattr__(name: str) -> Any:
    if name == "CachedResolver":
        from .resolver import CachedResolver

        return CachedResolver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
