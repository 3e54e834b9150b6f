"""Parsing what strangers send: one place that turns every way JSON can fail — bad bytes,
bad syntax, a key given twice, and nesting deep enough to exhaust Python's recursion limit
(a 64 KiB body of `[[[[…` does) — into a `ValueError`."""

from __future__ import annotations

import json
from typing import Any

import orjson

from .errors import AtwhoisError


class DuplicateKey(AtwhoisError, ValueError):
    """An object names a key twice: parsers disagree on which value wins (the first, the
    last, an error), so a stranger can show two readers two different documents."""


class NestedTooDeeply(AtwhoisError, ValueError):
    """JSON nested past what a parser may recurse into: refused, never a crash."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(f"duplicate key {key[:40]!r} in a JSON object")
            seen.add(key)
    return value


_CHECKING = json.JSONDecoder(object_pairs_hook=_object)


def parse_json(data: bytes | str) -> Any:
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    try:
        # Compact JSON (an export line, a JSON.stringify answer) is read and written back in
        # C in about a third of the checking parse's time: when writing the value back gives
        # the very bytes read, no key was given twice (a dict would have dropped one).
        # Anything else takes the checking path.
        value = orjson.loads(raw)
        if orjson.dumps(value) == raw.strip():
            return value
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        pass
    text = data if isinstance(data, str) else data.decode(json.detect_encoding(data))
    try:
        return _CHECKING.decode(text)
    except RecursionError:
        raise NestedTooDeeply("JSON nested too deeply") from None
