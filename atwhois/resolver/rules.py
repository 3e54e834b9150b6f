"""The rules' tags (`H-TLD-2`, `P-NULL-2`, …) as messages cite them: `[H-TLD-2]` at the end of
a message names the rule of `docs/spec.md` that the input broke, so that a reader can look it
up there (`cited` finds them for the views to point at)."""

from __future__ import annotations

import re

SPEC = "docs/spec.md"
# A tag: a family, the section's letters (none for AT URIs), a number. `P-256` is a curve.
TAG = re.compile(r"\b(?:U|(?:H|D|DOC|C|CRYPTO|P|R|S|SA|F|POL|L|O)(?:-[A-Z]+)+)-\d+\b")
_CITED = re.compile(r"\[(" + TAG.pattern + r")\]")


def cited(*messages: str | None) -> list[str]:
    """The tags the messages cite (`[TAG]`), each once, in the order they first appear."""
    found: dict[str, None] = {}
    for message in messages:
        for tag in _CITED.findall(message or ""):
            found[tag] = None
    return list(found)
