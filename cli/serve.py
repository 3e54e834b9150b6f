"""`atwhois serve`: the local HTTP cache service.

Settings come from flags, then `ATWHOIS_*` environment variables, then an optional TOML file
(`--config`), then defaults. It binds 127.0.0.1 unless told otherwise, caches in the embedded
SQLite file unless given `--cache` or `--redis`, and stops gracefully on SIGTERM: no new
connections, in-flight requests finish, stores are closed.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import signal
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from audit import Auditor, AuditStore, default_audit_path
from audit.api import AuditApi
from audit.webhook import Webhook
from cache import CachedResolver, Lifetime, Policy, open_store
from resolver import Config, Resolver
from resolver.config import parse_nameservers, parse_networks
from resolver.errors import InvalidInput
from server.memory import small_tls_buffers, trim_periodically
from server.service import MalformedRequestLog, Service, Settings

from . import settings

DEFAULT_PORT = 2584


def parser(config_flags: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="atwhois serve",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[config_flags],
    )
    group = p.add_argument_group("service")
    group.add_argument("--config", type=Path, help="TOML file with any of these settings")
    group.add_argument("--host", help="address to bind (default 127.0.0.1)")
    group.add_argument("--port", type=int, help=f"port (default {DEFAULT_PORT}; 0 = any)")
    group.add_argument("--cache", metavar="URL", help="sqlite:///PATH (default), memory:, redis://")
    group.add_argument("--redis", metavar="URL", help="share the cache through this Redis")
    group.add_argument("--refresh-token", help="bearer token that allows refreshIdentity")
    group.add_argument(
        "--memory-cache-mb",
        type=float,
        metavar="MIB",
        help="memory for cached entries and answers in this process (default 64)",
    )
    group.add_argument("--max-concurrency", type=int)
    group.add_argument(
        "--max-resolutions",
        type=int,
        help="upstream resolutions at once; more lookups of uncached identities wait (32)",
    )
    group.add_argument("--request-timeout", type=float, metavar="SECONDS")
    group.add_argument(
        "--no-request-log",
        dest="request_log",
        action="store_false",
        default=None,
        help="no JSON line per request on stderr",
    )
    for kind in ("verified", "unverified", "absent"):
        group.add_argument(
            f"--ttl-{kind}",
            metavar="FRESH:MAX",
            help=f"seconds fresh and at most, for {kind} answers",
        )
    audits = p.add_argument_group("audits")
    audits.add_argument(
        "--audit-interval",
        type=float,
        metavar="SECONDS",
        help="re-verify the watch-list this often (default: only on request)",
    )
    audits.add_argument(
        "--audit-db",
        type=Path,
        metavar="PATH",
        help="watch-list and audit history (env ATWHOIS_AUDIT_DB)",
    )
    audits.add_argument("--webhook", metavar="URL", help="POST each audit finding here")
    audits.add_argument(
        "--unreachable-after",
        type=int,
        metavar="N",
        help="transient failures in a row before 'unreachable' (default 3)",
    )
    return p


def _lifetime(text: str) -> Lifetime:
    fresh, _, most = str(text).partition(":")
    lifetime = Lifetime(float(fresh), float(most or fresh))
    if not 0 <= lifetime.fresh <= lifetime.max_age:
        raise ValueError(f"ttl {text!r}: need 0 <= FRESH <= MAX")
    return lifetime


def _policy(merged: dict[str, Any]) -> Policy:
    default = Policy()

    def pick(kind: str, fallback: Lifetime) -> Lifetime:
        text = merged.get(f"ttl_{kind}")
        return _lifetime(text) if text else fallback

    return Policy(
        verified=pick("verified", default.verified),
        unverified=pick("unverified", default.unverified),
        absent=pick("absent", default.absent),
    )


def settings_from(args: argparse.Namespace) -> dict[str, Any]:
    """Flags, then environment, then the TOML file; every value checked (`cli.settings`)."""
    return {name: value for name, (value, _) in settings_with_origins(args).items()}


def settings_with_origins(args: argparse.Namespace) -> dict[str, tuple[Any, str]]:
    """Each given setting's value and where it came from (a flag, a variable, the file)."""
    given: dict[str, tuple[Any, str]] = {}
    if args.config:
        from_file = settings.from_file(tomllib.loads(args.config.read_text()))
        given.update((name, (value, str(args.config))) for name, value in from_file.items())
    for name, value in settings.from_environment().items():
        given[name] = (value, f"${settings.SETTINGS[name].env}")
    for name, value in vars(args).items():
        if value is not None and name not in ("config", "json"):
            given[name] = (settings.check(name, value), "flag")
    return given


_SECRETS = {"refresh_token"}
# The resolution settings as the resolver holds them, for `config show`.
_RESOLUTION: dict[str, Callable[[Config], Any]] = {
    "plc_url": lambda c: c.plc_url,
    "dev": lambda c: c.dev,
    "verify_plc": lambda c: c.verify_plc,
    "ca_bundle": lambda c: c.ca_bundle,
    "https_port": lambda c: c.https_port,
    "dns_server": lambda c: [f"{n.host}:{n.port}" for n in c.dns_servers] or "the system's",
    "dns_fallback": lambda c: [f"{n.host}:{n.port}" for n in c.dns_fallback_servers],
    "allow_net": lambda c: [str(net) for net in c.allow_nets],
    "timeout": lambda c: [c.dns_timeout, c.https_timeout, c.document_timeout],
}


def config_show(args: argparse.Namespace, config: Config) -> int:
    """`atwhois config show`: every setting, its effective value and where it came from;
    the resolution settings as the resolver will use them (environment variables such as
    ATWHOIS_PLC_URL included). Secrets are shown as set or not, never printed."""
    try:
        given = settings_with_origins(args)
        config = resolver_config({k: v for k, (v, _) in given.items()}, config)
    except (OSError, ValueError, InvalidInput) as err:
        print(f"atwhois config: bad configuration: {err}", file=sys.stderr)
        return 2
    rows = []
    for name in settings.SETTINGS:
        value, origin = given.get(name, (None, "default"))
        if name in _RESOLUTION:
            value = _RESOLUTION[name](config)
            if origin == "default" and value != _RESOLUTION[name](Config()):
                origin = "environment (ATWHOIS_*)"
        if name in _SECRETS and value is not None:
            value = "(set)"
        rows.append({"setting": name, "value": value, "from": origin})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        shown = "(built-in default)" if row["value"] is None else json.dumps(row["value"])
        print(f"{row['setting']:18} {shown:42} {row['from']}")
    return 0


def resolver_config(merged: dict[str, Any], from_flags: Config) -> Config:
    """TOML resolution settings fill what flags and environment left at their defaults."""
    defaults = Config()
    given: dict[str, Any] = {
        k: merged[k]
        for k in ("plc_url", "ca_bundle", "dev", "verify_plc", "https_port")
        if k in merged
    }
    if "dns_server" in merged:
        given["dns_servers"] = parse_nameservers(merged["dns_server"])
    if "dns_fallback" in merged:
        given["dns_fallback_servers"] = parse_nameservers(merged["dns_fallback"])
    if "allow_net" in merged:
        given["allow_nets"] = parse_networks(merged["allow_net"])
    if "timeout" in merged:
        for k in ("dns_timeout", "https_timeout", "document_timeout"):
            given[k] = merged["timeout"]
    values = {k: v for k, v in given.items() if getattr(from_flags, k) == getattr(defaults, k)}
    return dataclasses.replace(from_flags, **values)


async def serve(merged: dict[str, Any], config: Config) -> None:
    policy = _policy(merged)
    limits = {
        k: type(getattr(Settings(), k))(merged[k])
        for k in ("max_concurrency", "request_timeout")
        if merged.get(k)
    }
    # The memory budget: an eighth for rendered answers, the rest for the entries' tier.
    budget = int(float(merged.get("memory_cache_mb") or 64) * 1024 * 1024)
    service_settings = dataclasses.replace(
        Settings(
            refresh_token=merged.get("refresh_token"),
            request_log=merged.get("request_log", True),
            answer_cache_bytes=budget // 8,
        ),
        **limits,
    )
    store = open_store(
        merged.get("redis") or merged.get("cache"), memory_bytes=budget - budget // 8
    )
    resolutions = int(merged.get("max_resolutions") or 32)
    cached = CachedResolver(Resolver(config), store, policy, max_resolutions=resolutions)
    service = Service(cached, service_settings)
    small_tls_buffers()
    app = service.app()
    trim_periodically(app)
    # Audits resolve afresh, replaying did:plc logs (rotation keys), politely, through the
    # same store: their results refresh the answers the daemon serves.
    audit_config = dataclasses.replace(config, verify_plc=True, per_host_limit=8)
    webhook = Webhook(merged["webhook"]) if merged.get("webhook") else None
    audit_path = Path(merged.get("audit_db") or default_audit_path())
    auditor = Auditor(
        CachedResolver(Resolver(audit_config), store, policy),
        AuditStore(audit_path),
        unreachable_after=int(merged.get("unreachable_after") or 3),
        webhook=webhook,
    )
    interval = float(merged["audit_interval"]) if merged.get("audit_interval") else None
    AuditApi(service, auditor, interval).attach(app)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=30)
    await runner.setup()
    host, port = merged.get("host", "127.0.0.1"), int(merged.get("port", DEFAULT_PORT))
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    logging.getLogger("atwhois.serve").info(
        json.dumps(
            {
                "event": "listening",
                "url": f"http://{bound[0]}:{bound[1]}",
                "store": store.name,
                "memory_cache_mb": round(budget / 1024 / 1024, 1),
                "plc_url": config.plc_url,
                # what the daemon resolves through, so a log shows a misconfiguration at once
                "dns_servers": [f"{n.host}:{n.port}" for n in config.dns_servers] or "system",
                "allow_nets": [str(net) for net in config.allow_nets],
                "dev": config.dev,
                "verify_plc": config.verify_plc,
                "audit_db": str(audit_path),
                "refresh": "enabled" if merged.get("refresh_token") else "disabled",
                "pid": os.getpid(),
            }
        )
    )
    await stop.wait()
    logging.getLogger("atwhois.serve").info(json.dumps({"event": "stopping"}))
    await runner.cleanup()  # stops listening, lets in-flight requests finish, closes stores


def run(args: argparse.Namespace, config: Config) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    logging.getLogger("aiohttp.server").addFilter(MalformedRequestLog())
    try:
        merged = settings_from(args)
        config = resolver_config(merged, config)
        asyncio.run(serve(merged, config))
    except (OSError, ValueError, InvalidInput) as err:  # TOMLDecodeError is a ValueError
        print(f"atwhois serve: bad configuration: {err}", file=sys.stderr)
        return 2
    return 0
