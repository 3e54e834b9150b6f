"""What atwhois says, pinned: every answer of the pure parsers and the replay over the
catalogue in `tests/support/explanations.py` must equal `tests/golden/explanations.json` (rewrite
it with `python -m tests.support.explanations --update` after a deliberate change, and read the
diff)."""

from __future__ import annotations

import json

from tests.support.explanations import GOLDEN, catalogue


def test_every_explanation_is_the_pinned_one() -> None:
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    now = json.loads(json.dumps(catalogue()))  # the same JSON round trip as the file
    assert now.keys() == golden.keys()
    changed = {key: (golden[key], now[key]) for key in golden if golden[key] != now[key]}
    assert not changed, json.dumps(dict(list(changed.items())[:5]), indent=1)[:4000]


def test_the_catalogue_covers_every_kind_of_answer() -> None:
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    errors = {v["error"] for v in golden.values() if "error" in v}
    # classified errors only: a KeyError or TypeError here would be a crash, pinned
    assert errors <= {
        "InvalidHandle",
        "InvalidDid",
        "InvalidIdentifier",
        "ReservedHandle",
        "UnsupportedDidMethod",
        "NotFound",
        "InvalidData",
        "MalformedAnswer",
        "AmbiguousHandle",
        "BadOperation",
        "BadSignature",
    }, errors
    assert sum("value" in v for v in golden.values()) > 200
    assert len(errors) >= 9
