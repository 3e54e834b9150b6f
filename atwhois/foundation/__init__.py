"""The bottom of the house: what every part may use and nothing here uses any part.

Where atwhois keeps its files (`data_path`, `cache_path`), the jittered back-off of every
follower that reconnects (`Backoff`) and the words for a count and a time (`counted`,
`iso_time`). Nothing above it imports a sibling to reach these."""

from .backoff import Backoff
from .paths import cache_path, data_path
from .wording import counted, iso_time

__all__ = ["Backoff", "cache_path", "counted", "data_path", "iso_time"]
