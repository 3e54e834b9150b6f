"""How fast atwhois asks one upstream host: a rate per host, with bursts (a token bucket
each), and hosts that asked for a pause (`Retry-After` on a 429 or 503) parked. Sync 1.1
asks services to rate-limit identity resolution per host; Bluesky's own resolver limits its
PLC client to 300 requests/s. Pure over a clock: the fetchers wait or refuse as it says.

A pause lasts at most `max_park` seconds (POL-PARK-1): a directory that asks for an hour
would otherwise take every lookup that needs it away for an hour, on the word of one
answer. When it ends, one request goes first (the probe): an answer ends the park, another
429 or 503 parks the host again, and the requests meanwhile are refused as parked.

Every lookup comes from a caller nobody authenticated, so the line between kinds of work
is drawn by what the work is for (POL-BUDGET-1): requests made `charged_to` a kind with a
share (the resolutions a refused service-auth token causes) take a turn from the host's
bucket and from one of their own at that share of the host's rate; when either is empty
they are refused at once, never queued: a flood of them cannot take the lookups' turns,
nor hold their requests waiting. A `patient` kind waits for its share instead: the pass that
re-verifies every held identity after an event stream's gap (F-CUR-6) goes at its share for
as long as it takes, and lookups keep the rest.

Memory is bounded by the hosts seen lately, not by every host ever asked: a bucket that has
refilled is the same as none, and is dropped.

A daemon is several processes (`--workers`, the workers that re-verify: `cache.workers`)
and one client of each upstream: their hosts' buckets are in memory they all share
(`SharedBuckets`, made before the others start: `share_buckets`, `use_buckets`), so that
together they keep to each host's rate, and each kind of work to its share. A bucket there
is a slot its host's name (and kind's) hashes to: two on one slot share their turns (more
polite, never less)."""

from __future__ import annotations

import contextlib
import multiprocessing
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

_EPSILON = 1e-9
MAX_BUCKETS = 65_536  # buckets held at once; past that, the full (idle) ones are dropped
# How long a probe may be out before another request may probe instead (its answer, or
# its failure, ends it sooner): the longest deadline of any request (the mirror's page).
PROBE_LEASE = 120.0
LOOKUPS = "lookups"  # the work nothing charges elsewhere: lookups, audits, the mirror
SERVICE_AUTH = "service_auth"  # the resolutions a service-auth token causes (POL-BUDGET-1)
REVERIFY = "reverify"  # re-verifying every held identity after a stream's gap (F-CUR-6)
# sent: requests; background: those of them sent for a patient kind of work
COUNTS = ("requests", "background", "throttled", "parked", "over_budget")
# Tasks copy the context they are started in: a resolution started for a token is its work.
_WORK: ContextVar[str] = ContextVar("atwhois_work", default=LOOKUPS)


@contextlib.contextmanager
def charged_to(kind: str) -> Iterator[None]:
    """The requests made within (and by the tasks started within) are `kind`'s work."""
    token = _WORK.set(kind)
    try:
        yield
    finally:
        _WORK.reset(token)


def work() -> str:
    """The kind of work the requests made here are charged to."""
    return _WORK.get()


@dataclass(slots=True)
class _Bucket:
    rate: float
    burst: float
    tokens: float
    at: float
    parked_until: float = 0.0  # 0: not parked; past: the pause is over, its probe unanswered
    pause: float = 0.0  # the last pause's length: a probe refused without one parks as long
    probe_until: float = 0.0  # the probe sent may be answered until then

    def refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now


_FIELDS = 5  # a shared bucket's tokens, at, parked_until, pause, probe_until
SLOTS = 4096  # hosts' buckets in the shared memory (a host's: the slot its name hashes to)


class _Cell:
    """One field of a shared bucket: a double in the shared memory."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __get__(self, bucket: _SharedBucket, owner: object = None) -> float:
        return float(bucket.cells[bucket.base + self.index])

    def __set__(self, bucket: _SharedBucket, value: float) -> None:
        bucket.cells[bucket.base + self.index] = value


class _SharedBucket:
    """A host's `_Bucket` in memory every process of the daemon shares (read and changed
    with `SharedBuckets.lock` held)."""

    tokens = _Cell(0)
    at = _Cell(1)
    parked_until = _Cell(2)
    pause = _Cell(3)
    probe_until = _Cell(4)

    def __init__(self, cells: Any, base: int, rate: float, burst: float) -> None:
        self.cells, self.base, self.rate, self.burst = cells, base, rate, burst

    def refill(self, now: float) -> None:
        _Bucket.refill(self, now)  # type: ignore[arg-type]  # the same fields, shared


class SharedBuckets:
    """The hosts' buckets of every process of one daemon: `SLOTS` of them in shared memory,
    under one lock (each turn a few reads and writes under it)."""

    def __init__(self) -> None:
        spawn = multiprocessing.get_context("spawn")
        self.cells = spawn.Array("d", SLOTS * _FIELDS)  # zeros: a slot never used
        self.lock = self.cells.get_lock()

    def bucket(self, host: str, rate: float, burst: float, now: float) -> _SharedBucket:
        slot = zlib.crc32(host.encode()) % SLOTS
        bucket = _SharedBucket(self.cells, slot * _FIELDS, rate, burst)
        if bucket.at == 0.0:  # first used now: full
            bucket.tokens, bucket.at = burst, now
        else:
            bucket.refill(now)
        return bucket


_SHARED: list[SharedBuckets | None] = [None]  # this process's daemon's, once made or given


def share_buckets() -> SharedBuckets:
    """The buckets this process and those it starts from now on share (made once)."""
    buckets = _SHARED[0]
    if buckets is None:
        buckets = _SHARED[0] = SharedBuckets()
    return buckets


def use_buckets(buckets: SharedBuckets | None) -> None:
    """A child's start: the paces it makes take their turns from `buckets` (its daemon's)."""
    _SHARED[0] = buckets


def shared_buckets() -> SharedBuckets | None:
    return _SHARED[0]


@dataclass
class HostPace:
    """`rate_of(host)`: requests per second for a host; a host may send `burst_seconds`
    worth at once after a quiet spell. `shares`: a kind of work's share of each host's
    rate (a kind not named takes what the host's bucket has); `patient`: the kinds that wait
    for their share rather than be refused past it."""

    rate_of: Callable[[str], float]
    max_park: float = field(kw_only=True)  # seconds a pause lasts at most (POL-PARK-1)
    shares: Mapping[str, float] = field(default_factory=dict)
    patient: frozenset[str] = frozenset()
    burst_seconds: float = 0.1  # a burst of a tenth of a second's requests at once
    clock: Callable[[], float] = time.monotonic
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # host kind -> counts
    kind_of: Callable[[str], str] = lambda host: host  # what a host is counted as
    # the hosts' buckets of the daemon's processes together (None: this process's own)
    shared: SharedBuckets | None = None
    # (host, "") -> the host's bucket; (host, kind) -> a kind of work's budget at it
    _buckets: dict[tuple[str, str], _Bucket] = field(default_factory=dict)
    _seen: dict[str, None] = field(default_factory=dict)  # hosts asked here (shared buckets)

    def _together(self) -> contextlib.AbstractContextManager[object]:
        """Held while a host's bucket is read and changed: the daemon's other processes
        wait (nothing to hold when the buckets are this process's own)."""
        return self.shared.lock if self.shared is not None else contextlib.nullcontext()

    def admit(self, host: str, *, again: bool = False) -> float | None:
        with self._together():
            return self._admit(host, again)

    def _admit(self, host: str, again: bool) -> float | None:
        """A turn at `host` now: 0 when it is taken (a request may go), else the seconds
        until one is free (nothing taken: ask `again` then), or None when the request may
        not go now (`refusal` says why): the host's pause lasts, its probe is out, or the
        work's share is spent. A turn is taken when the request goes, never reserved
        ahead: a caller woken late (a busy machine) finds the bucket as time left it, so
        what goes out in any second is a burst and the rate at most."""
        now = self.clock()
        bucket = self._bucket(host, "", self.rate_of(host), now)
        counts = self.counts.setdefault(self.kind_of(host), dict.fromkeys(COUNTS, 0))
        if bucket.parked_until and (bucket.parked_until > now or bucket.probe_until > now):
            if not again:
                counts["parked"] += 1
            return None
        kind = _WORK.get()
        share = self.shares.get(kind)
        budget = None if share is None else self._bucket(host, kind, bucket.rate * share, now)
        ready = bucket.tokens >= 1 - _EPSILON  # a token refilled to the float's last bit
        spent = budget is not None and budget.tokens < 1 - _EPSILON
        if budget is not None and kind not in self.patient and (spent or not ready):
            counts["over_budget"] += 1  # refused at once: never queued beside the lookups
            return None
        if ready and not spent:
            bucket.tokens -= 1
            if budget is not None:
                budget.tokens -= 1
            if bucket.parked_until:  # the pause is over: this request is its probe
                bucket.probe_until = now + PROBE_LEASE
            counts["requests"] += 1
            if kind in self.patient:
                counts["background"] += 1
            return 0.0
        if kind in self.patient:  # waits for the host's turn and its own share, by design
            assert budget is not None
            return max(_wait(bucket), _wait(budget))
        if not again:
            counts["throttled"] += 1
        return _wait(bucket)

    def refusal(self, host: str) -> str:
        """Why `admit` refused a turn at `host` just now, in this kind of work."""
        left = self.parked_for(host)
        if left:
            return f"asked atwhois to wait {left:.1f} s more (Retry-After)"
        bucket = self._held(host)
        if bucket is not None and bucket.parked_until and bucket.probe_until > self.clock():
            return "asked atwhois to wait (Retry-After); one request asks whether it is over"
        return f"the share of its rate for {_WORK.get()} is spent for now"

    def answered(self, host: str, *, refused: bool, pause: float | None = None) -> None:
        """What `host` answered a request sent to it: `refused` for a 429 or 503, with the
        pause its Retry-After asks (None: none it could read). A pause parks the host; a
        probe refused without one parks it as long as the last pause; any other answer
        once the pause is over ends the park (POL-PARK-1)."""
        with self._together():
            self._answered(host, refused, pause)

    def _answered(self, host: str, refused: bool, pause: float | None) -> None:
        if refused and pause is not None:
            self._park(host, pause)
            return
        bucket = self._held(host)
        if bucket is None or not bucket.parked_until or bucket.parked_until > self.clock():
            return  # not parked; or answers to requests sent before the pause
        if refused:
            self._park(host, bucket.pause)
        else:
            bucket.parked_until = bucket.probe_until = 0.0

    def unanswered(self, host: str) -> None:
        """A request to `host` got no answer (a connection refused, a deadline): a probe
        out is over, and the next request probes again."""
        with self._together():
            bucket = self._held(host)
            if bucket is not None:
                bucket.probe_until = 0.0

    def park(self, host: str, seconds: float) -> None:
        """The host said to come back in `seconds` (at most `max_park`)."""
        with self._together():
            self._park(host, seconds)

    def _park(self, host: str, seconds: float) -> None:
        now = self.clock()
        bucket = self._bucket(host, "", self.rate_of(host), now)
        bucket.pause = min(max(seconds, 0.0), self.max_park)
        bucket.parked_until = max(bucket.parked_until, now + bucket.pause)
        bucket.probe_until = 0.0

    def parked_for(self, host: str) -> float:
        bucket = self._held(host)
        return max(0.0, bucket.parked_until - self.clock()) if bucket else 0.0

    def parked(self) -> dict[str, float]:
        """The hosts whose pause lasts, and the seconds it has left."""
        now = self.clock()
        if self.shared is not None:
            held = {host: self._held(host) for host in self._seen}
        else:
            held = {host: bucket for (host, kind), bucket in self._buckets.items() if not kind}
        return {
            host: bucket.parked_until - now
            for host, bucket in held.items()
            if bucket is not None and bucket.parked_until > now
        }

    def _held(self, host: str) -> _Bucket | _SharedBucket | None:
        """The host's bucket, if it has one (a shared one always has)."""
        if self.shared is not None:
            rate = self.rate_of(host)
            burst = max(1.0, rate * self.burst_seconds)
            return self.shared.bucket(f"{host} ", rate, burst, self.clock())
        return self._buckets.get((host, ""))

    def _bucket(self, host: str, kind: str, rate: float, now: float) -> _Bucket | _SharedBucket:
        if self.shared is not None:
            if len(self._seen) >= MAX_BUCKETS:
                self._seen.clear()
            self._seen[host] = None  # what `parked` looks at
            burst = max(1.0, rate * self.burst_seconds)
            return self.shared.bucket(f"{host} {kind}", rate, burst, now)
        bucket = self._buckets.get((host, kind))
        if bucket is None:
            if len(self._buckets) >= MAX_BUCKETS:
                self._drop_idle(now)
            burst = max(1.0, rate * self.burst_seconds)
            bucket = self._buckets[host, kind] = _Bucket(rate, burst, burst, now)
        else:
            bucket.refill(now)
        return bucket

    def _drop_idle(self, now: float) -> None:
        """Forget the buckets that have refilled and whose host is not parked nor probed
        (one whose pause ended unasked is asked as a probe would be: by the next request)."""
        for key, bucket in list(self._buckets.items()):
            full = bucket.tokens + (now - bucket.at) * bucket.rate >= bucket.burst
            if full and bucket.parked_until <= now and bucket.probe_until <= now:
                del self._buckets[key]


def _wait(bucket: _Bucket | _SharedBucket) -> float:
    """Seconds until `bucket` holds a turn (0: it does)."""
    return 0.0 if bucket.tokens >= 1 - _EPSILON else (1 - bucket.tokens) / bucket.rate
