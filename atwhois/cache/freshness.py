"""How fresh an answer composed from cache entries is: that of its stalest part (`CacheInfo`,
which every cached report carries), and the times it shows."""

from __future__ import annotations

import dataclasses
import datetime

from atwhois.resolver.identity import CacheInfo, Identity

from .entry import Entry


def cache_info(basis: list[Entry], now: float, *, resolved_now: bool) -> CacheInfo:
    """Freshness at `now` of an answer composed from these entries: that of the stalest."""
    errors = [e.refresh_error for e in basis if e.refresh_error]
    stale = any(now >= e.fresh_until for e in basis)
    claimed = next((e.revalidating for e in basis if e.revalidating), None)
    revalidating = claimed if stale else None
    state = "revalidating" if revalidating else "stale" if stale else "fresh"
    return CacheInfo(
        not resolved_now or stale,
        now - min(e.checked_at for e in basis),
        "miss" if resolved_now and not stale else state,
        errors[0] if errors else None,
        fresh_for_s=max(0.0, min(e.fresh_until for e in basis) - now),
        servable_for_s=min(e.stale_until for e in basis) - now,
        revalidating=revalidating,
        changed_by=next((e.changed_by for e in basis if e.changed_by), None),
    )


def with_cache(identity: Identity, info: CacheInfo) -> Identity:
    warnings = identity.warnings + (("stale_upstream_failed",) if info.refresh_error else ())
    return dataclasses.replace(identity, cache=info, warnings=warnings)


def iso(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return moment.isoformat(timespec="milliseconds")
