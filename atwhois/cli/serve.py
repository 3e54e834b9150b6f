"""`atwhois serve`, the local HTTP service.

Settings (`atwhois.settings`) come from flags, then `ATWHOIS_*` environment variables, then the
TOML file (`--config`), then defaults. It binds 127.0.0.1 unless told otherwise, caches in the
embedded SQLite file unless given `--cache`, and stops gracefully on SIGTERM: no new
connections, in-flight requests finish, stores are closed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import uvloop
from aiohttp import web

from atwhois.audit import Auditor, AuditStore, default_audit_path
from atwhois.auth import LabelVerifier, RecordVerifier, ServiceAuthVerifier
from atwhois.cache import CachedResolver, Lifetime, Policy
from atwhois.cache.revalidate import Revalidator
from atwhois.cache.stores import Tier, TieredStore
from atwhois.cache.sweep import Sweep
from atwhois.cache.workers import Elsewhere
from atwhois.foundation.defaults import MIB
from atwhois.foundation.pace import share_buckets
from atwhois.foundation.pool import default_workers
from atwhois.foundation.version import announce_contact
from atwhois.mirror import Follower as MirrorFollower
from atwhois.mirror import MirrorApi, MirrorFetcher
from atwhois.resolver import Config, Resolver
from atwhois.resolver.fetch import shared_pace
from atwhois.server import hooks
from atwhois.server.audits_api import AuditApi
from atwhois.server.audits_pages import AuditPages
from atwhois.server.connections import ConnectionLimit
from atwhois.server.labels import ROUTES as LABELS
from atwhois.server.labels import LabelsApi
from atwhois.server.lifecycle import runner_settings, serve_until_stopped
from atwhois.server.memory import TLS_READ_BUFFER, trim_periodically
from atwhois.server.metrics import pace_families
from atwhois.server.oauth import ROUTES as OAUTH
from atwhois.server.oauth import OAuthApi
from atwhois.server.operations import parked_upstreams
from atwhois.server.records import ROUTES as RECORDS
from atwhois.server.records import RecordsApi
from atwhois.server.request_log import MalformedRequestLog
from atwhois.server.routes import MIRROR, SERVICE_AUTH
from atwhois.server.service import Service, Settings
from atwhois.server.service_auth import Receiver, ServiceAuthApi
from atwhois.server.web import WebPages
from atwhois.settings import SettingError, Values
from atwhois.stream.follower import Follower

from . import configuration
from .audit import webhook_from
from .config import effective_settings
from .plc import mirror_api_from, mirror_follower_from, mirror_store_from
from .running import cache_store, configure


def _lifetime(name: str, text: str) -> Lifetime:
    fresh, _, most = text.partition(":")
    try:
        lifetime = Lifetime(float(fresh), float(most or fresh))
    except ValueError:
        lifetime = Lifetime(-1, -1)
    if not 0 <= lifetime.fresh <= lifetime.max_age < float("inf"):
        raise SettingError(f"{name} must be FRESH:MAX seconds, 0 <= FRESH <= MAX, not {text!r}")
    return lifetime


def _policy(values: Values) -> Policy:
    return Policy(
        verified=_lifetime("ttl_verified", values.ttl_verified),
        unverified=_lifetime("ttl_unverified", values.ttl_unverified),
        absent=_lifetime("ttl_absent", values.ttl_absent),
    )


@dataclass(frozen=True, slots=True)
class Daemon:
    """The daemon, made and not yet listening: its app (which starts and stops what it
    holds with its own start-up and clean-up), the service answering, its cache store."""

    app: web.Application
    service: Service
    store: Tier


def build_daemon(
    values: Values,
    config: Config | None = None,
    policy: Policy | None = None,
    *,
    resolvers: Callable[[Config], Resolver] | None = None,
) -> Daemon:
    """The daemon's app in process, from its settings (`config` and `policy`: made from
    them when not given), for a runner of one's own or a test client (aiohttp's
    `TestClient`: no socket, no subprocess). `resolvers` makes each resolver it uses (the
    lookups', the audits'), from its configuration: `atwhois.testing.World.resolver`, say;
    by default a `Resolver`."""
    if config is None:  # the settings given (None: a setting left to its default)
        config = configuration.config_of(values)
    policy = policy or _policy(values)
    announce_contact(values.contact_url)
    # The memory budget: half for rendered answers (what a hit is served from), half for
    # the entries' tier (what a new answer is composed from).
    budget = int(values.memory_cache_mb * MIB)
    service_settings = Settings(
        refresh_token=values.refresh_token,
        max_concurrency=values.max_concurrency,
        request_timeout=values.request_timeout,
        request_log=values.request_log,
        answer_cache_bytes=budget // 2,
        cors_origins=tuple(values.cors_origin),
    )
    # Hits are served from rendered answers: the tier keeps few entries decoded (a new
    # answer decodes its entries once), and many more entries in its share.
    store = cache_store(values, memory_bytes=budget - budget // 2, decoded_share=1 / 16)
    plc_mirror = _plc_mirror(values) if values.plc_mirror else None
    # Re-verifications in worker processes, which resolve as a plain `Resolver` does (not
    # through a mirror in this process, nor a test's resolvers); their requests take turns
    # from this process's pace, shared before any pace is made.
    reverify_workers = 0
    if resolvers is None and plc_mirror is None:
        reverify_workers = (
            default_workers() if values.reverify_workers is None else values.reverify_workers
        )
    if reverify_workers:
        share_buckets()

    def resolver(config: Config) -> Resolver:
        """did:plc from the mirror in this process when there is one, else the directory."""
        if resolvers is not None:
            return resolvers(config)
        return Resolver(config, plc=MirrorFetcher(plc_mirror[0]) if plc_mirror else None)

    cached = CachedResolver(resolver(config), store, policy, max_resolutions=values.max_resolutions)
    service = Service(cached, service_settings)
    elsewhere = None
    if reverify_workers:
        elsewhere = cached.elsewhere = Elsewhere(config, reverify_workers)
        service.health_sources["reverify_workers"] = elsewhere.health
    service.metric_sources.append(cached.histories.metrics)
    service.metric_sources.append(pace_families(shared_pace(config)))
    service.health_problems.append(parked_upstreams(shared_pace(config)))
    hooks.small_tls_buffers(TLS_READ_BUFFER)
    if moved := hooks.missing():  # an aiohttp newer than the bound: say what no longer holds
        logging.getLogger("atwhois.serve").warning(
            json.dumps({"event": "hooks_missing", "hooks": moved})
        )
    app = service.app()
    trim_periodically(app)
    if elsewhere is not None:
        app.on_startup.append(lambda _: elsewhere.start())
        app.on_cleanup.append(lambda _: elsewhere.stop())  # after what re-verifies stopped
    # Audits resolve afresh, replaying did:plc logs (rotation keys), politely, through the
    # same store: their results refresh the answers the daemon serves.
    audit_config = dataclasses.replace(config, verify_plc=True, per_host_limit=8)
    webhook = webhook_from(values)
    audit_path = values.audit_db or default_audit_path()
    # what the event streams say about accounts, audits hear too
    audit_cached = CachedResolver(resolver(audit_config), store, policy, accounts=cached.accounts)
    auditor = Auditor(
        audit_cached,
        AuditStore(audit_path),
        unreachable_after=values.unreachable_after,
        webhook=webhook,
        keep_days=values.audit_keep_days,
        lease=values.audit_lease,
    )
    audits = AuditApi(service, auditor, values.audit_interval)
    audits.attach(app)
    # What a source says changed (an event stream's #identity, an operation the PLC mirror
    # here applied) is re-verified in the background; the audits hear of it.
    revalidator = Revalidator(cached, watchers=[audits.recheck], max_pending=values.max_claims)
    service.metric_sources.append(revalidator.metrics)
    if values.firehose or values.jetstream:
        follower = Follower(
            cached,
            values.firehose,
            jetstreams=values.jetstream,
            watched=auditor.store.is_watched,
            revalidator=revalidator,
            processes=True,  # a relay's frames are read and decoded off the serving loop
        )
        report_streams(service, follower)
        app.on_startup.append(lambda _: follower.start())
        app.on_shutdown.append(lambda _: follower.stop())  # before the stores close
        sweep = follower.sweep
    else:
        sweep = _sweep_alone(app, service, revalidator)
    if isinstance(store, TieredStore):  # a cluster's failover may lose writes: re-verified
        store.gaps.append(sweep.gap)
    if plc_mirror is not None:
        _serve_plc_mirror(app, service, *plc_mirror, revalidator)
    app.on_shutdown.append(lambda _: revalidator.stop())  # once no source tells it more
    receiver = Receiver(
        values.service_auth_audience,
        tuple(values.service_auth_key_id),
        bare_audience=values.service_auth_bare_audience == "allow",
    )
    # The nonces seen go where other daemons see them (the store below the memory tier,
    # apart from its entries); with a cache in memory only, in this process (verdicts say so).
    verifier = ServiceAuthVerifier(
        cached,
        nonces=store.nonces(),
        max_nonces=values.service_auth_nonces,
        issuer_nonces=values.service_auth_issuer_nonces,
        replay_lifetime=values.service_auth_replay_lifetime,
    )
    service.add_routes(app, ServiceAuthApi(service, verifier, receiver), SERVICE_AUTH)
    records = RecordVerifier(cached)  # one for every request: R-REC-8's refreshes shared
    service.add_routes(app, RecordsApi(service, records), RECORDS)
    labels = LabelVerifier(cached)  # the labelers' documents the cache keeps (L-KEY-3)
    service.add_routes(app, LabelsApi(service, labels), LABELS)
    service.add_routes(app, OAuthApi(service), OAUTH)
    service.metric_sources += [verifier.metrics, records.metrics, labels.metrics]
    WebPages(service).attach(app)
    AuditPages(service, auditor.store).attach(app)
    return Daemon(app, service, store)


async def serve(
    values: Values,
    config: Config,
    policy: Policy,
    shown: list[dict[str, Any]],
    *,
    reuse_port: bool = False,
) -> None:
    daemon = build_daemon(values, config, policy)
    service, store = daemon.service, daemon.store
    runner = await service.runner(
        daemon.app, **runner_settings(values.idle_timeout), shutdown_timeout=30
    )
    await serve_until_stopped(
        runner,
        values.host,
        values.port,
        log=logging.getLogger("atwhois.serve"),
        # What start-up made lives as long as the daemon: the collector need not walk it
        # again (a full collection over it costs about 10 ms, a pause every request waits out).
        started=gc.freeze,
        bounded=lambda limit: _report_connections(service, limit),
        listening=lambda: {
            "store": store.name,
            "pid": os.getpid(),
            # what it resolves through and keeps where, so a log shows a misconfiguration
            # at once: what `config show` prints (the token only as set)
            "settings": {row["setting"]: [row["value"], row["from"]] for row in shown},
        },
        reuse_port=reuse_port,
        max_connections=values.max_connections,
        per_client=values.max_connections_per_client,
        write_timeout=values.write_timeout,
    )


def report_streams(service: Service, follower: Follower) -> None:
    """What `/_health` and `/metrics` say of the streams followed: each stream's state, the
    pass re-verifying what is held after a gap, and why a stream is a fault."""
    service.health_sources["streams"] = follower.health
    service.health_sources["gap_pass"] = follower.sweep.health
    service.health_problems.append(follower.problems)
    service.metric_sources.append(follower.metrics)


def _sweep_alone(app: web.Application, service: Service, revalidator: Revalidator) -> Sweep:
    """The pass re-verifying every identity held when no event stream has one: after the
    store below lost writes (a Redis Cluster's failover), in `/_health` and `/metrics`."""
    sweep = Sweep(revalidator)
    service.health_sources["gap_pass"] = sweep.health
    service.metric_sources.append(sweep.metrics)
    app.on_shutdown.append(lambda _: sweep.stop())
    return sweep


def _report_connections(service: Service, limit: ConnectionLimit) -> None:
    service.health_sources["connections"] = limit.health
    service.metric_sources.append(limit.metrics)


def _plc_mirror(values: Values) -> tuple[MirrorApi, MirrorFollower]:
    store = mirror_store_from(values)
    follower = mirror_follower_from(values, store)
    return mirror_api_from(values, store, follower), follower


def _serve_plc_mirror(
    app: web.Application,
    service: Service,
    api: MirrorApi,
    follower: MirrorFollower,
    revalidator: Revalidator,
) -> None:
    """The PLC read API beside XRPC, the follower on a thread of its own, its state in
    /_health and /metrics; each DID whose state it changes while following is re-verified
    in the cache (no event stream needed for did:plc changes); on shutdown the follower
    stops telling, and stops before its store closes."""
    service.add_routes(app, api, MIRROR)
    app.on_cleanup.append(lambda _: api.aclose())
    service.health_sources["plc_mirror"] = api.state.to_json
    service.health_problems.append(lambda: [p] if (p := api.state.problem()) else [])
    service.metric_sources.append(api.state.metrics)

    async def start(_: web.Application) -> None:
        loop = asyncio.get_running_loop()

        def applied(dids: list[str]) -> None:  # on the follower's thread
            loop.call_soon_threadsafe(revalidator.changed_many, dids)

        follower.on_applied = applied
        follower.start()

    async def detach(_: web.Application) -> None:
        follower.on_applied = None

    async def stop(_: web.Application) -> None:
        await asyncio.to_thread(follower.stop)
        api.store.close()

    app.on_startup.append(start)
    app.on_shutdown.append(detach)
    app.on_cleanup.append(stop)


def run(args: argparse.Namespace) -> int:
    resolved = configure(args)
    values, config = resolved.values, resolved.config
    policy = _policy(values)  # a bad ttl is a configuration error, before anything starts
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    logging.getLogger("aiohttp.server").addFilter(MalformedRequestLog())
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the mirror's polls: metrics say
    shown = effective_settings(resolved)
    workers = values.workers
    if workers == 1:
        return _serve_here(values, config, policy, shown, args.prog)
    # What must happen once, or be seen by every worker, lives in one process only.
    alone = [f"--{name.replace('_', '-')}" for name in _ONE_PROCESS if getattr(values, name)]
    if (values.cache or "").startswith("memory:"):
        alone.append("--cache memory: (a store per process: a purge would reach one worker)")
    if alone:
        print(
            f"{args.prog}: --workers {workers} cannot be used with {', '.join(alone)}: "
            "use --workers 1",
            file=sys.stderr,
        )
        return 2
    share_buckets()  # made before the fork: every serving process keeps to one pace
    return _serve_workers(workers, values, config, policy, shown, args.prog)


# Settings whose work runs in one process: event streams and scheduled audits would run once
# per worker, and a stream's account statuses would reach only the worker following it.
_ONE_PROCESS = ("firehose", "jetstream", "plc_mirror", "audit_interval")


def _serve_here(
    values: Values,
    config: Config,
    policy: Policy,
    shown: list[dict[str, Any]],
    prog: str,
    *,
    reuse_port: bool = False,
) -> int:
    try:
        # uvloop: about 10-20% more cached answers a second than asyncio's loop (bench serve)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve(values, config, policy, shown, reuse_port=reuse_port))
    except (OSError, ValueError) as err:  # a cache URL of no known kind, a port taken
        print(f"{prog}: bad configuration: {err}", file=sys.stderr)
        return 2
    return 0


def _serve_workers(
    count: int,
    values: Values,
    config: Config,
    policy: Policy,
    shown: list[dict[str, Any]],
    prog: str,
) -> int:
    """`count` forked workers, each with its own socket on one port (SO_REUSEPORT: the
    kernel spreads connections over them) and its own connection to the shared store. This
    process only holds the port, passes SIGTERM/SIGINT on and waits; when a worker dies
    unasked, it stops the others and exits with its code, or 1 (a supervisor restarts the
    whole)."""
    host = values.host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    holder = socket.socket(family, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        holder.bind((host, values.port))
    except OSError as err:
        print(f"{prog}: bad configuration: {err}", file=sys.stderr)
        return 2
    # port 0: the one chosen, for all
    values = dataclasses.replace(values, port=holder.getsockname()[1])
    children: set[int] = set()
    # A signal while forking waits until this process can pass it on to every worker.
    stops = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            holder.close()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
            code = 1
            try:
                code = _serve_here(values, config, policy, shown, prog, reuse_port=True)
            except BaseException:
                traceback.print_exc()  # os._exit would leave the cause unsaid
            finally:
                sys.stderr.flush()
                os._exit(code)
        children.add(pid)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
    code = 0
    while children:
        pid, status = os.waitpid(-1, 0)
        children.discard(pid)
        exit_code = os.waitstatus_to_exitcode(status)
        if exit_code != 0 or not stopping:
            # the first worker's own code (2: its configuration was refused), else 1
            code = code or (exit_code if exit_code > 0 else 1)
            if not stopping:
                logging.getLogger("atwhois.serve").error(
                    json.dumps({"event": "worker exited", "pid": pid, "status": status})
                )
                stop()
    holder.close()
    return code
