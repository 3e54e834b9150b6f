"""`atwhois verify-record AT_URI [--cid CID | --record FILE]`: a record verified at its
repository's PDS (docs/spec.md: R-REC-*), here or by a running daemon (`--server`), with
the lookup's exit codes: 0 verified (and, when a CID or the record was given, that one),
1 invalid, absent, inactive or another record than the one given, 2 a URI, CID or file that
cannot be read, 3 unavailable (transient)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from atwhois.resolver.errors import InvalidInput
from atwhois.resolver.record_proof import RecordVerification

from .configuration import Resolved
from .lookup import directory_for
from .running import configure, run, say

EXIT_CODES = {"verified": 0, "invalid": 1, "absent": 1, "inactive": 1, "unavailable": 3}


def verify_record(args: argparse.Namespace) -> int:
    resolved = configure(args)
    record = None
    if args.record is not None:
        try:
            record = (
                sys.stdin.buffer.read() if args.record == "-" else Path(args.record).read_bytes()
            )
        except OSError as err:
            print(f"atwhois: cannot read the record from {args.record}: {err}", file=sys.stderr)
            return 2
    return run(_verify(args, resolved, record))


async def _verify(args: argparse.Namespace, resolved: Resolved, record: bytes | None) -> int:
    from atwhois.auth import verify_record

    directory = directory_for(args, resolved)
    try:
        verdict = await verify_record(
            directory, args.uri, cid=args.cid, record=record, config=resolved.config
        )
    except InvalidInput as err:
        print(f"atwhois: {err}", file=sys.stderr)
        return 2
    finally:
        await directory.aclose()
    say(json.dumps(verdict.to_json(), indent=2) if args.json else _text(verdict))
    if verdict.matches is False:
        return 1
    return EXIT_CODES[verdict.outcome]


_HEADLINES = {
    "verified": "verified",
    "invalid": "INVALID",
    "inactive": "INACTIVE",
    "unavailable": "UNAVAILABLE (transient: try again)",
}


def _text(verdict: RecordVerification) -> str:
    if verdict.outcome == "absent":
        how = "proven by the signed tree" if verdict.proven else "the PDS says so, unproven"
        lines = [f"ABSENT ({how})"]
    else:
        status = f" ({verdict.status})" if verdict.status else ""
        lines = [_HEADLINES[verdict.outcome] + status]
    if verdict.reason:
        rule = f" [{verdict.rule}]" if verdict.rule else ""
        lines.append(f"  why       {verdict.reason}{rule}")
    lines.append(f"  record    {verdict.uri}")
    for label, value in (
        ("cid", verdict.cid),
        ("did", verdict.did),
        ("pds", verdict.pds),
        ("key", verdict.key),
    ):
        if value:
            lines.append(f"  {label:<9} {value}")
    if verdict.commit:
        lines.append(f"  commit    {verdict.commit} (rev {verdict.rev})")
    if verdict.claimed:
        said = {True: "it matches", False: "it DIFFERS", None: "nothing proven"}[verdict.matches]
        lines.append(f"  given     {verdict.claimed}: {said}")
    if verdict.refreshed:
        lines.append("  identity  resolved again for this record")
    if verdict.value is not None:
        value = json.dumps(verdict.value, indent=2, ensure_ascii=False)
        lines.append("  value     " + value.replace("\n", "\n            "))
    return "\n".join(lines)
