"""`atwhois`: who is behind a handle or a DID, and is the binding verified both ways?

Exit codes: 0 verified, 1 resolved but not verified, 2 invalid input, 3 transient failure.

The commands are argparse subparsers: the standard library's parser costs nothing to import
(a whois-style tool answers `--help` and a typo in ~100 ms), gives every command its own help
with only the flags that apply, and its errors name the command. What argparse does not do is
done by `route`: a command line that names no command is a lookup (`atwhois alice.test`),
settings flags may come before the command (`atwhois --dev history alice.test`), and a
mistyped command gets a suggestion.

Only the standard library and the pure configuration code are imported here: each command
imports what it uses when it runs.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import io
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from resolver.config import Config
from resolver.errors import InvalidInput

from . import settings

if TYPE_CHECKING:
    from resolver import Identity, Resolver
    from resolver.directory import Directory
    from resolver.plc.export import ExportSummary
    from resolver.syntax import Query

T = TypeVar("T")
VERSION = "atwhois 0.1.0"

EXAMPLES = """examples:
  atwhois alice.example.com
  atwhois lookup @alice.example.com --json
  atwhois did:plc:ewvi7nxzyoun6zhxrhs64oiz --verify-plc
  atwhois at://alice.example.com/app.bsky.feed.post/3k2a
  atwhois https://bsky.app/profile/alice.example.com
  atwhois --file handles.txt --json > reports.jsonl     (or: ... | atwhois -)
  atwhois alice.example.com --server http://127.0.0.1:2584
  atwhois history alice.example.com
  atwhois plc verify-export export.jsonl --known-bad known_bad_cids.json
  atwhois cache stats
  atwhois cache purge alice.example.com
  atwhois serve --port 2584
  atwhois config show
  atwhois watch add alice.example.com --label "our PDS"
  atwhois audit --format markdown
  atwhois audit history alice.example.com

`atwhois COMMAND --help` shows a command's flags. Settings flags (--dev, --plc-url, ...) may
come before or after the command; each has an ATWHOIS_* variable and a TOML key of the same
name (`atwhois config show` lists them all).
exit codes: 0 verified, 1 not verified, 2 invalid input, 3 transient failure
"""

RESOLUTION = settings.names_in(settings.RESOLUTION)
EVERY_SETTING = list(settings.SETTINGS)


class Parser(argparse.ArgumentParser):
    """argparse without prefix abbreviations (`--plc` must not quietly mean `--plc-url`,
    nor stop meaning it when a flag is added) and with a suggestion for a mistyped
    subcommand."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        wrong = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if wrong:
            choices = re.findall(r"'([^']*)'", wrong.group(2))
            near = difflib.get_close_matches(wrong.group(1), choices, n=1)
            if near:
                message += f"; did you mean {near[0]!r}?"
        super().error(message)


@dataclass(frozen=True)
class Command:
    """One command: its words, its handler ("module:function", imported only when it runs),
    its one-line help, the settings it takes and its own arguments."""

    path: tuple[str, ...]
    handler: str
    help: str
    settings: Sequence[str] = ()
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    description: str | None = None


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")


def _lookup_arguments(parser: argparse.ArgumentParser) -> None:
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
        "--refresh",
        action="store_true",
        help="with --cache: resolve every part afresh and update the cache (a failure "
        "leaves the cached answer in place)",
    )


def _identifier_and_json(what: str) -> Callable[[argparse.ArgumentParser], None]:
    def arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("identifier", help=what)
        _json_flag(parser)

    return arguments


MIRROR_LISTEN = "127.0.0.1:2582"


def _mirror_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--listen",
        default=MIRROR_LISTEN,
        metavar="HOST:PORT",
        help=f"where to serve the PLC read API (default {MIRROR_LISTEN}; port 0: any)",
    )
    parser.add_argument("--once", action="store_true", help="catch up, print a summary, stop")
    parser.add_argument(
        "--report",
        action="store_true",
        help="print the refused operations and flagged DIDs the mirror holds, and stop",
    )
    parser.add_argument("--json", action="store_true", help="--once and --report as JSON")


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the export file, or - for standard input")
    parser.add_argument(
        "--known-bad",
        action="append",
        default=[],
        metavar="JSON",
        help="JSON array of CIDs or DIDs known to be bad (allow-list), repeatable",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="processes replaying the DIDs, routed by DID (default: one per core when there "
        "are several; 0: this process)",
    )
    _json_flag(parser)


def _identifiers(label: bool) -> Callable[[argparse.ArgumentParser], None]:
    def arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("identifiers", nargs="+", metavar="IDENTIFIER")
        if label:
            parser.add_argument("--label", help="a note kept beside the identifiers")

    return arguments


def _import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the CSV file, or - for standard input")


def _audit_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", type=Path, help="identifiers, one a line")
    parser.add_argument("--format", choices=("text", "json", "csv", "markdown"), default="text")
    parser.add_argument("--concurrency", type=int, default=32, help="identities checked at once")
    parser.add_argument(
        "--per-host", type=int, default=8, help="requests at once to one upstream host (politeness)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes doing the lookups (default 1: this one); the concurrency and the "
        "per-host limit are shared out between them",
    )
    parser.add_argument(
        "--fail-on",
        choices=("critical", "warning", "any"),
        default="critical",
        help="exit 1 when an identity or finding is at this level or worse (default: "
        "critical); 3 when the run could not complete or its webhook is still owed",
    )


SERVE_DESCRIPTION = """The local HTTP service: XRPC com.atproto.identity.*, /v1/identity, audits,
/_health and /metrics.

It binds 127.0.0.1 unless told otherwise, caches in the embedded SQLite file unless given
--cache, and stops gracefully on SIGTERM: no new connections, in-flight requests finish,
stores are closed."""
AUDIT_STORE = ["dev", "audit_db"]
AUDIT_RUN_SETTINGS = [
    *RESOLUTION,
    "cache",
    "audit_db",
    "webhook",
    "webhook_secret",
    "webhook_format",
    "unreachable_after",
]

# Groups of commands: their help; a group's first command is its default if it has one.
GROUPS = {
    "plc": "the PLC directory",
    "cache": "look into or purge the cache of verified bindings (the embedded SQLite file "
    "unless --cache or ATWHOIS_CACHE names another)",
    "config": "the settings",
    "watch": "the watch-list that audits re-verify",
    "audit": "re-verify the watch-list and report what changed (`audit [FILE]` runs one, "
    "`audit history ID` shows one identity's checks)",
}
DEFAULT_SUBCOMMAND = {"audit": "run"}
COMMANDS = [
    Command(
        ("lookup",),
        "cli.main:lookup",
        "who is behind a handle, DID, at:// URI or profile URL, verified both ways",
        [*RESOLUTION, "cache"],
        _lookup_arguments,
    ),
    Command(
        ("history",),
        "cli.main:history",
        "replay a did:plc's operation log: who signed what, what it changed, whether it "
        "verifies (exit 0 if it does, 1 if not)",
        RESOLUTION,
        _identifier_and_json("a did:plc, or a handle (its DID's log is shown)"),
    ),
    Command(
        ("plc", "verify-export"),
        "cli.main:verify_export_command",
        "verify a PLC directory export (JSON Lines, legacy or seq format) op by op, in bounded "
        "memory; exit 0 if every op verifies (allow-listed ones aside), 1 if not",
        arguments=_export_arguments,
    ),
    Command(
        ("plc", "mirror"),
        "cli.mirror:run",
        "mirror the PLC directory named by --plc-url, verifying every operation, and serve "
        "its read API (GET /{did}, /log/audit, /export, ...); exit 1 after --once if the "
        "upstream served ops the rules refuse",
        ["plc_url", "plc_db", "plc_mirror_interval", "plc_mirror_workers", "plc_mirror_profile"],
        _mirror_arguments,
    ),
    Command(
        ("cache", "stats"), "cli.main:cache_stats", "what the cache holds", ["cache"], _json_flag
    ),
    Command(
        ("cache", "purge"),
        "cli.main:cache_purge",
        "forget one identity (its handle and DID entries); exit 1 if nothing was cached",
        ["dev", "cache"],
        _identifier_and_json("a handle or DID"),
    ),
    Command(
        ("serve",),
        "cli.serve:run",
        "the local HTTP service: XRPC com.atproto.identity.*, /v1, audits, /metrics",
        EVERY_SETTING,
        description=SERVE_DESCRIPTION,
    ),
    Command(
        ("config", "show"),
        "cli.serve:config_show",
        "every setting, the value in effect and where it came from (flag, variable, file, "
        "default); secrets are shown as set, never printed",
        EVERY_SETTING,
        _json_flag,
    ),
    Command(
        ("watch", "add"), "cli.audit:watch_add", "watch identities", AUDIT_STORE, _identifiers(True)
    ),
    Command(
        ("watch", "remove"),
        "cli.audit:watch_remove",
        "stop watching identities",
        AUDIT_STORE,
        _identifiers(False),
    ),
    Command(("watch", "list"), "cli.audit:watch_list", "the watch-list", ["audit_db"], _json_flag),
    Command(
        ("watch", "import"),
        "cli.audit:watch_import",
        "watch every identifier of a CSV file (identifier[,label] a line; # comments; - for "
        "standard input); all or none: a bad line is named and nothing is added",
        AUDIT_STORE,
        _import_arguments,
    ),
    Command(
        ("watch", "export"),
        "cli.audit:watch_export",
        "the watch-list as CSV (identifier,label), which watch import reads back",
        ["audit_db"],
    ),
    Command(
        ("audit", "run"),
        "cli.audit:audit_run",
        "re-verify the watch-list (or the identifiers in FILE, without adding them to it), "
        "store one check each, and report what changed since the last check",
        [*AUDIT_RUN_SETTINGS],
        _audit_run_arguments,
    ),
    Command(
        ("audit", "history"),
        "cli.audit:audit_history",
        "one identity's checks over time",
        AUDIT_STORE,
        _identifier_and_json("a handle or DID on the watch-list"),
    ),
]
# The command tree as `route` walks it: each first word and the words that may follow it.
TREE: dict[str, tuple[str, ...]] = {
    first: tuple(c.path[1] for c in COMMANDS if c.path[0] == first and len(c.path) > 1)
    for first in dict.fromkeys(c.path[0] for c in COMMANDS)
}


def build_parser(running: Sequence[str] | None = None) -> Parser:
    """The command tree. Given the path of the command that runs (`route` found it), only
    that command gets its flags and arguments: the others are named, with their help, but
    not built, which would cost a `--help` or a typo a fifth of its time."""
    top = Parser(
        prog="atwhois",
        description="Resolve an ATProto handle, DID or at:// URI and verify the binding both "
        "ways; cache, serve and audit what was verified.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--version", action="version", version=VERSION)
    commands = _subcommands(top, "commands (lookup is the default: atwhois IDENTIFIER)")
    groups: dict[str, Any] = {}
    for command in COMMANDS:
        where = commands
        if len(command.path) > 1:
            group = command.path[0]
            if group not in groups:
                parent = commands.add_parser(group, help=GROUPS[group], description=GROUPS[group])
                groups[group] = _subcommands(parent, f"{group} commands")
            where = groups[group]
        parser: Parser = where.add_parser(
            command.path[-1],
            help=command.help,
            description=command.description or command.help,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.set_defaults(
            handler=command.handler, settings=list(command.settings), prog=parser.prog
        )
        if running is None or tuple(running) == command.path:
            if command.settings:
                settings.add_flags(parser, command.settings)
            if command.arguments is not None:
                command.arguments(parser)
    return top


def _subcommands(parser: argparse.ArgumentParser, title: str) -> Any:
    return parser.add_subparsers(title=title, metavar="COMMAND", required=True)


def _takes_value(option: str) -> bool | None:
    """Whether a settings flag (or --config) takes a value; None: not a settings flag."""
    if option == "--config":
        return True
    if option == "--json":
        return False
    name = option.removeprefix("--").removeprefix("no-").replace("-", "_")
    setting = settings.SETTINGS.get(name)
    if setting is None or (option.startswith("--no-") and setting.kind is not bool):
        return None
    return setting.kind is not bool


def route(argv: list[str]) -> list[str]:
    """The argument list argparse should see: settings flags given before the command move
    behind it, where its own parser checks them; a list that names no command is a
    lookup. A bare word that is no identifier but is close to a command is refused with
    the suggestion (`UsageError`)."""
    lead: list[str] = []
    at = 0
    while at < len(argv) and argv[at].startswith("--"):
        option, has_value = argv[at].split("=", 1)[0], "=" in argv[at]
        takes = _takes_value(option)
        if takes is None:  # --help, --version, or a lookup's flag (`atwhois --json x`)
            return argv if option in ("--help", "--version") else ["lookup", *argv]
        width = 2 if takes and not has_value else 1
        lead += argv[at : at + width]
        at += width
    if at < len(argv) and argv[at] == "-h":
        return argv
    if at >= len(argv) or argv[at] not in TREE:
        word = argv[at] if at < len(argv) else ""
        if word and not re.search(r"[.:/@]", word):
            near = difflib.get_close_matches(word, TREE, n=1)
            if near:
                raise UsageError("atwhois", f"unknown command {word!r}; did you mean {near[0]!r}?")
        return ["lookup", *argv]
    path = [argv[at]]
    at += 1
    children = TREE[path[0]]
    if children:
        if at < len(argv) and argv[at] in children:
            path.append(argv[at])
            at += 1
        elif path[0] in DEFAULT_SUBCOMMAND:
            path.append(DEFAULT_SUBCOMMAND[path[0]])
        elif lead:  # settings flags before a command group with no default: argparse asks
            return [*path, *argv[at:], *lead]
    return [*path, *lead, *argv[at:]]


class UsageError(Exception):
    """A command line that cannot be run: exit 2, with the command's name."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog


def configure(args: argparse.Namespace) -> tuple[dict[str, Any], Config]:
    """The command's settings (flags, variables, file) and the resolver configuration they
    make; a setting that cannot be used is a `SettingError`."""
    given = settings.values(settings.load(args, args.settings))
    try:
        return given, settings.resolver_config(given)
    except InvalidInput as err:
        raise settings.SettingError(str(err)) from None


def _run(work: Coroutine[Any, Any, T]) -> T:
    # here, not at the top: `--help` and bad input never need an event loop
    import asyncio

    import uvloop

    # uvloop, as `serve` and `audit` resolve: its TLS and sockets cost less CPU per lookup
    # than asyncio's (python -m bench cold)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(work)


def _with_resolver(config: Config, work: Callable[[Resolver], Any]) -> Any:
    from resolver import Resolver

    async def run() -> Any:
        async with Resolver(config) as resolver:
            return await work(resolver)

    return _run(run())


async def _cached(given: dict[str, Any], config: Config, work: Callable[[Any], Any]) -> Any:
    from cache import CachedResolver, open_store
    from resolver import Resolver

    async with CachedResolver(Resolver(config), open_store(given.get("cache"))) as cached:
        return await work(cached)


def _directory(args: argparse.Namespace, given: dict[str, Any], config: Config) -> Directory:
    """Where the answers come from: a running daemon (`--server`), or a resolver here, in
    front of a cache when one is configured."""
    if args.server:
        from resolver.remote import RemoteDirectory

        return RemoteDirectory(args.server)
    from cache import CachedResolver, open_store
    from resolver import Resolver

    url = given.get("cache")
    if url is None:
        return Resolver(config)
    return CachedResolver(Resolver(config), open_store(url))


async def _look(directory: Directory, identifier: str, args: argparse.Namespace) -> Identity:
    """`--refresh` resolves every part of a local cache afresh; `--server` asks the
    daemon's cache as it is."""
    if args.refresh and not args.server:
        return await directory.refresh(identifier)
    return await directory.lookup(identifier)


def identifier_lines(text: str) -> list[str]:
    """A file of identifiers: one a line, blank lines and `#` comments skipped."""
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def lookup(args: argparse.Namespace) -> int:
    given, config = configure(args)
    if args.file is not None or args.identifier == "-":
        try:
            text = args.file.read_text() if args.file is not None else sys.stdin.read()
        except (OSError, UnicodeDecodeError) as err:
            where = args.file or "standard input"
            print(f"atwhois: cannot read identifiers from {where}: {err}", file=sys.stderr)
            return 2
        return _run(_batch(_directory(args, given, config), identifier_lines(text), args))
    if not args.identifier:
        raise UsageError(args.prog, "give an identifier, - for standard input, or --file FILE")
    identifier = args.identifier.strip()
    if not args.server:  # invalid input is answered before the network stack is loaded
        from resolver.identity import invalid_input, now_iso
        from resolver.syntax import parse_lookup

        try:
            parse_lookup(identifier, dev=config.dev)
        except InvalidInput as err:
            return _show(invalid_input(identifier, err, now_iso()), args)
    return _run(_single(_directory(args, given, config), identifier, args))


async def _single(directory: Directory, identifier: str, args: argparse.Namespace) -> int:
    try:
        return _show(await _look(directory, identifier, args), args)
    finally:
        await directory.aclose()


def _show(identity: Identity, args: argparse.Namespace) -> int:
    """One report, as JSON or as text (a view of the same JSON); its exit code."""
    report = identity.to_json(include_document=args.document)
    if args.json:
        _print(json.dumps(report, indent=2))
    else:
        from .render import Style, render_text, wants_color

        _print(render_text(report, style=Style(wants_color(sys.stdout)), server=args.server))
    return int(identity.status.exit_code)


async def _batch(directory: Directory, identifiers: list[str], args: argparse.Namespace) -> int:
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
            return await _look(directory, identifier, args)

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
            report = identity.to_json(include_document=args.document)
            _print(json.dumps(report) if args.json else verdict_line(report, style))
            counter(f"  {done}/{len(identifiers)}")
    finally:
        counter("")
        await directory.aclose()
    summary = ", ".join(f"{status} {n}" for status, n in statuses.most_common())
    print(
        f"summary: {len(identifiers)} identifiers: {summary or 'none'}",
        file=sys.stderr if args.json else sys.stdout,
    )
    return worst


def history(args: argparse.Namespace) -> int:
    """The operation log of a did:plc, given as such or through a handle (or any identifier
    a lookup takes): the lookup says which DID the log belongs to and how far the binding
    was verified."""
    from resolver.syntax import parse_lookup

    _, config = configure(args)
    try:
        query = parse_lookup(args.identifier.strip(), dev=config.dev)
    except InvalidInput as err:
        print(f"{args.prog}: {err}", file=sys.stderr)
        return 2
    if query.kind == "did" and not query.value.startswith("did:plc:"):
        print(f"{args.prog}: {query.value}: only a did:plc has an operation log", file=sys.stderr)
        return 2
    return int(_with_resolver(config, lambda r: _history(r, query, args)))


async def _history(resolver: Resolver, query: Query, args: argparse.Namespace) -> int:
    from resolver.errors import ResolutionError

    from .render import render_history

    found, identifier = None, query.text
    if query.kind == "did":
        did = query.value
    else:
        found = await resolver.lookup(identifier)
        if found.did is None:
            print(f"{args.prog}: {identifier}: {found.error}", file=sys.stderr)
            return int(found.status.exit_code)
        did = found.did
        if not did.startswith("did:plc:"):
            print(
                f"{args.prog}: {identifier} is {did}: only a did:plc has an operation log",
                file=sys.stderr,
            )
            return 1
    try:
        audit = await resolver.audit_log(did)
    except ResolutionError as err:
        print(f"{args.prog}: {err}", file=sys.stderr)
        return 1 if err.outcome.value in ("not_found", "invalid") else 3
    report = audit.to_json()
    if found is not None:  # which identity's log this is, and whether the handle holds
        report["lookup"] = {"query": identifier, "did": did, "status": str(found.status)}
    if args.json:
        _print(json.dumps(report, indent=2))
    else:
        if found is not None:
            _print(f"{identifier} -> {did} [{found.status}]")
        _print(render_history(audit))
    return 0 if audit.valid else 1


def _known_bad(paths: list[str]) -> frozenset[str]:
    items: set[str] = set()
    for path in paths:
        items.update(str(x) for x in json.loads(Path(path).read_text()))
    return frozenset(items)


def verify_export_command(args: argparse.Namespace) -> int:
    from resolver.plc.export import verify_export

    from .export_workers import default_workers, freezing, verify_export_in_workers

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
    workers = default_workers() if args.workers is None else max(args.workers, 0)
    with source:
        if workers:
            summary = verify_export_in_workers(
                source, workers, known_bad=known_bad, progress=progress
            )
        else:
            summary = verify_export(freezing(source), known_bad=known_bad, progress=progress)
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


def cache_stats(args: argparse.Namespace) -> int:
    given, config = configure(args)
    stats = _run(_cached(given, config, lambda c: c.stats()))
    _print(
        json.dumps(stats, indent=2)
        if args.json
        else "\n".join(f"{name:12} {value}" for name, value in stats.items())
    )
    return 0


def cache_purge(args: argparse.Namespace) -> int:
    from cache.stores import StoreUnavailable
    from resolver.syntax import parse_lookup

    given, config = configure(args)
    try:
        parse_lookup(args.identifier, dev=config.dev)
    except InvalidInput as err:
        print(f"{args.prog}: {err}", file=sys.stderr)
        return 2
    try:
        purged = _run(_cached(given, config, lambda c: c.purge(args.identifier)))
    except StoreUnavailable as err:
        print(f"{args.prog}: the cache store did not take it: {err}", file=sys.stderr)
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


def _dispatch(argv: list[str]) -> int:
    try:
        routed = route(argv)
        path = routed[:1] + [w for w in routed[1:2] if w in TREE.get(routed[0], ())]
        args, extra = build_parser(path).parse_known_args(routed)
        if extra:  # named by the command that refused them, not by `atwhois`
            raise UsageError(args.prog, f"unrecognized arguments: {' '.join(extra)}")
        module, function = args.handler.split(":")
        handler: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(module), function
        )
        return handler(args)
    except UsageError as err:
        print(f"{err.prog}: error: {err}", file=sys.stderr)
        return 2
    except settings.SettingError as err:
        print(f"atwhois: bad configuration: {err}", file=sys.stderr)
        return 2
