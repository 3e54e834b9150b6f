"""`atwhois cache`: what the cache of verified bindings holds, and forgetting one identity."""

from __future__ import annotations

import argparse
import json
import sys

from atwhois.resolver.errors import InvalidInput

from .running import configure, run, say, with_cache


def stats(args: argparse.Namespace) -> int:
    stats = run(with_cache(configure(args), lambda c: c.stats()))
    say(
        json.dumps(stats, indent=2)
        if args.json
        else "\n".join(f"{name:12} {value}" for name, value in stats.items())
    )
    return 0


def purge(args: argparse.Namespace) -> int:
    from atwhois.cache.keys import identifier_of
    from atwhois.cache.stores import StoreUnavailable
    from atwhois.resolver.syntax import parse_lookup

    resolved = configure(args)
    try:
        parse_lookup(args.identifier, dev=resolved.config.dev)
    except InvalidInput as err:
        print(f"{args.prog}: {err}", file=sys.stderr)
        return 2
    try:
        purged = run(with_cache(resolved, lambda c: c.purge(args.identifier)))
    except StoreUnavailable as err:
        print(f"{args.prog}: the cache store did not take it: {err}", file=sys.stderr)
        return 3
    named = [identifier_of(key) for key in purged]  # the handle and the DID, not their keys
    if args.json:
        say(json.dumps({"purged": named}))
    else:
        say(f"purged {' and '.join(named)}" if named else f"{args.identifier} was not cached")
    return 0 if purged else 1
