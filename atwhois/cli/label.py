"""`atwhois verify-label FILE|-`: moderation labels checked against their labelers'
identities (docs/spec.md: L-*), here or by a running daemon (`--server`). FILE holds labels
in the lexicon's JSON form (`sig` as `{"$bytes": …}`): one object, a JSON list of them, or
JSON lines (L-IN-1). The exit code is the worst verdict's: 0 every label verified and in
force, 1 one invalid, negated or expired, 2 a file that holds no labels (nothing is asked),
3 a labeler that could not be resolved now."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from atwhois.foundation.errors import AtwhoisError
from atwhois.resolver.label import LabelVerification
from atwhois.resolver.untrusted import parse_json

from .configuration import Resolved
from .lookup import directory_for
from .running import configure, run, say

EXIT_CODES = {"verified": 0, "invalid": 1, "unavailable": 3}


class NotLabels(AtwhoisError, ValueError):
    """Input that holds no label objects (L-IN-1)."""


def verify_label(args: argparse.Namespace) -> int:
    resolved = configure(args)
    try:
        raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
        labels = read_labels(raw)
    except OSError as err:
        print(f"atwhois: cannot read the labels from {args.file}: {err}", file=sys.stderr)
        return 2
    except NotLabels as err:
        print(f"atwhois: {args.file}: {err}", file=sys.stderr)
        return 2
    return run(_verify(args, resolved, labels))


def read_labels(raw: bytes) -> list[dict[str, Any]]:
    """L-IN-1: one JSON object, a JSON list of them, or JSON lines of them."""
    try:
        value = parse_json(raw)
        items = value if isinstance(value, list) else [value]
    except ValueError:
        items = []
        for number, line in enumerate(raw.splitlines(), 1):
            if line.strip():
                try:
                    items.append(parse_json(line))
                except ValueError as err:
                    raise NotLabels(f"line {number} is not JSON ({err}) [L-IN-1]") from None
    if not items:
        raise NotLabels("no label in it [L-IN-1]")
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise NotLabels(f"label {number} is not a JSON object [L-IN-1]")
    return items


async def _verify(args: argparse.Namespace, resolved: Resolved, labels: list[Any]) -> int:
    from atwhois.auth import verify_labels

    directory = directory_for(args, resolved)
    try:
        verdicts = await verify_labels(directory, labels)
    finally:
        await directory.aclose()
    if args.json:
        shown = [verdict.to_json() for verdict in verdicts]
        say(json.dumps(shown[0] if len(shown) == 1 else shown, indent=2))
    else:
        say("\n\n".join(_text(verdict) for verdict in verdicts))
    return max(_exit_code(verdict) for verdict in verdicts)


def _exit_code(verdict: LabelVerification) -> int:
    return 1 if verdict.verified and not verdict.in_force else EXIT_CODES[verdict.outcome]


def _text(verdict: LabelVerification) -> str:
    if verdict.verified:
        why = "a negation" if verdict.negated else "expired" if verdict.expired else ""
        lines = [f"verified, NOT in force ({why})" if why else "verified, in force"]
    else:
        lines = ["INVALID" if verdict.outcome == "invalid" else "UNAVAILABLE (try again)"]
    if verdict.reason:
        rule = f" [{verdict.rule}]" if verdict.rule else ""
        lines.append(f"  why       {verdict.reason}{rule}")
    if verdict.val is not None:
        lines.append(f"  label     {verdict.val} on {verdict.uri}")
    for name, value in (
        ("labeler", verdict.src),
        ("cid", verdict.cid),
        ("created", verdict.cts),
        ("expires", verdict.exp),
        ("key", verdict.key and f"#atproto_label {verdict.key}"),
    ):
        if value:
            lines.append(f"  {name:<9} {value}")
    if verdict.neg is not None:
        lines.append(f"  neg       {str(verdict.neg).lower()} (as received)")
    if verdict.document_checked_at:
        again = ", resolved again for this label" if verdict.refreshed else ""
        lines.append(f"  document  checked {verdict.document_checked_at}{again}")
    return "\n".join(lines)
