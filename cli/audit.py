"""`atwhois watch add|remove|list` and `atwhois audit [FILE] | audit history ID`."""

from __future__ import annotations

import argparse
import asyncio
import csv
import dataclasses
import io
import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from audit import Auditor, AuditStore, Check, RunReport, Watched, default_audit_path
from audit.webhook import Webhook
from cache import CachedResolver, open_store
from resolver import Config, Resolver
from resolver.errors import InvalidInput
from resolver.syntax import parse_lookup

FORMATS = ("text", "json", "csv", "markdown")
ConfigFrom = Callable[[argparse.Namespace], Config | None]
Progress = Callable[[int, int], None]


def _store_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--audit-db",
        type=Path,
        metavar="PATH",
        help="the watch-list and audit history (env ATWHOIS_AUDIT_DB; default "
        "~/.local/share/atwhois/audit.db)",
    )


def _open(args: argparse.Namespace) -> AuditStore:
    path = args.audit_db or os.environ.get("ATWHOIS_AUDIT_DB") or default_audit_path()
    return AuditStore(Path(path))


def _normalize(identifier: str, config: Config) -> str:
    return parse_lookup(identifier.strip(), dev=config.dev).value


def watch(argv: list[str], config_flags: argparse.ArgumentParser, configure: ConfigFrom) -> int:
    parser = argparse.ArgumentParser(
        prog="atwhois watch",
        parents=[config_flags],
        description="Edit the watch-list that audits re-verify.",
    )
    parser.add_argument("action", choices=["add", "remove", "list"])
    parser.add_argument("identifiers", nargs="*")
    parser.add_argument("--label", help="with add: a note kept beside the identifier")
    parser.add_argument("--json", action="store_true")
    _store_flag(parser)
    args = parser.parse_args(argv)
    config = configure(args)
    if config is None:
        return 2
    store = _open(args)
    try:
        if args.action == "list":
            watched = store.watch_list()
            if args.json:
                print(json.dumps([dataclasses.asdict(w) for w in watched], indent=2))
            else:
                for w in watched:
                    print(f"{w.identifier}\t{w.label or ''}")
            return 0
        if not args.identifiers:
            parser.error(f"{args.action} needs at least one handle or DID")
        try:
            names = [_normalize(i, config) for i in args.identifiers]
        except InvalidInput as err:
            print(f"atwhois watch: {err}", file=sys.stderr)
            return 2
        for name in names:
            if args.action == "add":
                new = store.watch_add(name, args.label)
                print(f"{'added' if new else 'updated'} {name}")
            else:
                print(f"{'removed' if store.watch_remove(name) else 'not watched:'} {name}")
        return 0
    finally:
        store.close()


def audit(argv: list[str], config_flags: argparse.ArgumentParser, configure: ConfigFrom) -> int:
    if argv[:1] == ["history"]:
        return _history(argv[1:], config_flags, configure)
    parser = argparse.ArgumentParser(
        prog="atwhois audit",
        parents=[config_flags],
        description="Re-verify the watch-list (or the identifiers in FILE, without adding "
        "them to it), store one check each, and report what changed since the last check. "
        "`atwhois audit history ID` shows one identity's checks over time.",
    )
    parser.add_argument("file", nargs="?", type=Path, help="identifiers, one a line")
    parser.add_argument("--format", choices=FORMATS, default="text")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--per-host", type=int, default=8, help="requests at once to one upstream host (politeness)"
    )
    parser.add_argument(
        "--unreachable-after",
        type=int,
        default=3,
        metavar="N",
        help="transient failures in a row before an 'unreachable' finding",
    )
    parser.add_argument("--webhook", metavar="URL", help="POST each finding here as JSON")
    parser.add_argument("--cache", metavar="URL", help="the cache the fresh results update")
    _store_flag(parser)
    args = parser.parse_args(argv)
    config = configure(args)
    if config is None:
        return 2
    config = dataclasses.replace(config, verify_plc=True, per_host_limit=args.per_host)
    targets = None
    if args.file is not None:
        try:
            lines = [ln.strip() for ln in args.file.read_text().splitlines()]
            targets = [
                Watched(_normalize(ln, config)) for ln in lines if ln and not ln.startswith("#")
            ]
        except (OSError, InvalidInput) as err:
            print(f"atwhois audit: {err}", file=sys.stderr)
            return 2
    store = _open(args)
    try:
        report = asyncio.run(_run(config, store, targets, args))
        print(render_report(report, store, args.format), end="")
    finally:
        store.close()
    return 0


async def _run(
    config: Config, store: AuditStore, targets: list[Watched] | None, args: argparse.Namespace
) -> RunReport:
    webhook = Webhook(args.webhook) if args.webhook else None
    cached = CachedResolver(
        Resolver(config), open_store(args.cache or os.environ.get("ATWHOIS_CACHE"))
    )
    auditor = Auditor(
        cached,
        store,
        concurrency=args.concurrency,
        unreachable_after=args.unreachable_after,
        webhook=webhook,
    )
    try:
        return await auditor.run(
            targets,
            source=str(args.file or "watch-list"),
            progress=_progress_bar() if sys.stderr.isatty() else None,
        )
    finally:
        await cached.aclose()
        if webhook is not None:
            await webhook.aclose()


def _progress_bar() -> Progress:
    def show(done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        end = "\n" if done == total else ""
        print(
            f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total}",
            end=end,
            file=sys.stderr,
            flush=True,
        )

    return show


_COLUMNS = ("identifier", "status", "did", "handle", "method", "pds", "ms", "findings")


def _rows(report: RunReport, store: AuditStore) -> list[dict[str, str]]:
    found: dict[str, list[str]] = {}
    for finding in store.run_findings(report.run_id):
        found.setdefault(finding.identifier, []).append(f"{finding.kind}: {finding.detail}")
    return [
        {
            "identifier": c.identifier,
            "status": c.status,
            "did": c.did or "",
            "handle": c.handle,
            "method": c.method,
            "pds": c.pds or "",
            "ms": f"{c.duration_ms:.0f}",
            "findings": "; ".join(found.get(c.identifier, [])),
        }
        for c in store.run_checks(report.run_id)
    ]


def render_report(report: RunReport, store: AuditStore, fmt: str) -> str:
    if fmt == "json":
        checks = [c.to_json() for c in store.run_checks(report.run_id)]
        findings = [f.to_json() for f in store.run_findings(report.run_id)]
        return (
            json.dumps({**report.to_json(), "checks": checks, "new_findings": findings}, indent=2)
            + "\n"
        )
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(_rows(report, store))
        return out.getvalue()
    if fmt == "markdown":
        lines = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
        for row in _rows(report, store):
            cells = (row[c].replace("|", "\\|") for c in _COLUMNS)
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"
    lines = [f"audit run {report.run_id}: {report.total} identities in {report.seconds:.1f}s"]
    lines += [f"  {status:<18} {n}" for status, n in report.by_status.most_common()]
    new = store.run_findings(report.run_id)
    lines.append(f"new findings: {len(new)}")
    lines += [f"  {f.identifier:<28} {f.kind:<22} {f.detail}" for f in new]
    return "\n".join(lines) + "\n"


def _history(argv: list[str], config_flags: argparse.ArgumentParser, configure: ConfigFrom) -> int:
    parser = argparse.ArgumentParser(prog="atwhois audit history", parents=[config_flags])
    parser.add_argument("identifier")
    parser.add_argument("--json", action="store_true")
    _store_flag(parser)
    args = parser.parse_args(argv)
    config = configure(args)
    if config is None:
        return 2
    try:
        name = _normalize(args.identifier, config)
    except InvalidInput as err:
        print(f"atwhois audit history: {err}", file=sys.stderr)
        return 2
    store = _open(args)
    try:
        checks = store.history(name)
    finally:
        store.close()
    if args.json:
        print(json.dumps([c.to_json() for c in checks], indent=2))
    else:
        print(f"{name}: {len(checks)} checks")
        for check in checks:
            print(_history_line(check))
    return 0 if checks else 1


def _history_line(check: Check) -> str:
    when = datetime.fromtimestamp(check.checked_at, UTC).isoformat(timespec="seconds")
    return (
        f"  {when}  {check.status:<17} {check.did or '-':<34} {check.handle:<22} "
        f"{check.method:<5} {check.duration_ms:.0f} ms"
    )
