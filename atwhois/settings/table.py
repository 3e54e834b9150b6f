"""Every setting of atwhois, in one table: `Values`, whose fields are the settings, typed,
with their defaults (the only copy: the parts' own defaults, the resolver's among them,
are the same constants, from `foundation.defaults`), their group, range and help. A setting
has one name, spelt the same way everywhere: `--plc-url` on the command line,
`ATWHOIS_PLC_URL` in the environment, `plc_url` in the TOML file. Flags win over variables,
variables over the file, the file over the default (`reading` reads the file and the
variables; the command line adds its flags).

A default shows as its value (`--help`, `config show`, the documentation's table), or as what it
means where there is no value to show (`shown`: no cache for a lookup, the system's
resolvers, a path under the user's data folder)."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any

from atwhois.foundation import defaults
from atwhois.foundation.sql import DATABASE_SCHEMES

RESOLUTION, STORAGE, SERVICE, AUDITS = "resolution", "cache", "service", "audits"
MIRROR = "mirror"
GROUP_TITLES = {
    RESOLUTION: "resolution",
    STORAGE: "cache",
    SERVICE: "service (atwhois serve)",
    AUDITS: "audits",
    MIRROR: "PLC mirror (atwhois plc mirror, serve --plc-mirror)",
}
_TTL = "FRESH:MAX"


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    kind: type  # bool, int, float, str, Path or list (of strings)
    group: str
    help: str
    default: Any
    shown: str | None = None  # what the default means, where its value says nothing
    metavar: str | None = None
    low: float | None = None  # numbers: the smallest allowed value
    high: float | None = None
    secret: bool = False
    choices: tuple[str, ...] = ()  # strings: the only values allowed
    schemes: tuple[str, ...] = ()  # a path, or a URL of one of these (any other: refused)

    @property
    def env(self) -> str:
        return "ATWHOIS_" + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def default_text(self) -> str:
        """The default as `--help` and the reference show it."""
        if self.shown is not None:
            return self.shown
        return _shown(self.default)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _setting(group: str, help: str, default: Any = None, **details: Any) -> Any:
    """A field of `Values`: its default, and the rest of its row as metadata."""
    extra = {"group": group, "help": help, **details}
    if isinstance(default, list):  # a fresh copy for each `Values`
        return dataclasses.field(default_factory=functools.partial(list, default), metadata=extra)
    return dataclasses.field(default=default, metadata=extra)


def _ttl(lifetime: tuple[float, float]) -> str:
    return f"{lifetime[0]:g}:{lifetime[1]:g}"


_STEP_DEADLINES = f"{defaults.DNS_TIMEOUT:g} for DNS, {defaults.HTTPS_TIMEOUT:g} for each fetch"


@dataclass(frozen=True, slots=True, kw_only=True)
class Values:
    """The value of every setting, as given or by default (`configuration.resolve`)."""

    plc_url: str = _setting(RESOLUTION, "PLC directory base URL", defaults.PLC_URL, metavar="URL")
    dns_server: list[str] = _setting(
        RESOLUTION,
        "nameserver to ask: an IP address, or a DNS-over-HTTPS server's https URL "
        "(repeatable; the variable takes a comma-separated list)",
        [],
        shown="the system's resolvers",
        metavar="HOST[:PORT]|URL",
    )
    dns_fallback: list[str] = _setting(
        RESOLUTION,
        "nameserver asked when the others fail, as --dns-server (repeatable)",
        [],
        shown="none",
        metavar="HOST[:PORT]|URL",
    )
    ca_bundle: str | None = _setting(
        RESOLUTION, "PEM file of trusted CAs", shown="the system's", metavar="FILE"
    )
    allow_net: list[str] = _setting(
        RESOLUTION,
        "let fetches reach this private or loopback range (repeatable)",
        [],
        shown="none: private, loopback, link-local, multicast and reserved addresses are refused",
        metavar="CIDR",
    )
    nat64_prefix: list[str] = _setting(
        RESOLUTION,
        "a NAT64 prefix of this network (repeatable): an address in it is judged by the "
        "IPv4 it carries, as RFC 6052 places it (the well-known 64:ff9b::/96 and "
        "64:ff9b:1::/48 always are)",
        [],
        shown="none besides the well-known ones",
        metavar="PREFIX",
    )
    dev: bool = _setting(
        RESOLUTION,
        "development: .test handles, did:web:localhost, plain http for localhost",
        defaults.DEV,
    )
    verify_plc: bool = _setting(
        RESOLUTION,
        "replay the did:plc operation log instead of trusting the directory",
        defaults.VERIFY_PLC,
    )
    check_pds: bool = _setting(
        RESOLUTION,
        "also ask the PDS the document names: does it host the account, is it active, is "
        "its latest commit signed by the document's key (lookups and audits)",
        defaults.CHECK_PDS,
    )
    dnssec: bool = _setting(
        RESOLUTION,
        "validate the DNS answer's DNSSEC chain from the trust anchors: secure, insecure "
        "(proven unsigned), bogus (the DNS method then counts as invalid) or indeterminate",
        defaults.DNSSEC,
    )
    dnssec_anchor: list[str] = _setting(
        RESOLUTION,
        "a trust anchor, as a DS or DNSKEY record (repeatable; the variable takes a "
        "comma-separated list)",
        [],
        shown="the root zone's KSK-2017 and KSK-2024",
        metavar="RECORD",
    )
    dnssec_memory_mb: float = _setting(
        RESOLUTION,
        "memory for the keys and delegations the DNSSEC walk proved and keeps (the least "
        "recently used go first)",
        defaults.DNSSEC_MEMORY_BYTES / defaults.MIB,
        metavar="MIB",
        low=0.0625,
        high=1024 * 1024,
    )
    timeout: float | None = _setting(
        RESOLUTION,
        "deadline of each step: DNS (with --dnssec, the answer and its chain of trust each), "
        "HTTPS well-known, DID document",
        shown=_STEP_DEADLINES,
        metavar="SECONDS",
    )
    plc_rate: float = _setting(
        RESOLUTION,
        "requests per second to the PLC directory, with a second's burst (a 429 or 503 with "
        "Retry-After parks it, for max_park at most: answers meanwhile are unavailable, never "
        "absent)",
        defaults.PLC_RATE,
        metavar="PER_SECOND",
        low=0.1,
        high=1_000_000,
    )
    host_rate: float = _setting(
        RESOLUTION,
        "requests per second to any other host (a handle's web host, a did:web), the same way",
        defaults.HOST_RATE,
        metavar="PER_SECOND",
        low=0.1,
        high=1_000_000,
    )
    fleet_daemons: int = _setting(
        RESOLUTION,
        "daemons sharing one cache store (a fleet) and so the upstreams' allowance: each "
        "keeps to plc_rate/N and host_rate/N, and the pass after a gap re-verifies each "
        "identity once in the fleet",
        1,
        metavar="N",
        low=1,
        high=1024,
    )
    max_park: float = _setting(
        RESOLUTION,
        "the longest pause a host's Retry-After gets (lookups, the PLC mirror, plc compare); "
        "then one request asks whether it is over before the others follow",
        defaults.MAX_PARK,
        metavar="SECONDS",
        low=0.1,
        high=3600,
    )
    service_auth_share: float = _setting(
        RESOLUTION,
        "the share of each host's rate that the resolutions service-auth tokens and labels "
        "cause (their issuers' and labelers', a refresh after a refused signature) may take; "
        "past it they are refused at once (unavailable), the rest left to lookups",
        defaults.SERVICE_AUTH_SHARE,
        metavar="FRACTION",
        low=0.01,
        high=1,
    )
    reverify_share: float = _setting(
        RESOLUTION,
        "share of each host's rate (plc_rate, host_rate) that re-verifying every held "
        "identity after an event stream's gap may take; lookups keep the rest",
        defaults.REVERIFY_SHARE,
        metavar="FRACTION",
        low=0.01,
        high=1,
    )
    contact_url: str | None = _setting(
        RESOLUTION,
        "where the operators of the hosts atwhois asks can reach you: sent in the User-Agent "
        "of lookups, atwhois/VERSION (+URL)",
        shown="none: atwhois/VERSION (+identity resolver)",
        metavar="URL",
    )
    dns_authoritative: bool = _setting(
        RESOLUTION,
        "when a handle is re-checked because something says it changed (refresh, "
        "refreshIdentity, a claim after an event, an audit's re-check), also ask its TXT of "
        "the zone's own nameservers, past the recursive resolver's cache (H-DNS-9)",
        defaults.DNS_AUTHORITATIVE,
    )
    dns_authoritative_port: int = _setting(
        RESOLUTION,
        "the port the zones' nameservers are asked on (test networks)",
        defaults.DNS_AUTHORITATIVE_PORT,
        metavar="PORT",
        low=1,
        high=65535,
    )
    https_port: int | None = _setting(
        RESOLUTION,
        "the port that stands for 443 (test networks)",
        shown="443",
        metavar="PORT",
        low=1,
        high=65535,
    )
    cache: str | None = _setting(
        STORAGE,
        "cache of verified bindings: sqlite:///PATH, memory:, redis://HOST:PORT/DB, "
        "redis-cluster://HOST:PORT[,HOST:PORT…] (rediss://, rediss-cluster://: over TLS)",
        shown="lookup: none; serve: the embedded SQLite file",
        metavar="URL",
    )
    redis_buckets: int = _setting(
        STORAGE,
        "hashes a new Redis cache keeps its entries in (one already made keeps its own): "
        "about the entries to hold over 60 (2 per identity), at most 120 each",
        defaults.REDIS_BUCKETS,
        metavar="N",
        low=1,
        high=2**31,
    )
    host: str = _setting(SERVICE, "address to bind", defaults.HOST, metavar="ADDRESS")
    port: int = _setting(
        SERVICE, "port to bind (0: any)", defaults.PORT, metavar="PORT", low=0, high=65535
    )
    refresh_token: str | None = _setting(
        SERVICE,
        "bearer token that allows refreshIdentity",
        shown="none: refreshIdentity refused",
        metavar="TOKEN",
        secret=True,
    )
    memory_cache_mb: float = _setting(
        SERVICE,
        "memory for cached entries and answers in the process",
        defaults.MEMORY_CACHE_MB,
        metavar="MIB",
        low=1,
        high=1024 * 1024,
    )
    max_concurrency: int = _setting(
        SERVICE, "requests served at once", defaults.MAX_CONCURRENCY, metavar="N", low=1
    )
    max_connections: int = _setting(
        SERVICE,
        "open connections per process (serve and plc mirror): at the bound a new one takes "
        "the place of the one stuck longest (its client takes nothing of its answer), else of "
        "the oldest idle one, or is closed at once; never past the open-file limit",
        defaults.MAX_CONNECTIONS,
        metavar="N",
        low=1,
    )
    max_connections_per_client: int | None = _setting(
        SERVICE,
        "open connections one client address may hold (past it, its new one takes the place "
        "of its own stuck longest, else its oldest idle one, or is closed); behind a proxy, "
        "raise it",
        shown="a quarter of max_connections",
        metavar="N",
        low=1,
    )
    write_timeout: float = _setting(
        SERVICE,
        "seconds an answer (or a stream's message) may wait for a client that takes none of "
        "it before the connection is closed (one that reads, however slowly, is not closed)",
        defaults.WRITE_TIMEOUT,
        metavar="SECONDS",
        low=0.1,
        high=3600,
    )
    idle_timeout: float = _setting(
        SERVICE,
        "seconds a connection may wait for a request's head, from its start or its last "
        "answer, before it is closed",
        defaults.IDLE_TIMEOUT,
        metavar="SECONDS",
        low=0.1,
        high=3600,
    )
    workers: int = _setting(
        SERVICE,
        "processes serving the port (SO_REUSEPORT), sharing the cache store",
        defaults.WORKERS,
        metavar="N",
        low=1,
        high=64,
    )
    reverify_workers: int | None = _setting(
        SERVICE,
        "processes that do the daemon's re-verifications and background refreshes (what "
        "streams, a gap's pass and stale answers cause), off the process that answers; "
        "0: in it (and always with plc_mirror)",
        shown="one per core when there are several",
        metavar="N",
        low=0,
        high=64,
    )
    max_resolutions: int = _setting(
        SERVICE,
        "upstream resolutions at once; more lookups of uncached identities wait",
        defaults.MAX_RESOLUTIONS,
        metavar="N",
        low=1,
    )
    max_claims: int = _setting(
        SERVICE,
        "identities re-verified at once after change events (#identity, the mirror's "
        "operations), each waiting for its change to show; past it, an event is counted "
        "and not followed",
        defaults.MAX_CLAIMS,
        metavar="N",
        low=1,
    )
    request_timeout: float = _setting(
        SERVICE,
        "deadline of one request",
        defaults.REQUEST_TIMEOUT,
        metavar="SECONDS",
        low=0.001,
        high=3600,
    )
    request_log: bool = _setting(SERVICE, "a JSON line per request on stderr", defaults.REQUEST_LOG)
    firehose: list[str] = _setting(
        SERVICE,
        "follow this relay's or PDS's event stream and re-verify identities as they change "
        "(ws:// or wss:// base URL; repeatable)",
        [],
        shown="none",
        metavar="URL",
    )
    jetstream: list[str] = _setting(
        SERVICE,
        "follow this Jetstream (the event stream as JSON) as --firehose follows a relay "
        "(ws:// or wss:// base URL; repeatable)",
        [],
        shown="none",
        metavar="URL",
    )
    service_auth_audience: str | None = _setting(
        SERVICE,
        "the audience inter-service auth tokens must name for POST /v1/verify/service-auth "
        "(the receiver's DID#service): fixed for every request",
        shown="none: each request names it",
        metavar="DID#SERVICE",
    )
    service_auth_key_id: list[str] = _setting(
        SERVICE,
        "a verification method such tokens may be signed with (repeatable)",
        ["atproto"],
        metavar="KEY_ID",
    )
    service_auth_bare_audience: str = _setting(
        SERVICE,
        "a token whose aud is the bare DID, for an audience with a #service: the legacy "
        "form every PDS mints today",
        "allow",
        metavar="MODE",
        choices=("allow", "refuse"),
    )
    service_auth_nonces: int = _setting(
        SERVICE,
        "nonces (jti) the replay check of one process holds at once, each until its token "
        "expires; past that a replay cannot be ruled out and the check answers unavailable",
        defaults.SERVICE_AUTH_NONCES,
        metavar="N",
        low=1,
        high=100_000_000,
    )
    service_auth_issuer_nonces: int = _setting(
        SERVICE,
        "of those, the nonces one issuer may hold (a did:plc, or a did:web's registrable "
        "domain with its subdomains), counted in the shared store: past that its tokens' "
        "replay cannot be ruled out (unavailable), and no other issuer's is affected",
        defaults.SERVICE_AUTH_ISSUER_NONCES,
        metavar="N",
        low=1,
        high=100_000_000,
    )
    service_auth_replay_lifetime: int = _setting(
        SERVICE,
        "the longest lifetime (exp - iat) of a token checked for replay: a longer one is "
        "refused (SA-JTI-3); it bounds how long a nonce is kept",
        defaults.TOKEN_LIFETIME,
        metavar="SECONDS",
        low=1,
        high=defaults.TOKEN_LIFETIME,
    )
    cors_origin: list[str] = _setting(
        SERVICE,
        "a browser origin that may read the XRPC and /v1 endpoints (repeatable; * for any)",
        [],
        shown="none: CORS off",
        metavar="ORIGIN",
    )
    ttl_verified: str = _setting(
        SERVICE,
        "seconds fresh and at most, verified",
        _ttl(defaults.TTL_VERIFIED),
        metavar=_TTL,
    )
    ttl_unverified: str = _setting(
        SERVICE, "the same, not verified", _ttl(defaults.TTL_UNVERIFIED), metavar=_TTL
    )
    ttl_absent: str = _setting(
        SERVICE, "the same, confirmed absent", _ttl(defaults.TTL_ABSENT), metavar=_TTL
    )
    audit_db: str | None = _setting(
        AUDITS,
        "the watch-list and the audit history: a SQLite file, or postgresql://... for audits "
        "on several hosts",
        shown="~/.local/share/atwhois/audit.db",
        metavar="PATH|URL",
        schemes=DATABASE_SCHEMES,
    )
    audit_keep_days: float = _setting(
        AUDITS,
        "days findings, runs and checks that changed nothing are kept (changes and each "
        "identity's last check: always; findings: until delivered); 0: forever",
        defaults.AUDIT_KEEP_DAYS,
        metavar="DAYS",
        low=0,
    )
    audit_lease: float = _setting(
        AUDITS,
        "seconds a process's claim on identities of a shared run lasts unless renewed: how "
        "soon another takes over from one that died",
        defaults.AUDIT_LEASE,
        metavar="SECONDS",
        low=1,
    )
    webhook: str | None = _setting(
        AUDITS, "POST each audit run's findings here", shown="none", metavar="URL"
    )
    webhook_secret: str | None = _setting(
        AUDITS,
        "sign webhook bodies: X-Atwhois-Signature: sha256=HMAC-SHA256(secret, body)",
        shown="none: unsigned",
        metavar="SECRET",
        secret=True,
    )
    webhook_format: str = _setting(
        AUDITS,
        "json (structured) or slack (a Slack incoming-webhook message)",
        defaults.WEBHOOK_FORMAT,
        metavar="FORMAT",
        choices=("json", "slack"),
    )
    unreachable_after: int = _setting(
        AUDITS,
        "transient failures in a row before an 'unreachable' finding",
        defaults.UNREACHABLE_AFTER,
        metavar="N",
        low=1,
    )
    audit_interval: float | None = _setting(
        AUDITS,
        "serve: re-verify the watch-list this often",
        shown="only on request",
        metavar="SECONDS",
        low=0.01,
    )
    plc_mirror: bool = _setting(
        MIRROR,
        "serve: mirror the PLC directory (--plc-url is the upstream), verify every operation, "
        "serve its read API (GET /{did}, /export, ...) and resolve did:plc from the mirror",
        False,
    )
    plc_db: str | None = _setting(
        MIRROR,
        "where the mirror keeps the directory: a SQLite file, or postgresql://...",
        shown="~/.local/share/atwhois/plc-mirror.db",
        metavar="PATH|URL",
        schemes=DATABASE_SCHEMES,
    )
    plc_mirror_interval: float = _setting(
        MIRROR,
        "seconds between polls of the upstream's /export once caught up",
        defaults.PLC_MIRROR_INTERVAL,
        metavar="SECONDS",
        low=0.01,
        high=86400,
    )
    plc_mirror_workers: int | None = _setting(
        MIRROR,
        "processes that verify operations (0: in the main process)",
        shown="one per core when there are several",
        metavar="N",
        low=0,
        high=256,
    )
    plc_mirror_replays: int = _setting(
        MIRROR,
        "DIDs whose replay each verifying process keeps in memory (about 3.4 KiB each); "
        "another DID's is rebuilt from its stored operations",
        defaults.PLC_MIRROR_REPLAYS,
        metavar="N",
        low=1,
    )
    plc_mirror_stream: str = _setting(
        MIRROR,
        "once caught up, follow the upstream's /export/stream (a WebSocket: new operations at "
        "once) when it has one, else poll /export; or always poll",
        "auto",
        metavar="MODE",
        choices=("auto", "off"),
    )
    plc_mirror_stream_backlog: int = _setting(
        MIRROR,
        "how far back a consumer of this mirror's /export/stream may start, in operations "
        "(further: OutdatedCursor, page /export first)",
        defaults.PLC_STREAM_BACKLOG,
        metavar="OPS",
        low=0,
    )
    plc_mirror_stream_timeout: float = _setting(
        MIRROR,
        "seconds a consumer of /export/stream may take to read one message before it is "
        "closed (ConsumerTooSlow)",
        defaults.PLC_STREAM_TIMEOUT,
        metavar="SECONDS",
        low=0.01,
        high=3600,
    )
    plc_mirror_stream_consumers: int = _setting(
        MIRROR,
        "consumers of /export/stream at once; past it, a new one is answered 503",
        defaults.PLC_STREAM_CONSUMERS,
        metavar="N",
        low=1,
    )
    plc_mirror_profile: str = _setting(
        MIRROR,
        "answer as plc.directory does (Multikey documents, 410 for a tombstone) or as the "
        "TypeScript reference server (legacy key types, 404)",
        defaults.PLC_MIRROR_PROFILE,
        metavar="PROFILE",
        choices=("directory", "reference"),
    )


def _kind(hint: Any) -> type:
    """What a setting's values are, from its field's type (`str | None` is a str)."""
    if isinstance(hint, types.UnionType):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return typing.get_origin(hint) or hint  # type: ignore[no-any-return]


def _table() -> dict[str, Setting]:
    hints = typing.get_type_hints(Values)
    table = {}
    for field in dataclasses.fields(Values):
        factory = field.default_factory
        default = field.default if factory is dataclasses.MISSING else factory()
        table[field.name] = Setting(
            field.name, _kind(hints[field.name]), default=default, **field.metadata
        )
    return table


SETTINGS: dict[str, Setting] = _table()


def names_in(*groups: str) -> list[str]:
    return [s.name for s in SETTINGS.values() if s.group in groups]
