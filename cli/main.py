"""`atwhois`: who is behind a handle or a DID, and is the binding verified both ways?

Exit codes: 0 verified, 1 resolved but not verified, 2 invalid input, 3 transient failure.

Only the standard library and the pure configuration code are imported here: each command
imports what it uses when it runs, so `--help`, `--version` and a typo answer at once instead
of after a second of network-stack imports.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from resolver.config import Config, parse_nameservers, parse_networks
from resolver.errors import InvalidInput

if TYPE_CHECKING:
    from cache import CachedResolver
    from resolver import Identity, Resolver
    from resolver.plc import Audit
    from resolver.plc.export import ExportSummary

    from .sources import Source

T = TypeVar("T")

EXAMPLES = """examples:
  atwhois alice.example.com
  atwhois lookup @alice.example.com --json
  atwhois did:plc:ewvi7nxzyoun6zhxrhs64oiz --verify-plc
  atwhois at://alice.example.com/app.bsky.feed.post/3k2a
  atwhois https://bsky.app/profile/alice.example.com
  atwhois --file handles.txt --json > reports.jsonl     (or: ... | atwhois -)
  atwhois alice.example.com --server http://127.0.0.1:2584
  atwhois history did:plc:ewvi7nxzyoun6zhxrhs64oiz
  atwhois plc verify-export export.jsonl --known-bad known_bad_cids.json

  atwhois cache stats
  atwhois cache purge alice.example.com

  atwhois serve --port 2584

  atwhois watch add alice.example.com --label "our PDS"
  atwhois audit --format markdown
  atwhois audit history alice.example.com

commands: lookup (the default), history, plc verify-export, cache stats|purge, serve,
          watch add|remove|list, audit [FILE], audit history ID
exit codes: 0 verified, 1 not verified, 2 invalid input, 3 transient failure
"""


def _config_flags() -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(add_help=False)
    group = flags.add_argument_group("resolution (flags win over ATWHOIS_* variables)")
    group.add_argument("--plc-url", help="PLC directory base URL (env ATWHOIS_PLC_URL)")
    group.add_argument(
        "--dns-server",
        action="append",
        metavar="HOST:PORT",
        help="nameserver to ask, repeatable (env ATWHOIS_DNS_SERVERS)",
    )
    group.add_argument(
        "--dns-fallback",
        action="append",
        metavar="HOST:PORT",
        help="nameserver asked when the others fail, repeatable",
    )
    group.add_argument("--ca-bundle", help="PEM file of trusted CAs (env ATWHOIS_CA_BUNDLE)")
    group.add_argument(
        "--allow-net",
        action="append",
        metavar="CIDR",
        help="let fetches reach this private/loopback range (ATWHOIS_ALLOW_NETS)",
    )
    group.add_argument(
        "--dev",
        action="store_true",
        default=None,
        help="development: .test handles, did:web:localhost, http for localhost",
    )
    group.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="per-step deadline for DNS, HTTPS and the DID document",
    )
    group.add_argument(
        "--verify-plc",
        action="store_true",
        default=None,
        help="replay the did:plc audit log (env ATWHOIS_VERIFY_PLC=1)",
    )
    return flags


def _lookup_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atwhois",
        description="Resolve an ATProto handle, DID or at:// URI and verify the binding both ways.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_config_flags()],
    )
    parser.add_argument(
        "identifier",
        nargs="?",
        help="a handle (with or without @), a DID, an at:// URI, a profile URL; - reads many "
        "from standard input",
    )
    parser.add_argument("--file", type=Path, help="resolve every identifier in FILE, one a line")
    parser.add_argument("--concurrency", type=int, default=16, help="batch: lookups at once")
    parser.add_argument(
        "--server", metavar="URL", help="ask a running `atwhois serve` instead of resolving here"
    )
    parser.add_argument("--json", action="store_true", help="print the Identity report as JSON")
    parser.add_argument(
        "--document", action="store_true", help="with --json, include the DID document as served"
    )
    parser.add_argument(
        "--cache",
        metavar="URL",
        help="answer from this cache (memory:, sqlite:///PATH, redis://...; env ATWHOIS_CACHE)",
    )
    parser.add_argument(
        "--refresh",
        action="store_true",
        help="with --cache: resolve every part afresh and update the cache (a failure "
        "leaves the cached answer in place)",
    )
    parser.add_argument("--version", action="version", version="atwhois 0.1.0")
    return parser


def _cache_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atwhois cache",
        description="Look into or purge the cache of verified bindings (by default the "
        "embedded SQLite file; --cache or ATWHOIS_CACHE name another).",
        parents=[_config_flags()],
    )
    parser.add_argument("action", choices=["stats", "purge"])
    parser.add_argument("identifier", nargs="?", help="with purge: a handle or DID")
    parser.add_argument("--cache", metavar="URL")
    parser.add_argument("--json", action="store_true", help="print JSON")
    return parser


def _history_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atwhois history",
        description="Replay a did:plc's operation log: who signed what, what it changed, and "
        "whether the log verifies. Exit 0 if it does, 1 if not.",
        parents=[_config_flags()],
    )
    parser.add_argument("did", help="a did:plc")
    parser.add_argument("--json", action="store_true")
    return parser


def _export_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atwhois plc verify-export",
        description="Verify a PLC directory export (JSON Lines, legacy or seq format) op by op, "
        "in bounded memory. Exit 0 if every op verifies (allow-listed ones aside), 1 if not.",
    )
    parser.add_argument("file", help="the export file, or - for standard input")
    parser.add_argument(
        "--known-bad",
        action="append",
        default=[],
        metavar="JSON",
        help="JSON array of CIDs or DIDs known to be bad (allow-list), repeatable",
    )
    parser.add_argument("--json", action="store_true")
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    overrides: dict[str, object] = {
        "plc_url": args.plc_url,
        "ca_bundle": args.ca_bundle,
        "dev": args.dev,
        "verify_plc": args.verify_plc,
        "dns_servers": parse_nameservers(args.dns_server) if args.dns_server else None,
        "dns_fallback_servers": parse_nameservers(args.dns_fallback) if args.dns_fallback else None,
        "allow_nets": parse_networks(args.allow_net) if args.allow_net else None,
    }
    if args.timeout is not None:
        overrides.update(
            dns_timeout=args.timeout, https_timeout=args.timeout, document_timeout=args.timeout
        )
    return Config.from_env(**overrides)


def _configured(args: argparse.Namespace) -> Config | None:
    try:
        return config_from_args(args)
    except (InvalidInput, ValueError) as err:
        print(f"atwhois: bad configuration: {err}", file=sys.stderr)
        return None


def _run(work: Coroutine[Any, Any, T]) -> T:
    import asyncio  # here, not at the top: `--help` and bad input never need an event loop

    return asyncio.run(work)


def _with_resolver(config: Config, work: Callable[[Resolver], Any]) -> Any:
    from resolver import Resolver

    async def run() -> Any:
        async with Resolver(config) as resolver:
            return await work(resolver)

    return _run(run())


def _cache_url(args: argparse.Namespace) -> str | None:
    return args.cache or os.environ.get("ATWHOIS_CACHE") or None


async def _cached(config: Config, url: str | None, work: Callable[[CachedResolver], Any]) -> Any:
    from cache import CachedResolver, open_store
    from resolver import Resolver

    async with CachedResolver(Resolver(config), open_store(url)) as cached:
        return await work(cached)


def _source(args: argparse.Namespace, config: Config) -> Source:
    from .sources import LocalSource, ServerSource

    if args.server:
        return ServerSource(args.server)
    from cache import CachedResolver, open_store
    from resolver import Resolver

    url = _cache_url(args)
    if url is None:
        return LocalSource(Resolver(config))
    return LocalSource(CachedResolver(Resolver(config), open_store(url)), refresh=args.refresh)


def lookup(argv: list[str]) -> int:
    parser = _lookup_parser()
    args = parser.parse_args(argv)
    config = _configured(args)
    if config is None:
        return 2
    if args.file is not None or args.identifier == "-":
        try:
            text = args.file.read_text() if args.file is not None else sys.stdin.read()
        except (OSError, UnicodeDecodeError) as err:
            where = args.file or "standard input"
            print(f"atwhois: cannot read identifiers from {where}: {err}", file=sys.stderr)
            return 2
        identifiers = [line.strip() for line in text.splitlines()]
        identifiers = [i for i in identifiers if i and not i.startswith("#")]
        return _run(_batch(_source(args, config), identifiers, args))
    if not args.identifier:
        parser.error("give an identifier, - for standard input, or --file FILE")
    identifier = args.identifier.strip()
    if not args.server:  # invalid input is answered before the network stack is loaded
        from resolver.identity import invalid_input, now_iso
        from resolver.syntax import parse_lookup

        try:
            parse_lookup(identifier, dev=config.dev)
        except InvalidInput as err:
            return _show(invalid_input(identifier, err, now_iso()), None, args)
    return _run(_single(_source(args, config), identifier, args))


async def _single(source: Source, identifier: str, args: argparse.Namespace) -> int:
    try:
        identity = await source.lookup(identifier)
        history = None
        if not args.json and identity.did and identity.did.startswith("did:plc:"):
            history = await source.history(identity.did)
        return _show(identity, history, args)
    finally:
        await source.aclose()


def _show(identity: Identity, history: Audit | None, args: argparse.Namespace) -> int:
    """One report, as JSON or as text; its exit code."""
    if args.json:
        _print(json.dumps(identity.to_json(include_document=args.document), indent=2))
    else:
        from .render import Style, render_text, wants_color

        style = Style(wants_color(sys.stdout))
        _print(render_text(identity, history, style=style, server=args.server))
    return int(identity.status.exit_code)


async def _batch(source: Source, identifiers: list[str], args: argparse.Namespace) -> int:
    """Many lookups, at most --concurrency at once; one line each as they finish; a count by
    status at the end; the worst exit code."""
    import asyncio

    from .render import Style, verdict_line, wants_color

    gate = asyncio.Semaphore(max(1, args.concurrency))
    style = Style(wants_color(sys.stdout))
    progress = sys.stderr.isatty()
    statuses: Counter[str] = Counter()

    async def one(identifier: str) -> Identity:
        async with gate:
            return await source.lookup(identifier)

    def counter(text: str) -> None:
        """The progress line on a terminal's stderr: redrawn in place, and erased before a
        result is printed, so the two never share a line."""
        if progress:
            print(f"\r\x1b[K{text}", end="", file=sys.stderr, flush=True)

    worst = 0
    try:
        for done, finished in enumerate(asyncio.as_completed([one(i) for i in identifiers]), 1):
            identity = await finished
            statuses[str(identity.status)] += 1
            worst = max(worst, identity.status.exit_code)
            counter("")
            if args.json:
                _print(json.dumps(identity.to_json(include_document=args.document)))
            else:
                _print(verdict_line(identity, style))
            counter(f"  {done}/{len(identifiers)}")
    finally:
        counter("")
        await source.aclose()
    summary = ", ".join(f"{status} {n}" for status, n in statuses.most_common())
    print(
        f"summary: {len(identifiers)} identifiers: {summary or 'none'}",
        file=sys.stderr if args.json else sys.stdout,
    )
    return worst


def history(argv: list[str]) -> int:
    args = _history_parser().parse_args(argv)
    from resolver.errors import ResolutionError
    from resolver.syntax import check_plc_did, parse_did

    from .render import render_history

    config = _configured(args)
    if config is None:
        return 2
    try:
        check_plc_did(parse_did(args.did))
    except InvalidInput as err:
        print(f"atwhois history: {err}", file=sys.stderr)
        return 2
    try:
        audit = _with_resolver(config, lambda r: r.audit_log(args.did))
    except ResolutionError as err:
        print(f"atwhois history: {err}", file=sys.stderr)
        return 1 if err.outcome.value in ("not_found", "invalid") else 3
    _print(json.dumps(audit.to_json(), indent=2) if args.json else render_history(audit))
    return 0 if audit.valid else 1


def _known_bad(paths: list[str]) -> frozenset[str]:
    items: set[str] = set()
    for path in paths:
        items.update(str(x) for x in json.loads(Path(path).read_text()))
    return frozenset(items)


def _lines(file: IO[bytes]) -> Iterator[bytes]:
    yield from file


def verify_export_command(argv: list[str]) -> int:
    args = _export_parser().parse_args(argv)
    from resolver.plc.export import verify_export

    try:
        known_bad = _known_bad(args.known_bad)
    except (OSError, ValueError, TypeError) as err:
        print(f"atwhois plc verify-export: bad --known-bad file: {err}", file=sys.stderr)
        return 2

    def progress(summary: ExportSummary) -> None:
        print(
            f"  {summary.ops:,} ops, {summary.dids:,} DIDs, {summary.invalid_ops:,} invalid",
            file=sys.stderr,
            flush=True,
        )

    try:
        source = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    except OSError as err:
        print(f"atwhois plc verify-export: {err}", file=sys.stderr)
        return 2
    with source:
        summary = verify_export(_lines(source), known_bad=known_bad, progress=progress)
    if args.json:
        _print(json.dumps(summary.to_json(), indent=2))
    else:
        rules = ", ".join(f"{rule} {n}" for rule, n in summary.by_rule.most_common()) or "none"
        lines = [
            f"{'export verifies' if summary.valid else 'export does NOT verify'}: "
            f"{summary.dids:,} DIDs, {summary.ops:,} ops",
            f"  invalid ops {summary.invalid_ops:,}, allow-listed {summary.allowed_ops:,}, "
            f"unreadable lines {summary.bad_lines:,}",
            f"  findings by rule: {rules}",
            *(f"  {example}" for example in summary.examples),
        ]
        _print("\n".join(lines))
    return 0 if summary.valid else 1


def cache_command(argv: list[str]) -> int:
    parser = _cache_parser()
    args = parser.parse_args(argv)
    from cache.stores import StoreUnavailable
    from resolver.syntax import parse_lookup

    config = _configured(args)
    if config is None:
        return 2
    url = _cache_url(args)
    if args.action == "stats":
        stats = _run(_cached(config, url, lambda c: c.stats()))
        _print(
            json.dumps(stats, indent=2)
            if args.json
            else "\n".join(f"{name:12} {value}" for name, value in stats.items())
        )
        return 0
    if not args.identifier:
        parser.error("purge needs a handle or DID")
    try:
        parse_lookup(args.identifier, dev=config.dev)
    except InvalidInput as err:
        print(f"atwhois cache purge: {err}", file=sys.stderr)
        return 2
    try:
        purged = _run(_cached(config, url, lambda c: c.purge(args.identifier)))
    except StoreUnavailable as err:
        print(f"atwhois cache purge: the cache store did not take it: {err}", file=sys.stderr)
        return 3
    if args.json:
        _print(json.dumps({"purged": purged}))
    else:
        _print(f"purged {', '.join(purged)}" if purged else f"{args.identifier} was not cached")
    return 0 if purged else 1


def _print(text: str) -> None:
    print(text, flush=True)  # flushed now: a reader that left is noticed inside `main`


_SIGPIPE_EXIT = 128 + 13  # what a shell reports for a process ended by SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    # What atwhois prints holds strangers' strings (aliases, endpoints, a log's fields), and
    # JSON lets them carry lone surrogates that no encoding can write: show them escaped.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    try:
        return _dispatch(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        # `atwhois … | head`: the reader left, which is no error of ours. Stop, and point
        # stdout at /dev/null so that the interpreter's last flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _SIGPIPE_EXIT


def _dispatch(args: list[str]) -> int:
    if args[:1] == ["history"]:
        return history(args[1:])
    if args[:2] == ["plc", "verify-export"]:
        return verify_export_command(args[2:])
    if args[:1] == ["cache"]:
        return cache_command(args[1:])
    if args[:1] == ["watch"]:
        from . import audit as audit_cli

        return audit_cli.watch(args[1:], _config_flags(), _configured)
    if args[:1] == ["audit"]:
        from . import audit as audit_cli

        return audit_cli.audit(args[1:], _config_flags(), _configured)
    if args[:2] == ["config", "show"]:
        from . import serve

        parser = serve.parser(_config_flags())
        parser.prog = "atwhois config show"
        parser.description = "Every setting of the daemon, its value and where it came from."
        parser.add_argument("--json", action="store_true", help="print JSON")
        show_args = parser.parse_args(args[2:])
        config = _configured(show_args)
        return 2 if config is None else serve.config_show(show_args, config)
    if args[:1] == ["serve"]:
        from . import serve

        serve_args = serve.parser(_config_flags()).parse_args(args[1:])
        config = _configured(serve_args)
        return 2 if config is None else serve.run(serve_args, config)
    if args[:1] == ["lookup"]:
        args = args[1:]
    return lookup(args)
