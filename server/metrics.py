"""Prometheus text exposition for the service, without a client library: a few counters,
gauges and histograms are all the daemon reports."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


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

    def lines(self, name: str, labels: str) -> Iterable[str]:
        cumulative = 0
        for bound, count in zip((*BUCKETS, "+Inf"), self.counts, strict=True):
            cumulative += count
            yield f'{name}_bucket{{{labels}le="{bound}"}} {cumulative}'
        yield f"{name}_sum{{{labels.rstrip(',')}}} {self.total:.6f}"
        yield f"{name}_count{{{labels.rstrip(',')}}} {cumulative}"


class Metrics:
    def __init__(self) -> None:
        self.requests: Counter[tuple[str, int]] = Counter()
        self.request_seconds: defaultdict[str, Histogram] = defaultdict(Histogram)
        self.upstream_seconds: defaultdict[str, Histogram] = defaultdict(Histogram)

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests[(endpoint, status)] += 1
        self.request_seconds[endpoint].observe(seconds)

    def render(self, cache: dict[str, int], gauges: dict[str, int]) -> str:
        lines = ["# TYPE atwhois_requests_total counter"]
        for (endpoint, status), count in sorted(self.requests.items()):
            lines.append(f'atwhois_requests_total{{endpoint="{endpoint}",code="{status}"}} {count}')
        lines.append("# TYPE atwhois_request_seconds histogram")
        for endpoint, histogram in sorted(self.request_seconds.items()):
            lines.extend(histogram.lines("atwhois_request_seconds", f'endpoint="{endpoint}",'))
        lines.append("# TYPE atwhois_cache_lookups_total counter")
        for result in ("fresh", "stale", "miss", "coalesced"):
            lines.append(f'atwhois_cache_lookups_total{{result="{result}"}} {cache.get(result, 0)}')
        lines.append("# TYPE atwhois_upstream_resolutions_total counter")
        for kind in ("handles", "documents", "failures"):
            value = cache.get(f"upstream_{kind}", 0)
            lines.append(f'atwhois_upstream_resolutions_total{{kind="{kind}"}} {value}')
        lines.append("# TYPE atwhois_cache_refreshes_total counter")
        for kind, counter in (("background", "refreshes"), ("requested", "refreshes_requested")):
            value = cache.get(counter, 0)
            lines.append(f'atwhois_cache_refreshes_total{{kind="{kind}"}} {value}')
        lines.append("# TYPE atwhois_upstream_seconds histogram")
        for kind, histogram in sorted(self.upstream_seconds.items()):
            lines.extend(histogram.lines("atwhois_upstream_seconds", f'upstream="{kind}",'))
        for name, value in sorted(gauges.items()):
            lines += [f"# TYPE atwhois_{name} gauge", f"atwhois_{name} {value}"]
        return "\n".join(lines) + "\n"
