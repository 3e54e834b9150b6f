"""The daemon's `/metrics`, exposed by `prometheus-client`: the service's own figures, the
audits', and the process's (CPU, memory, file descriptors, GC, Python).

The hot path only adds to plain counters, bound once to their labels (`Metrics.answered`): a
request costs an increment and a bucket search, not a labelled client-library call. The
families are made from those counters when Prometheus scrapes, by collectors registered in
a registry of the service's own (two services in one process do not share figures)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from atwhois.foundation.pace import HostPace

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Families = Callable[[], Iterable[Metric]]


class Histogram:
    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.total += seconds
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1
                return
        self.counts[-1] += 1

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative counts by upper bound, as the exposition format has them."""
        out, cumulative = [], 0
        for bound, count in zip((*map(str, BUCKETS), "+Inf"), self.counts, strict=True):
            cumulative += count
            out.append((bound, float(cumulative)))
        return out


class Answered:
    """The answers of one endpoint with one status: their count, and their times in the
    endpoint's histogram."""

    __slots__ = ("count", "seconds")

    def __init__(self, seconds: Histogram) -> None:
        self.count, self.seconds = 0, seconds

    def observe(self, seconds: float) -> None:
        self.count += 1
        self.seconds.observe(seconds)


class Metrics:
    """What the service counts as it answers."""

    def __init__(self) -> None:
        self._answered: dict[tuple[str, int], Answered] = {}
        self.request_seconds: dict[str, Histogram] = {}
        self.upstream_seconds: defaultdict[str, Histogram] = defaultdict(Histogram)

    def answered(self, endpoint: str, status: int) -> Answered:
        """The counters of `endpoint`'s answers with `status`, to keep and add to."""
        found = self._answered.get((endpoint, status))
        if found is None:
            seconds = self.request_seconds.setdefault(endpoint, Histogram())
            found = self._answered[(endpoint, status)] = Answered(seconds)
        return found

    def families(self, cache: dict[str, int]) -> Iterator[Metric]:
        """These counts, and the cache's (`CachedResolver.counts`)."""
        requests = CounterMetricFamily(
            "atwhois_requests",
            "Requests answered, by endpoint and HTTP status.",
            labels=["endpoint", "code"],
        )
        for (endpoint, status), answered in sorted(self._answered.items()):
            requests.add_metric([endpoint, str(status)], answered.count)
        yield requests
        yield _histogram(
            "atwhois_request_seconds",
            "Time to answer a request, by endpoint.",
            "endpoint",
            self.request_seconds,
        )
        lookups = CounterMetricFamily(
            "atwhois_cache_lookups",
            "Lookups by what the cache had: fresh, stale (served while refreshed), miss, "
            "coalesced (joined a resolution in flight).",
            labels=["result"],
        )
        for result in ("fresh", "stale", "miss", "coalesced"):
            lookups.add_metric([result], cache.get(result, 0))
        yield lookups
        upstream = CounterMetricFamily(
            "atwhois_upstream_resolutions",
            "Resolutions sent upstream: handles, documents, and those that failed.",
            labels=["kind"],
        )
        for kind in ("handles", "documents", "failures"):
            upstream.add_metric([kind], cache.get(f"upstream_{kind}", 0))
        yield upstream
        refreshes = CounterMetricFamily(
            "atwhois_cache_refreshes",
            "Refreshes of cached identities: in the background (stale hits) or requested "
            "(refreshIdentity, lookup --refresh, audits).",
            labels=["kind"],
        )
        for kind, counter in (("background", "refreshes"), ("requested", "refreshes_requested")):
            refreshes.add_metric([kind], cache.get(counter, 0))
        yield refreshes
        yield _histogram(
            "atwhois_upstream_seconds",
            "Time of one upstream step, by upstream.",
            "upstream",
            self.upstream_seconds,
        )


def _histogram(
    name: str, documentation: str, label: str, histograms: dict[str, Histogram]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=[label])
    for value, histogram in sorted(histograms.items()):
        family.add_metric([value], histogram.buckets(), histogram.total)
    return family


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


class _Snapshot(Collector):
    """The families made for this scrape (some need the store, asynchronously, first)."""

    def __init__(self) -> None:
        self.families: list[Metric] = []

    def collect(self) -> Iterable[Metric]:
        return self.families


class Exposition:
    """One registry: the process collectors, and the service's families for each scrape."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._snapshot = _Snapshot()
        self.registry.register(self._snapshot)

    def render(self, families: Iterable[Metric]) -> bytes:
        # No await between setting and rendering: a concurrent scrape cannot interleave.
        self._snapshot.families = list(families)
        try:
            return generate_latest(self.registry)
        finally:
            self._snapshot.families = []


def pace_families(pace: HostPace) -> Families:
    """What the upstream hosts were asked, by host (the PLC directory by its name, every
    other host as `web`): requests sent, those sent for work in the background (among
    them), those that waited for their turn (the rate), those refused while the host had
    asked for a pause (Retry-After), and those refused because their kind of work had spent
    its share of the host's rate."""

    def families() -> Iterator[Metric]:
        asked = CounterMetricFamily(
            "atwhois_upstream_host_requests",
            "Requests to upstream hosts, by host and what their pace did: sent, background "
            "(sent for the re-verification after a stream's gap, at its share of the rate; "
            "among those sent), throttled (a lookup's, waited for a turn at the host's rate), "
            "parked (refused during a Retry-After), over_budget (refused: a service-auth "
            "token's share of the rate was spent).",
            labels=["host", "pace"],
        )
        for host, counts in sorted(pace.counts.items()):
            asked.add_metric([host, "sent"], counts["requests"])
            for outcome in ("background", "throttled", "parked", "over_budget"):
                asked.add_metric([host, outcome], counts[outcome])
        yield asked

    return families
