"""`atwhois verify-token TOKEN --aud DID#SERVICE`: an inter-service auth token checked
against its issuer's identity (docs/spec.md: SA-*), here or by a running daemon
(`--server`), with the lookup's views and exit codes: 0 valid, 1 invalid, 2 a token or
arguments that cannot be read, 3 the issuer could not be resolved now."""

from __future__ import annotations

import argparse
import json
import sys

from .configuration import Resolved
from .lookup import directory_for
from .running import configure, run, say

EXIT_CODES = {"valid": 0, "invalid": 1, "unavailable": 3}


def verify_token(args: argparse.Namespace) -> int:
    resolved = configure(args)
    token = sys.stdin.read().strip() if args.token == "-" else args.token.strip()
    return run(_verify(args, resolved, token))


async def _verify(args: argparse.Namespace, resolved: Resolved, token: str) -> int:
    from atwhois.auth import Expected, verify_token

    expected = Expected(
        args.aud,
        args.lxm,
        tuple(args.key_id or ("atproto",)),
        bare_audience=not args.refuse_bare_audience,
    )
    directory = directory_for(args, resolved)
    try:
        verification = await verify_token(token, expected, directory, replay=args.replay)
    finally:
        await directory.aclose()
    report = verification.to_json()
    if args.json:
        say(json.dumps(report, indent=2))
    else:
        say(_text(report))
    if verification.rule in _UNREADABLE:
        return 2
    return EXIT_CODES[verification.outcome]


# A token that is not one at all (exit 2, as an identifier that is none), not a refusal.
_UNREADABLE = frozenset({"SA-JWT-1", "SA-JWT-2"})


def _text(report: dict[str, object]) -> str:
    outcome = str(report["outcome"])
    lines = [{"valid": "valid", "invalid": "INVALID", "unavailable": "UNAVAILABLE"}[outcome]]
    if report["rule"] or report["reason"]:
        rule = f" [{report['rule']}]" if report["rule"] else ""
        lines.append(f"  why       {report['reason']}{rule}")
    if report["issuer"]:
        lines.append(f"  issuer    {report['issuer']}")
    if report["declared_handle"]:  # a token's verdict never waits on the handle
        lines.append(f"  handle    {report['declared_handle']} (its document says; not checked)")
    if report["key_id"]:
        lines.append(f"  key       #{report['key_id']}")
    if report["method"]:
        lines.append(f"  method    {report['method']}")
    if report["expires_at"]:
        lines.append(f"  expires   {report['expires_at']} (Unix time)")
    document = report["document"]
    if isinstance(document, dict) and document.get("checked_at"):
        again = ", resolved again for this token" if document.get("refreshed") else ""
        lines.append(f"  document  checked {document['checked_at']}{again}")
    replay = report["replay"]
    if isinstance(replay, dict) and replay.get("warning"):
        lines.append(f"  replay    {replay['warning']}")
    return "\n".join(lines)
