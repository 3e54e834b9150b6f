"""Words for counts and times, said once: `1 operation`, `2 operations`, `1 rotation key`;
`2026-12-02T08:00:00.000Z` for every time atwhois writes out."""

from __future__ import annotations

import datetime


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and the noun, singular for one and plural (`plural`, else noun + s) for the
    rest."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def iso_time(at: float) -> str:
    """Unix seconds as ISO 8601: UTC, milliseconds, `Z`."""
    moment = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
