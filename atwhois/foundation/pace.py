"""How fast atwhois asks one upstream host: a rate per host, with bursts (a token bucket
each), and hosts that asked for a pause (`Retry-After` on a 429 or 503) parked until then.
Sync 1.1 asks services to rate-limit identity resolution per host; Bluesky's own resolver
limits its PLC client to 300 requests/s. Pure over a clock: the fetchers wait or refuse as
it says.

Memory is bounded by the hosts seen lately, not by every host ever asked: a bucket that has
refilled is the same as none, and is dropped."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_PARK = 3600.0  # seconds a host may park us at most (a Retry-After of a week is a fault)
_EPSILON = 1e-9
MAX_BUCKETS = 65_536  # hosts held at once; past that, the full (idle) ones are dropped


@dataclass
class _Bucket:
    tokens: float
    at: float
    parked_until: float = 0.0


@dataclass
class HostPace:
    """`rate_of(host)`: requests per second for a host; a host may send `burst_seconds`
    worth at once after a quiet spell."""

    rate_of: Callable[[str], float]
    burst_seconds: float = 0.1  # a burst of a tenth of a second's requests at once
    clock: Callable[[], float] = time.monotonic
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # host kind -> counts
    kind_of: Callable[[str], str] = lambda host: host  # what a host is counted as
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def admit(self, host: str, *, again: bool = False) -> float | None:
        """A turn at `host` now: 0 when it is taken (a request may go), else the seconds
        until one is free (nothing taken: ask `again` then), or None while the host's
        pause lasts (`parked_for` says how long). A turn is taken when the request goes,
        never reserved ahead: a caller woken late (a busy machine) finds the bucket as
        time left it, so what goes out in any second is a burst and the rate at most."""
        now = self.clock()
        rate = self.rate_of(host)
        bucket = self._bucket(host, rate, now)
        counts = self.counts.setdefault(
            self.kind_of(host), {"requests": 0, "throttled": 0, "parked": 0}
        )
        if bucket.parked_until > now:
            if not again:
                counts["parked"] += 1
            return None
        if bucket.tokens >= 1 - _EPSILON:  # a token refilled to the float's last bit
            bucket.tokens -= 1
            counts["requests"] += 1
            return 0.0
        if not again:
            counts["throttled"] += 1
        return (1 - bucket.tokens) / rate

    def park(self, host: str, seconds: float) -> None:
        """The host said to come back in `seconds` (at most `MAX_PARK`)."""
        now = self.clock()
        bucket = self._bucket(host, self.rate_of(host), now)
        bucket.parked_until = max(bucket.parked_until, now + min(max(seconds, 0.0), MAX_PARK))

    def parked_for(self, host: str) -> float:
        bucket = self._buckets.get(host)
        return max(0.0, bucket.parked_until - self.clock()) if bucket else 0.0

    def _bucket(self, host: str, rate: float, now: float) -> _Bucket:
        burst = max(1.0, rate * self.burst_seconds)
        bucket = self._buckets.get(host)
        if bucket is None:
            if len(self._buckets) >= MAX_BUCKETS:
                self._drop_idle(now)
            bucket = self._buckets[host] = _Bucket(burst, now)
        else:
            bucket.tokens = min(burst, bucket.tokens + (now - bucket.at) * rate)
            bucket.at = now
        return bucket

    def _drop_idle(self, now: float) -> None:
        """Forget the hosts whose bucket has refilled and whose pause is over."""
        for host, bucket in list(self._buckets.items()):
            rate = self.rate_of(host)
            full = bucket.tokens + (now - bucket.at) * rate >= max(1.0, rate * self.burst_seconds)
            if full and bucket.parked_until <= now:
                del self._buckets[host]
