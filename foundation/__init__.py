"""The bottom of the house: what every part may use and nothing here uses any part.

Where atwhois keeps its files (`data_path`, `cache_path`) and the jittered back-off of every
follower that reconnects (`Backoff`). Nothing above it imports a sibling to reach these."""

from .backoff import Backoff
from .paths import cache_path, data_path

__all__ = ["Backoff", "cache_path", "data_path"]
