"""The command table: every command's words, handler, help, settings and arguments, and the
tree `main.route` walks. Declarative, and imported at start-up: only the standard library
and the settings table."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import atwhois.settings as settings

EXAMPLES = """examples:
  atwhois alice.example.com
  atwhois lookup @alice.example.com --json
  atwhois did:plc:ewvi7nxzyoun6zhxrhs64oiz --verify-plc
  atwhois at://alice.example.com/app.bsky.feed.post/3k2a
  atwhois https://bsky.app/profile/alice.example.com
  atwhois --file handles.txt --json > reports.jsonl     (or: ... | atwhois -)
  atwhois alice.example.com --server http://127.0.0.1:2584
  atwhois history alice.example.com
  atwhois verify-token "$JWT" --aud did:web:feed.example#bsky_fg --lxm app.bsky.feed.getFeedSkeleton
  atwhois verify-record at://alice.example.com/app.bsky.feed.post/3k2a --cid bafyrei...
  atwhois verify-label labels.json --json
  atwhois oauth alice.example.com
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
        "--short",
        action="store_true",
        help="print only the answer, for scripts: the DID of a verified handle, the verified "
        "handle of a DID, nothing when it does not verify (the exit code says why)",
    )
    parser.add_argument(
        "--document", action="store_true", help="with --json, include the DID document as served"
    )
    parser.add_argument(
        "--no-color", action="store_true", help="no colour on a terminal either (as NO_COLOR=1)"
    )
    parser.add_argument(
        "--refresh",
        action="store_true",
        help="with --cache: resolve every part afresh and update the cache (a failure "
        "leaves the cached answer in place)",
    )


def _verify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("token", help="the token (header.claims.signature); - reads it from stdin")
    parser.add_argument(
        "--aud",
        required=True,
        metavar="DID#SERVICE",
        help="the audience it must name: the receiving service's DID and service",
    )
    parser.add_argument("--lxm", metavar="NSID", help="the method it must be bound to")
    parser.add_argument(
        "--key-id",
        action="append",
        metavar="KEY_ID",
        help="a verification method it may be signed with (repeatable; default atproto)",
    )
    parser.add_argument(
        "--refuse-bare-audience",
        action="store_true",
        help="refuse an aud that is the bare DID (the legacy form PDSes mint today)",
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="with --server: refuse a jti the daemon saw before from the same issuer",
    )
    parser.add_argument("--server", metavar="URL", help="have a running `atwhois serve` verify it")
    _json_flag(parser)


def _record_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("uri", help="the record's at:// URI: at://HANDLE-OR-DID/COLLECTION/RKEY")
    held = parser.add_mutually_exclusive_group()
    held.add_argument("--cid", help="the record's CID you hold: is it the one proven?")
    held.add_argument(
        "--record",
        metavar="FILE",
        help="the record you hold, as JSON or DRISL (- reads standard input): is it the one "
        "proven?",
    )
    parser.add_argument("--server", metavar="URL", help="have a running `atwhois serve` verify it")
    _json_flag(parser)


def _identifier_and_json(
    what: str, name: str = "identifier", *, server: bool = False
) -> Callable[[argparse.ArgumentParser], None]:
    def arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(name, help=what)
        if server:
            parser.add_argument(
                "--server", metavar="URL", help="have a running `atwhois serve` answer"
            )
        _json_flag(parser)

    return arguments


MIRROR_LISTEN = "127.0.0.1:2582"


def _shell_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=["bash"], help="the shell")


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


def _compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("did", nargs="*", help="the did:plc identifiers to compare")
    parser.add_argument(
        "--sample", type=int, metavar="N", help="compare N DIDs of the mirror picked at random"
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="compare every DID of the mirror (paced by --plc-rate: two requests a DID)",
    )
    parser.add_argument(
        "--apply-removals",
        action="store_true",
        help="take out of the mirror the ops its upstream no longer serves, replaying the DID "
        "without them; each is kept among the refused ops as evidence (the mirror stopped)",
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")


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
    "audit_keep_days",
    "audit_lease",
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
        "atwhois.cli.lookup:lookup",
        "who is behind a handle, DID, at:// URI or profile URL, verified both ways",
        [*RESOLUTION, "cache"],
        _lookup_arguments,
    ),
    Command(
        ("verify-token",),
        "atwhois.cli.verify:verify_token",
        "check an inter-service auth token (a JWT a PDS minted for a service) against its "
        "issuer's identity: exit 0 valid, 1 invalid, 2 not a token, 3 issuer unavailable",
        [*RESOLUTION, "cache"],
        _verify_arguments,
    ),
    Command(
        ("verify-record",),
        "atwhois.cli.record:verify_record",
        "verify a record at its PDS: the signed commit, the MST path, the record (exit 0 "
        "verified, 1 invalid, absent or inactive, 2 not a record URI, 3 unavailable)",
        [*RESOLUTION, "cache"],
        _record_arguments,
    ),
    Command(
        ("verify-label",),
        "atwhois.cli.label:verify_label",
        "verify moderation labels under their labelers' #atproto_label keys (exit 0 verified "
        "and in force, 1 invalid, negated or expired, 2 not labels, 3 unavailable)",
        [*RESOLUTION, "cache"],
        _identifier_and_json("labels' JSON: one, a list or lines; - stdin", "file", server=True),
    ),
    Command(
        ("oauth",),
        "atwhois.cli.oauth:oauth",
        "find an account's OAuth authorization server and check it: the PDS's protected "
        "resource metadata, the server's metadata (exit 0 ok, 1 invalid or not verified, 2 "
        "not an account, 3 unavailable)",
        [*RESOLUTION, "cache"],
        _identifier_and_json("the account signing in: a handle or a DID", server=True),
    ),
    Command(
        ("history",),
        "atwhois.cli.plc:history",
        "replay a did:plc's operation log: who signed what, what it changed, whether it "
        "verifies (exit 0 if it does, 1 if not)",
        RESOLUTION,
        _identifier_and_json("a did:plc, or a handle (its DID's log is shown)"),
    ),
    Command(
        ("plc", "verify-export"),
        "atwhois.cli.plc:verify_export",
        "verify a PLC directory export (JSON Lines, legacy or seq format) op by op, in bounded "
        "memory; exit 0 if every op verifies (allow-listed ones aside), 1 if not",
        arguments=_export_arguments,
    ),
    Command(
        ("plc", "mirror"),
        "atwhois.cli.plc:mirror",
        "mirror the PLC directory named by --plc-url, verifying every operation, and serve "
        "its read API (GET /{did}, /log/audit, /export, /export/stream, ...); exit 1 after "
        "--once if the upstream served ops the rules refuse",
        [
            "plc_url",
            "plc_db",
            "max_park",
            "plc_mirror_interval",
            "plc_mirror_workers",
            "plc_mirror_replays",
            "plc_mirror_profile",
            "plc_mirror_stream",
            "plc_mirror_stream_backlog",
            "plc_mirror_stream_timeout",
            "plc_mirror_stream_consumers",
            "max_connections",
            "max_connections_per_client",
            "write_timeout",
            "idle_timeout",
        ],
        _mirror_arguments,
    ),
    Command(
        ("plc", "compare"),
        "atwhois.cli.plc:compare",
        "compare the local PLC mirror with its upstream, DID by DID (/log/audit and the "
        "document): ops removed upstream, refused here, missing, nullified or ordered "
        "otherwise; exit 0 the same, 1 different, 3 some not compared",
        ["plc_url", "plc_db", "plc_rate", "max_park", "contact_url"],
        _compare_arguments,
    ),
    Command(
        ("cache", "stats"), "atwhois.cli.cache:stats", "what the cache holds", ["cache"], _json_flag
    ),
    Command(
        ("cache", "purge"),
        "atwhois.cli.cache:purge",
        "forget one identity (its handle and DID entries); exit 1 if nothing was cached",
        ["dev", "cache"],
        _identifier_and_json("a handle or DID"),
    ),
    Command(
        ("serve",),
        "atwhois.cli.serve:run",
        "the local HTTP service: XRPC com.atproto.identity.*, /v1, audits, /metrics",
        EVERY_SETTING,
        description=SERVE_DESCRIPTION,
    ),
    Command(
        ("completion",),
        "atwhois.cli.completion:completion",
        "a bash completion script for atwhois: source <(atwhois completion bash)",
        [],
        _shell_argument,
    ),
    Command(
        ("config", "show"),
        "atwhois.cli.config:show",
        "every setting, the value in effect and where it came from (flag, variable, file, "
        "default); secrets are shown as set, never printed",
        EVERY_SETTING,
        _json_flag,
    ),
    Command(
        ("watch", "add"),
        "atwhois.cli.audit:watch_add",
        "watch identities",
        AUDIT_STORE,
        _identifiers(True),
    ),
    Command(
        ("watch", "remove"),
        "atwhois.cli.audit:watch_remove",
        "stop watching identities",
        AUDIT_STORE,
        _identifiers(False),
    ),
    Command(
        ("watch", "list"),
        "atwhois.cli.audit:watch_list",
        "the watch-list",
        ["audit_db"],
        _json_flag,
    ),
    Command(
        ("watch", "import"),
        "atwhois.cli.audit:watch_import",
        "watch every identifier of a CSV file (identifier[,label] a line; # comments; - for "
        "standard input); all or none: a bad line is named and nothing is added",
        AUDIT_STORE,
        _import_arguments,
    ),
    Command(
        ("watch", "export"),
        "atwhois.cli.audit:watch_export",
        "the watch-list as CSV (identifier,label), which watch import reads back",
        ["audit_db"],
    ),
    Command(
        ("audit", "run"),
        "atwhois.cli.audit:audit_run",
        "re-verify the watch-list (or the identifiers in FILE, without adding them to it), "
        "store one check each, and report what changed since the last check",
        [*AUDIT_RUN_SETTINGS],
        _audit_run_arguments,
    ),
    Command(
        ("audit", "history"),
        "atwhois.cli.audit:audit_history",
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
