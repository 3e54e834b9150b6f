"""Reports as a cached lookup returns them, for tests and benchmarks of what is done with one."""

from __future__ import annotations

from resolver import Identity, Status
from resolver.identity import CacheInfo


def verified(did: str, handle: str, fresh_for: float = 3600.0) -> Identity:
    """`handle` and `did` verified both ways, fresh for `fresh_for` seconds more, servable
    for twice that."""
    info = CacheInfo(True, 0.0, "fresh", fresh_for_s=fresh_for, servable_for_s=fresh_for * 2)
    return Identity(
        query=handle,
        status=Status.VERIFIED,
        did=did,
        declared_handle=handle,
        handle_queried=handle,
        cache=info,
    )
