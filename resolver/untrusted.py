"""Parsing what strangers send: one place that turns every way JSON can fail — bad bytes,
bad syntax, a key given twice, and nesting deep enough to exhaust Python's recursion limit
(a 64 KiB body of `[[[[…` does) — into a `ValueError`."""

from __future__ import annotations

import json
from typing import Any


class DuplicateKey(ValueError):
    """An object names a key twice: parsers disagree on which value wins (the first, the
    last, an error), so a stranger can show two readers two different documents."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(f"duplicate key {key[:40]!r} in a JSON object")
            seen.add(key)
    return value


def parse_json(data: bytes | str) -> Any:
    try:
        return json.loads(data, object_pairs_hook=_object)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
