"""Parsing what strangers send: one place that turns every way JSON can fail — bad bytes,
bad syntax, a key given twice, and nesting deep enough to exhaust Python's recursion limit
(a 64 KiB body of `[[[[…` does) — into a `ValueError`; the numbers they send (counts, and
the pause a `Retry-After` header asks for) read in the forms allowed only."""

from __future__ import annotations

import datetime
import email.utils
import json
import time
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


class BadNumber(AtwhoisError, ValueError):
    """A number a stranger sent that is not one this program takes: not plain ASCII digits
    (`²` and `٣` pass `str.isdigit()` and fail `int()`), or outside the range it must be in
    (a count over 2^63 overflows the databases' integers)."""


INT64_MAX = 2**63 - 1


def parse_count(text: str, *, name: str, low: int = 0, high: int = INT64_MAX) -> int:
    """`text` as a whole number in [low, high], written in ASCII digits only; else
    `BadNumber`, whose message names the parameter and the range."""
    if not (0 < len(text) <= 19 and text.isascii() and text.isdigit()):
        raise BadNumber(f"{name} must be a whole number from {low} to {high}")
    value = int(text)
    if not low <= value <= high:
        raise BadNumber(f"{name} must be a whole number from {low} to {high}")
    return value


def retry_after(value: str | None, *, cap: float, now: float | None = None) -> float | None:
    """The seconds a `Retry-After` header asks for (POL-RA-1): delta-seconds in ASCII digits
    or an HTTP date (RFC 9110 §10.2.3), at most `cap`, a date past 0. None when absent or
    unreadable, never an exception: `²` passes `str.isdigit()` and fails `float()`, `int()`
    refuses more than 4,300 digits, and a date in the year 99999999999 overflows."""
    if not value:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        # a number of more digits than any cap needs is over it
        return min(float(int(text)) if len(text) <= 15 else cap, cap)
    try:
        parts = email.utils.parsedate_tz(text)
        if parts is None:
            return None
        # datetime refuses what no calendar has (month 13, second 61, a fifth digit of year)
        when = datetime.datetime(*parts[:6], tzinfo=datetime.UTC).timestamp() - (parts[9] or 0)
    except (ValueError, OverflowError, TypeError, IndexError):
        return None
    return min(max(0.0, when - (time.time() if now is None else now)), cap)
