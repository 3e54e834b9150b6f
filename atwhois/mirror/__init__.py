"""A verifying mirror of a PLC directory: follows an upstream's `/export`, verifies every
operation before it enters the state, and serves the directory's read API."""

from .api import MirrorApi, MirrorFetcher, report
from .backends import default_mirror_path, open_mirror_store
from .follow import Follower
from .replica import Replica
from .state import MirrorState
from .store import SqlMirrorStore
from .upstream import Upstream

__all__ = [
    "Follower",
    "MirrorApi",
    "MirrorFetcher",
    "MirrorState",
    "Replica",
    "SqlMirrorStore",
    "Upstream",
    "default_mirror_path",
    "open_mirror_store",
    "report",
]
