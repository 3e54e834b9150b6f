"""`atwhois watch add|remove|list` and `atwhois audit [FILE] | audit history ID`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import dataclasses
import io
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import uvloop

from atwhois.audit import (
    Auditor,
    AuditStore,
    Check,
    RunReport,
    Severity,
    Watched,
    default_audit_path,
)
from atwhois.audit.processes import CheckerPool, open_cache, split
from atwhois.audit.report import Report
from atwhois.audit.store import LabelTooLong, check_label
from atwhois.audit.webhook import Webhook
from atwhois.cache import CachedResolver
from atwhois.foundation import iso_time
from atwhois.resolver import Config, Resolver
from atwhois.resolver.errors import InvalidInput
from atwhois.resolver.syntax import parse_lookup
from atwhois.settings import Values

from .lookup import numbered_lines
from .running import configure

Progress = Callable[[int, int], None]


def _open(values: Values) -> AuditStore:
    return AuditStore(values.audit_db or default_audit_path())


def _normalize(identifiers: list[str], config: Config, prog: str) -> list[str] | None:
    try:
        return [parse_lookup(i.strip(), dev=config.dev).value for i in identifiers]
    except InvalidInput as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return None


def _edit_watch_list(args: argparse.Namespace, edit: Callable[[AuditStore, str], str]) -> int:
    """Each identifier normalized first (one bad one changes nothing), then edited."""
    resolved = configure(args)
    values, config = resolved.values, resolved.config
    names = _normalize(args.identifiers, config, args.prog)
    if names is None:
        return 2
    store = _open(values)
    try:
        for name in names:
            print(f"{edit(store, name)} {name}")
    finally:
        store.close()
    return 0


def watch_add(args: argparse.Namespace) -> int:
    try:
        check_label(args.label)
    except LabelTooLong as err:
        print(f"{args.prog}: {err}", file=sys.stderr)
        return 2
    return _edit_watch_list(
        args, lambda store, name: "added" if store.watch_add(name, args.label) else "updated"
    )


def watch_remove(args: argparse.Namespace) -> int:
    return _edit_watch_list(
        args, lambda store, name: "removed" if store.watch_remove(name) else "not watched:"
    )


def _watch_list(args: argparse.Namespace) -> list[Watched]:
    store = _open(configure(args).values)
    try:
        return store.watch_list()
    finally:
        store.close()


def watch_list(args: argparse.Namespace) -> int:
    watched = _watch_list(args)
    if args.json:
        print(json.dumps([w.to_json() for w in watched], indent=2))
    else:
        for w in watched:
            print(f"{w.identifier}\t{w.label or ''}")
    return 0


def watch_import(args: argparse.Namespace) -> int:
    resolved = configure(args)
    values, config = resolved.values, resolved.config
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except (OSError, UnicodeDecodeError) as err:
        print(f"{args.prog}: cannot read {args.file}: {err}", file=sys.stderr)
        return 2
    entries, bad = [], []
    for number, fields in enumerate(csv.reader(io.StringIO(text)), 1):
        if not fields or not fields[0].strip() or fields[0].lstrip().startswith("#"):
            continue
        if fields[0].strip() == "identifier" and number == 1:  # watch export's header
            continue
        label = fields[1].strip() if len(fields) > 1 and fields[1].strip() else None
        try:
            check_label(label)
        except LabelTooLong as err:
            bad.append(f"line {number}: {err}")
        try:
            entries.append((parse_lookup(fields[0].strip(), dev=config.dev).value, label))
        except InvalidInput as err:
            bad.append(f"line {number}: {err}")
        if len(fields) > 2:
            bad.append(f"line {number}: {len(fields)} columns; identifier[,label] expected")
    if bad:
        print(f"{args.prog}: nothing imported:", *bad, sep="\n  ", file=sys.stderr)
        return 2
    store = _open(values)
    try:
        new = store.watch_import(entries)
    finally:
        store.close()
    print(f"imported {len(entries)} identifiers: {new} new, {len(entries) - new} already watched")
    return 0


def watch_export(args: argparse.Namespace) -> int:
    watched = _watch_list(args)
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["identifier", "label"])
    writer.writerows([w.identifier, w.label or ""] for w in watched)
    return 0


def audit_run(args: argparse.Namespace) -> int:
    """Exit 0: nothing at the `--fail-on` level or worse; 1: something is; 3: the run could
    not complete (it failed, or its webhook delivery is still owed)."""
    resolved = configure(args)
    values, config = resolved.values, resolved.config
    if args.workers < 1 or args.per_host < args.workers:
        print(
            f"{args.prog}: --workers must be at least 1 and at most --per-host "
            f"({args.per_host}): the workers share the per-host limit out",
            file=sys.stderr,
        )
        return 2
    per_host = split(args.per_host, args.workers)
    config = dataclasses.replace(config, verify_plc=True, per_host_limit=per_host)
    targets = None
    if args.file is not None:
        try:
            text = args.file.read_text()
        except OSError as err:
            print(f"{args.prog}: {err}", file=sys.stderr)
            return 2
        names, bad = [], []
        for number, line in numbered_lines(text):
            try:
                names.append(parse_lookup(line, dev=config.dev).value)
            except InvalidInput as err:
                bad.append(f"{args.file}:{number}: {err}")
        if bad:
            print(f"{args.prog}: nothing audited:", *bad, sep="\n  ", file=sys.stderr)
            return 2
        targets = [Watched(name) for name in names]
    store = _open(values)
    if targets is None and not store.watch_list():
        store.close()
        print(
            f"{args.prog}: the watch-list is empty: add identities with `atwhois watch add "
            "HANDLE` or `atwhois watch import FILE`, or audit a file: `atwhois audit FILE`",
            file=sys.stderr,
        )
        return 0
    try:
        try:
            # uvloop: the same rate as asyncio's loop here, 15 MiB less at 2,000 identities
            # (its TLS transport's buffers are smaller)
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                run = runner.run(_run(config, values, store, targets, args))
        except Exception as err:  # the run is stored as failed; say why, exit 3
            print(f"{args.prog}: the run could not complete: {err!r}", file=sys.stderr)
            return 3
        report = Report.of(run, store)
        report.write(sys.stdout, args.format)
    finally:
        store.close()
    if run.status != "finished" or run.delivered is False:
        return 3
    return 1 if report.worst().rank >= FAIL_ON[args.fail_on].rank else 0


FAIL_ON = {"critical": Severity.CRITICAL, "warning": Severity.WARNING, "any": Severity.INFO}


async def _run(
    config: Config,
    values: Values,
    store: AuditStore,
    targets: list[Watched] | None,
    args: argparse.Namespace,
) -> RunReport:
    webhook = webhook_from(values)
    cached = CachedResolver(Resolver(config), open_cache(values.cache))
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(cached.aclose)
        if webhook is not None:
            stack.push_async_callback(webhook.aclose)
        pool = None
        if args.workers > 1:
            pool = CheckerPool(args.workers, config, values.cache, args.concurrency)
            await stack.enter_async_context(pool)
        auditor = Auditor(
            cached,
            store,
            concurrency=args.concurrency,
            unreachable_after=values.unreachable_after,
            webhook=webhook,
            check=pool.check if pool else None,
            keep_days=values.audit_keep_days,
            lease=values.audit_lease,
        )
        return await auditor.run(
            targets,
            source=str(args.file or "watch-list"),
            progress=progress_line() if sys.stderr.isatty() else None,
        )


def webhook_from(values: Values) -> Webhook | None:
    """The webhook the settings name (`webhook`, `webhook_secret`, `webhook_format`)."""
    if not values.webhook:
        return None
    return Webhook(values.webhook, secret=values.webhook_secret, format=values.webhook_format)


def progress_line(clock: Callable[[], float] = time.monotonic) -> Progress:
    """done/total, the rate and what is left, redrawn in place on a terminal's stderr."""
    started = clock()

    def show(done: int, total: int) -> None:
        rate = done / max(clock() - started, 1e-9)
        left = (total - done) / rate if rate else 0.0
        end = "\n" if done == total else ""
        print(
            f"\r\x1b[K  {done}/{total}  {rate:.1f}/s  ETA {left:.0f} s",
            end=end,
            file=sys.stderr,
            flush=True,
        )

    return show


def audit_history(args: argparse.Namespace) -> int:
    resolved = configure(args)
    values, config = resolved.values, resolved.config
    names = _normalize([args.identifier], config, args.prog)
    if names is None:
        return 2
    store = _open(values)
    try:
        checks = store.history(names[0])
    finally:
        store.close()
    if args.json:
        print(json.dumps([c.to_json() for c in checks], indent=2))
    else:
        kept = "1 check" if len(checks) == 1 else f"{len(checks)} checks"
        print(f"{names[0]}: {kept} kept (each change, and the last)")
        for check in checks:
            print(_history_line(check))
    return 0 if checks else 1


def _history_line(check: Check) -> str:
    when = iso_time(check.checked_at)
    return (
        f"  {when}  {check.status:<17} {check.did or '-':<34} {check.handle:<22} "
        f"{check.method:<5} {check.duration_ms:.0f} ms"
    )
