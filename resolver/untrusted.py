"""Parsing what strangers send: one place that turns every way JSON can fail — bad bytes,
bad syntax, and nesting deep enough to exhaust Python's recursion limit (a 64 KiB body of
`[[[[…` does) — into a `ValueError`."""

from __future__ import annotations

import json
from typing import Any


def parse_json(data: bytes | str) -> Any:
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
