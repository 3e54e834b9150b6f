"""`atwhois`: who is behind a handle or a DID, and is the binding verified both ways?

Exit codes: 0 verified, 1 resolved but not verified, 2 invalid input, 3 transient failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence

from resolver import Config, Identity, Resolver
from resolver.config import parse_nameservers, parse_networks
from resolver.errors import InvalidInput

from .render import render_text

COMMANDS = ("lookup",)
EXAMPLES = """examples:
  atwhois alice.example.com
  atwhois lookup @alice.example.com --json
  atwhois did:plc:ewvi7nxzyoun6zhxrhs64oiz
  atwhois at://alice.example.com/app.bsky.feed.post/3k2a

exit codes: 0 verified, 1 not verified, 2 invalid input, 3 transient failure
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atwhois",
        description="Resolve an ATProto handle, DID or at:// URI and verify the binding both ways.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("identifier", help="a handle (with or without @), a DID, or an at:// URI")
    parser.add_argument("--json", action="store_true", help="print the Identity report as JSON")
    parser.add_argument(
        "--document", action="store_true", help="with --json, include the DID document as served"
    )
    parser.add_argument("--plc-url", help="PLC directory base URL (env ATWHOIS_PLC_URL)")
    parser.add_argument(
        "--dns-server",
        action="append",
        metavar="HOST:PORT",
        help="nameserver to ask, repeatable (env ATWHOIS_DNS_SERVERS)",
    )
    parser.add_argument(
        "--dns-fallback",
        action="append",
        metavar="HOST:PORT",
        help="nameserver asked when the others fail, repeatable",
    )
    parser.add_argument("--ca-bundle", help="PEM file of trusted CAs (env ATWHOIS_CA_BUNDLE)")
    parser.add_argument(
        "--allow-net",
        action="append",
        metavar="CIDR",
        help="let fetches reach this private/loopback range (env ATWHOIS_ALLOW_NETS)",
    )
    parser.add_argument(
        "--dev",
        action="store_true",
        default=None,
        help="development: .test handles, did:web:localhost, http for localhost",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="per-step deadline for DNS, HTTPS and the DID document",
    )
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    overrides: dict[str, object] = {
        "plc_url": args.plc_url,
        "ca_bundle": args.ca_bundle,
        "dev": args.dev,
        "dns_servers": parse_nameservers(args.dns_server) if args.dns_server else None,
        "dns_fallback_servers": parse_nameservers(args.dns_fallback) if args.dns_fallback else None,
        "allow_nets": parse_networks(args.allow_net) if args.allow_net else None,
    }
    if args.timeout is not None:
        overrides.update(
            dns_timeout=args.timeout, https_timeout=args.timeout, document_timeout=args.timeout
        )
    return Config.from_env(**overrides)


async def _lookup(config: Config, identifier: str) -> Identity:
    async with Resolver(config) as resolver:
        return await resolver.lookup(identifier)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        argv = argv[1:]
    args = _parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except (InvalidInput, ValueError) as err:
        print(f"atwhois: bad configuration: {err}", file=sys.stderr)
        return 2
    identity = asyncio.run(_lookup(config, args.identifier))
    if args.json:
        print(json.dumps(identity.to_json(include_document=args.document), indent=2))
    else:
        print(render_text(identity))
    return identity.status.exit_code
