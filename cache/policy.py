"""How long a cached answer is fresh, and how long it may still be served stale.

Defaults, and why (the numbers are in the README too):
- verified bindings: fresh 1 h, servable stale up to 24 h — the TypeScript and Python SDKs'
  stale/max (1 h / 24 h); Bluesky's Go directory keeps hits 24 h. Stale answers are served at
  once while one background refresh runs, and kept when the upstream fails (up to 24 h).
- unverified bindings (handle and document disagree): fresh 5 min, at most 1 h — the Go
  directory's invalid-handle TTL, the AppView's hourly re-check of invalid handles; people fix
  their handle and expect to see it soon.
- confirmed absence or invalid data: fresh 2 min, at most 10 min — the Go error TTL (2 min),
  Slingshot's not-found TTL (60 s).
- transient failures (timeout, SERVFAIL, 5xx, TLS, refused) and cancellations: never cached.
For sign-in flows, keep `verified.fresh` under 10 minutes (H-CACHE-3).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple


class Lifetime(NamedTuple):
    fresh: float  # seconds during which the entry is served as fresh
    max_age: float  # seconds after which it is never served, not even when upstream fails


class Kind(StrEnum):
    VERIFIED = "verified"
    UNVERIFIED = "unverified"
    ABSENT = "absent"


VERIFIED = Lifetime(3600.0, 86400.0)
UNVERIFIED = Lifetime(300.0, 3600.0)
ABSENT = Lifetime(120.0, 600.0)


@dataclass(frozen=True, slots=True)
class Policy:
    verified: Lifetime = VERIFIED
    unverified: Lifetime = UNVERIFIED
    absent: Lifetime = ABSENT
    retry_after: float = 30.0  # after a failed background refresh, before the next one

    def lifetime(self, kind: Kind) -> Lifetime:
        return {
            Kind.VERIFIED: self.verified,
            Kind.UNVERIFIED: self.unverified,
            Kind.ABSENT: self.absent,
        }[kind]
