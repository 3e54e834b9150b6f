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


def value(text: str, name: str, **labels: str) -> float:
    """One sample's value; 0 when it is not there (a counter not yet counted)."""
    return samples(text).get((name, frozenset(labels.items())), 0.0)
