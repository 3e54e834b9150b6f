"""Reading the daemon's `/metrics` as Prometheus does: with the client library's parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample: (name, labels) -> value. A page that does not parse raises."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, missing: float | None = None, **labels: str) -> float:
    """One sample's value. A sample that is not there fails the test (a metric renamed, a
    label misspelt), unless the caller says what its absence means (`missing`: a counter
    with labels appears once it is first counted)."""
    found = samples(text).get((name, frozenset(labels.items())))
    if found is not None:
        return found
    if missing is None:
        raise AssertionError(f"no sample {name}{dict(labels)} in the metrics")
    return missing
