"""`atwhois watch add|remove|list` and `atwhois audit [FILE] | audit history ID`."""

from __future__ import annotations

import argparse
import asyncio
import csv
import dataclasses
import io
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from audit import Auditor, AuditStore, Check, RunReport, Watched, default_audit_path
from audit.webhook import Webhook
from cache import CachedResolver, open_store
from resolver import Config, Resolver
from resolver.errors import InvalidInput
from resolver.syntax import parse_lookup

from .main import configure

Progress = Callable[[int, int], None]


def _open(given: dict[str, Any]) -> AuditStore:
    return AuditStore(Path(given.get("audit_db") or default_audit_path()))


def _normalize(identifiers: list[str], config: Config, prog: str) -> list[str] | None:
    try:
        return [parse_lookup(i.strip(), dev=config.dev).value for i in identifiers]
    except InvalidInput as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return None


def _edit_watch_list(args: argparse.Namespace, edit: Callable[[AuditStore, str], str]) -> int:
    """Each identifier normalized first (one bad one changes nothing), then edited."""
    given, config = configure(args)
    names = _normalize(args.identifiers, config, args.prog)
    if names is None:
        return 2
    store = _open(given)
    try:
        for name in names:
            print(f"{edit(store, name)} {name}")
    finally:
        store.close()
    return 0


def watch_add(args: argparse.Namespace) -> int:
    return _edit_watch_list(
        args, lambda store, name: "added" if store.watch_add(name, args.label) else "updated"
    )


def watch_remove(args: argparse.Namespace) -> int:
    return _edit_watch_list(
        args, lambda store, name: "removed" if store.watch_remove(name) else "not watched:"
    )


def watch_list(args: argparse.Namespace) -> int:
    given, _ = configure(args)
    store = _open(given)
    try:
        watched = store.watch_list()
    finally:
        store.close()
    if args.json:
        print(json.dumps([dataclasses.asdict(w) for w in watched], indent=2))
    else:
        for w in watched:
            print(f"{w.identifier}\t{w.label or ''}")
    return 0


def audit_run(args: argparse.Namespace) -> int:
    given, config = configure(args)
    config = dataclasses.replace(config, verify_plc=True, per_host_limit=args.per_host)
    targets = None
    if args.file is not None:
        try:
            lines = [ln.strip() for ln in args.file.read_text().splitlines()]
        except OSError as err:
            print(f"{args.prog}: {err}", file=sys.stderr)
            return 2
        names = _normalize([ln for ln in lines if ln and not ln.startswith("#")], config, args.prog)
        if names is None:
            return 2
        targets = [Watched(name) for name in names]
    store = _open(given)
    try:
        report = asyncio.run(_run(config, given, store, targets, args))
        print(render_report(report, store, args.format), end="")
    finally:
        store.close()
    return 0


async def _run(
    config: Config,
    given: dict[str, Any],
    store: AuditStore,
    targets: list[Watched] | None,
    args: argparse.Namespace,
) -> RunReport:
    webhook = Webhook(given["webhook"]) if given.get("webhook") else None
    cached = CachedResolver(Resolver(config), open_store(given.get("cache")))
    auditor = Auditor(
        cached,
        store,
        concurrency=args.concurrency,
        unreachable_after=given.get("unreachable_after", 3),
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


def audit_history(args: argparse.Namespace) -> int:
    given, config = configure(args)
    names = _normalize([args.identifier], config, args.prog)
    if names is None:
        return 2
    store = _open(given)
    try:
        checks = store.history(names[0])
    finally:
        store.close()
    if args.json:
        print(json.dumps([c.to_json() for c in checks], indent=2))
    else:
        print(f"{names[0]}: {len(checks)} checks")
        for check in checks:
            print(_history_line(check))
    return 0 if checks else 1


def _history_line(check: Check) -> str:
    when = datetime.fromtimestamp(check.checked_at, UTC).isoformat(timespec="seconds")
    return (
        f"  {when}  {check.status:<17} {check.did or '-':<34} {check.handle:<22} "
        f"{check.method:<5} {check.duration_ms:.0f} ms"
    )
