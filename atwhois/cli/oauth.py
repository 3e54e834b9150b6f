"""`atwhois oauth IDENTIFIER`: an account's OAuth authorization server found from its
identity and checked (docs/spec.md: O-*), here or by a running daemon (`--server`), with the
lookup's exit codes: 0 ok, 1 invalid or not verified, 2 input that names no account, 3
unavailable (transient)."""

from __future__ import annotations

import argparse
import json
import sys

from atwhois.resolver.errors import InvalidInput
from atwhois.resolver.oauth import OAuthServer

from .configuration import Resolved
from .lookup import directory_for
from .running import configure, run, say

EXIT_CODES = {"ok": 0, "invalid": 1, "not_verified": 1, "unavailable": 3}


def oauth(args: argparse.Namespace) -> int:
    return run(_find(args, configure(args)))


async def _find(args: argparse.Namespace, resolved: Resolved) -> int:
    from atwhois.auth import oauth_server

    directory = directory_for(args, resolved)
    try:
        found = await oauth_server(directory, args.identifier, config=resolved.config)
    except InvalidInput as err:
        print(f"atwhois: {err}", file=sys.stderr)
        return 2
    finally:
        await directory.aclose()
    say(json.dumps(found.to_json(), indent=2) if args.json else _text(found))
    return EXIT_CODES[found.outcome]


_HEADLINES = {
    "ok": "ok",
    "invalid": "INVALID",
    "not_verified": "NOT VERIFIED",
    "unavailable": "UNAVAILABLE (transient: try again)",
}


def _text(found: OAuthServer) -> str:
    status = f" ({found.status})" if found.outcome == "not_verified" else ""
    lines = [_HEADLINES[found.outcome] + status]
    if found.reason:
        rule = f" [{found.rule}]" if found.rule else ""
        lines.append(f"  why       {found.reason}{rule}")
    lines.append(f"  account   {found.query}")
    for label, value in (
        ("did", found.did),
        ("handle", found.handle),
        ("pds", found.pds),
        ("issuer", found.issuer),
    ):
        if value:
            lines.append(f"  {label:<9} {value}")
    server = found.authorization_server or {}
    if found.ok:
        for label, field in (
            ("par", "pushed_authorization_request_endpoint"),
            ("authorize", "authorization_endpoint"),
            ("token", "token_endpoint"),
        ):
            lines.append(f"  {label:<9} {server.get(field)}")
        scopes = " ".join(str(scope) for scope in server.get("scopes_supported", []))
        lines.append(f"  scopes    {scopes}")
    if found.kept_s is not None:
        lines.append(f"  kept      the documents were fetched {found.kept_s:.0f} s ago")
    return "\n".join(lines)
