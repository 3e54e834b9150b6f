"""Reports as a cached lookup returns them, and checks as an audit records them, for tests
and benchmarks of what is done with one."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable

from atwhois.audit import Check, Watched
from atwhois.resolver import Identity, Status
from atwhois.resolver.identity import CacheInfo


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


def verified_check(identifier: str, did: str, pds: str = "https://pds.test") -> Check:
    """An audit's check of `identifier` verified over HTTPS, naming `did` and `pds`, with
    one signing key and one rotation key (`checked_at` 0: `dataclasses.replace` it)."""
    return Check(
        identifier=identifier,
        checked_at=0.0,
        status="verified",
        did=did,
        handle=identifier,
        declared_handle=identifier,
        pds=pds,
        signing_key="did:key:zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF",
        rotation_keys=("did:key:zQ3shhCGUqDKjStzuDxPkTxN6ujddP4RkEKJJouJGRRkaLGbg",),
        method="https",
        conflict=False,
        duration_ms=1.0,
        evidence={"dns": "not_found", "https": "ok", "did_doc": "ok", "plc_log": "ok"},
    )


def scripted(world: dict[str, Check]) -> Callable[[Watched], Awaitable[Check]]:
    """An audit's lookup that answers what `world` says of the identity now (an `Auditor`'s
    `check`, where the store's rules are what is measured or tested, not the lookups)."""

    async def check(target: Watched) -> Check:
        return dataclasses.replace(world[target.identifier], checked_at=time.time())

    return check
