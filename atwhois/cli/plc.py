"""`atwhois history` and the `plc` commands: a did:plc's log replayed, a directory export
verified, and a verifying mirror of the directory (`plc mirror`: it backfills from the
stored cursor with progress on the terminal, then serves the directory's read API on
--listen and keeps following, or with --once stops when caught up; `--report` prints what
the upstream served that the rules refuse)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from atwhois.foundation.pool import default_workers
from atwhois.mirror import Follower, MirrorApi, MirrorState, Replica, Upstream, report
from atwhois.mirror.api import json_errors
from atwhois.mirror.backends import default_mirror_path, open_mirror_store
from atwhois.mirror.compare import CompareOutcome, Comparer, DidComparison
from atwhois.mirror.store import SqlMirrorStore
from atwhois.mirror.upstream_stream import UpstreamStream
from atwhois.resolver.errors import InvalidInput, UpstreamFailure
from atwhois.resolver.fetch import shared_pace
from atwhois.resolver.syntax import check_plc_did
from atwhois.server.lifecycle import runner_settings, serve_until_stopped
from atwhois.server.metrics import CONTENT_TYPE, Exposition
from atwhois.server.routes import MIRROR, add_routes
from atwhois.settings import Values

from . import configuration
from .running import configure, say, with_resolver

if TYPE_CHECKING:
    from atwhois.resolver import Resolver
    from atwhois.resolver.plc.export import ExportSummary
    from atwhois.resolver.syntax import Query


def history(args: argparse.Namespace) -> int:
    """The operation log of a did:plc, given as such or through a handle (or any identifier
    a lookup takes): the lookup says which DID the log belongs to and how far the binding
    was verified."""
    from atwhois.resolver.syntax import parse_lookup

    config = configure(args).config
    try:
        query = parse_lookup(args.identifier.strip(), dev=config.dev)
    except InvalidInput as err:
        print(f"{args.prog}: {err}", file=sys.stderr)
        return 2
    if query.kind == "did" and not query.value.startswith("did:plc:"):
        print(f"{args.prog}: {query.value}: only a did:plc has an operation log", file=sys.stderr)
        return 2
    return int(with_resolver(config, lambda r: _history(r, query, args)))


async def _history(resolver: Resolver, query: Query, args: argparse.Namespace) -> int:
    from atwhois.resolver.errors import ResolutionError

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
        say(json.dumps(report, indent=2))
    else:
        if found is not None:
            say(f"{identifier} -> {did} [{found.status}]")
        say(render_history(audit))
    return 0 if audit.valid else 1


def _known_bad(paths: list[str]) -> frozenset[str]:
    items: set[str] = set()
    for path in paths:
        items.update(str(x) for x in json.loads(Path(path).read_text()))
    return frozenset(items)


def verify_export(args: argparse.Namespace) -> int:
    from atwhois.resolver.plc.export import verify_export

    from .export_workers import freezing, verify_export_in_workers

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
        say(json.dumps(summary.to_json(), indent=2))
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
        say("\n".join(lines))
    return 0 if summary.valid else 1


def mirror_store_from(values: Values) -> SqlMirrorStore:
    return open_mirror_store(values.plc_db or default_mirror_path())


def mirror_follower_from(
    values: Values, store: SqlMirrorStore, *, progress: Any = None
) -> Follower:
    """The follower the settings describe (`stop()` it: it may have worker processes)."""
    workers = values.plc_mirror_workers
    workers = default_workers() if workers is None else workers
    stream = UpstreamStream(values.plc_url) if values.plc_mirror_stream == "auto" else None
    return Follower(
        Replica(
            store,
            workers=workers if store.writable else 0,
            max_replays=values.plc_mirror_replays,
        ),
        Upstream(values.plc_url, pace=shared_pace(configuration.config_of(values))),
        interval=values.plc_mirror_interval,
        progress=progress,
        stream=stream,
    )


def mirror_api_from(values: Values, store: SqlMirrorStore, follower: Follower) -> MirrorApi:
    """The read API (and /export/stream) the settings describe, over the follower's state."""
    return MirrorApi(
        store,
        follower.state,
        profile=values.plc_mirror_profile,
        waits=follower.waits,
        stream_backlog=values.plc_mirror_stream_backlog,
        stream_timeout=values.plc_mirror_stream_timeout,
        stream_consumers=values.plc_mirror_stream_consumers,
    )


class Progress:
    """One line on stderr every couple of seconds while backfilling: rate, DIDs, cursor."""

    def __init__(self, every: float = 2.0) -> None:
        self._every = every
        self._last = self._started = time.monotonic()

    def __call__(self, state: MirrorState) -> None:
        now = time.monotonic()
        if now - self._last < self._every:
            return
        self._last = now
        rate = state.ops / max(now - self._started, 1e-9)
        refused = sum(state.rejected.values())
        print(
            f"  {state.ops:,} ops verified ({rate:,.0f} ops/s), {state.dids:,} new DIDs, "
            f"cursor {state.cursor_time}, {refused:,} refused",
            file=sys.stderr,
            flush=True,
        )


def mirror(args: argparse.Namespace) -> int:
    values = configure(args).values
    try:
        store = mirror_store_from(values)
    except (OSError, ValueError) as err:
        print(f"{args.prog}: cannot open the mirror's database: {err}", file=sys.stderr)
        return 2
    if args.report:
        state = MirrorState.of(values.plc_url, store)
        _print_report(report(store, state, 1000), args.json)
        store.close()
        return 0
    if args.once and not store.writable:
        print(f"{args.prog}: another mirror process is writing {store.location}", file=sys.stderr)
        store.close()
        return 2
    follower = mirror_follower_from(values, store, progress=Progress())
    try:
        if args.once:
            started = time.monotonic()
            try:
                state = follower.catch_up()
            except UpstreamFailure as err:  # what was verified is kept; the rest is not
                print(f"{args.prog}: {err}", file=sys.stderr)
                return 1
            seconds = time.monotonic() - started
            summary = {
                **state.to_json(),
                "seconds": round(seconds, 3),
                "ops_per_s": round(state.ops / max(seconds, 1e-9), 1),
                "store": {"backend": store.name, **store.counts()},
            }
            if args.json:
                print(json.dumps(summary, indent=2))
            else:
                print(
                    f"mirror caught up: {state.ops:,} ops verified in {seconds:.1f} s "
                    f"({summary['ops_per_s']:,.0f} ops/s); {summary['store']['dids']:,} DIDs; "
                    f"{sum(state.rejected.values()):,} refused; cursor {state.cursor_time}"
                )
            return 1 if state.rejected else 0
        return _serve(args, values, store, follower)
    finally:
        follower.stop()
        store.close()


def compare(args: argparse.Namespace) -> int:
    """P-CMP-1: the mirror against its upstream for the DIDs asked, a sample or all; exit 0
    when every DID compared is the same, 1 when one differs (after --apply-removals: still
    differs), 3 when none differs but some could not be compared, 2 on a usage error."""
    values = configure(args).values
    if bool(args.did) + (args.sample is not None) + args.all != 1:
        print(f"{args.prog}: name DIDs, or --sample N, or --all (one of them)", file=sys.stderr)
        return 2
    for did in args.did:
        try:
            check_plc_did(did)
        except InvalidInput as err:
            print(f"{args.prog}: {err}", file=sys.stderr)
            return 2
    try:
        store = mirror_store_from(values)
    except (OSError, ValueError) as err:
        print(f"{args.prog}: cannot open the mirror's database: {err}", file=sys.stderr)
        return 2
    upstream = Upstream(values.plc_url, pace=shared_pace(configuration.config_of(values)))
    try:
        if args.apply_removals and not store.writable:
            print(
                f"{args.prog}: another process writes {store.location}: stop the mirror "
                "before --apply-removals (its verifiers hold the DIDs' replays)",
                file=sys.stderr,
            )
            return 2
        comparer = Comparer(store, upstream)
        dids = args.did or (
            comparer.sample(args.sample) if args.sample is not None else comparer.every_did()
        )
        outcome = CompareOutcome()
        for did in dids:
            comparison = comparer.compare(did)
            if args.apply_removals and comparison.removed:
                comparer.apply_removals(comparison)
                outcome.applied.append((did, comparison.removed))
                comparison = comparer.compare(did)
            outcome.add(comparison)
            if not args.json and not comparison.same:
                print(_compared_rows(comparison), flush=True)
            if outcome.upstream_gone:
                break
        if args.json:
            print(json.dumps(outcome.to_json(), indent=2))
        else:
            say(outcome.summary())
        return outcome.exit_code()
    finally:
        upstream.close()
        store.close()


def _compared_rows(comparison: DidComparison) -> str:
    if comparison.unavailable is not None:
        return f"{comparison.did}  not compared  {comparison.unavailable}"
    return "\n".join(
        f"{comparison.did}  {d.kind:<9}  {d.cid or '-'}  {d.detail}"
        + (f" [{d.rule}]" if d.rule else "")
        for d in comparison.differences
    )


def _print_report(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(data, indent=2))
        return
    counts = data["store"]
    print(
        f"mirror of {data['mirror']['upstream']}: {counts['ops']:,} ops, {counts['dids']:,} "
        f"DIDs ({counts['tombstoned']:,} tombstoned); {counts['rejected']:,} ops refused, "
        f"{counts['flagged']:,} DIDs flagged"
    )
    for item in data["rejected"]:
        print(f"  refused {item['did']} {item['cid']}: {item['message']} [{item['rule']}]")
    for item in data["flagged"]:
        print(f"  flagged {item['did']}: {item['reason']}")
    for item in data["bad_lines"]:
        print(f"  bad line seen {item['seen_at']}: {item['reason']}: {item['entry'][:120]!r}")


def _serve(
    args: argparse.Namespace, values: Values, store: SqlMirrorStore, follower: Follower
) -> int:
    host, _, port = args.listen.rpartition(":")
    api = mirror_api_from(values, store, follower)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per poll says nothing

    async def main() -> None:
        app = web.Application(middlewares=[json_errors])
        add_routes(app, api, MIRROR)
        app.on_cleanup.append(lambda _: api.aclose())
        app.router.add_get("/_health", lambda _: _health(follower.state))
        exposition = Exposition()  # the process's own figures beside the mirror's

        async def metrics(_: web.Request) -> web.Response:
            body = exposition.render(follower.state.metrics())
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, **runner_settings(values.idle_timeout))
        await runner.setup()
        await serve_until_stopped(
            runner,
            host or "127.0.0.1",
            int(port or 0),
            log=logging.getLogger("atwhois.mirror"),
            started=follower.start,
            max_connections=values.max_connections,
            per_client=values.max_connections_per_client,
            write_timeout=values.write_timeout,
            listening=lambda: {
                "upstream": follower.upstream.url,
                "store": store.name,
                "role": follower.state.role,
            },
        )

    try:
        asyncio.run(main())
    except (OSError, ValueError) as err:
        print(f"{args.prog}: {err}", file=sys.stderr)
        return 2
    return 0


async def _health(state: MirrorState) -> web.Response:
    """`ok` while the follower makes progress; else `problem` says why."""
    return web.json_response({"ok": state.problem() is None, **state.to_json()})
