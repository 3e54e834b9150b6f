"""The one copy of each default that a setting and a part share: the part's own default
(the resolver's `Config`, `CachedResolver`'s resolutions at once, the policy's lifetimes,
the daemon's limits) and the setting's (`atwhois.settings`, shown by `--help` and `config
show`) both read it here, so that they cannot drift apart. The reasons for each value are
with the part that uses it."""

from __future__ import annotations

MIB = 1024 * 1024

# The resolver (`resolver.config.Config`)
PLC_URL = "https://plc.directory"
DEV = False
VERIFY_PLC = False
CHECK_PDS = False
DNSSEC = False
# what the DNSSEC walk keeps of the keys and delegations it proved, in all (S-SEC-11): a
# zone's keys are about 1 KiB, so some 16,000 zones
DNSSEC_MEMORY_BYTES = 16 * MIB
DNS_TIMEOUT = 3.0
HTTPS_TIMEOUT = 5.0  # handle well-known, whole fetch including redirects
DOCUMENT_TIMEOUT = 5.0  # DID document, whole fetch
DNS_AUTHORITATIVE = True
DNS_AUTHORITATIVE_PORT = 53
PLC_RATE = 300.0  # requests per second to the PLC directory
HOST_RATE = 20.0  # to any other host
MAX_PARK = 300.0  # seconds a host's Retry-After parks it at most
SERVICE_AUTH_SHARE = 0.1  # of each host's rate, for what service-auth tokens and labels cause
REVERIFY_SHARE = 0.25  # of each host's rate, for re-verifying after a stream's gap

# The daemon (`server`, `atwhois serve`)
HOST = "127.0.0.1"
PORT = 2584
MAX_CONCURRENCY = 256  # requests handled at once
REQUEST_TIMEOUT = 10.0  # seconds, per request
MAX_CONNECTIONS = 10_000  # open connections per process (and never past the open-file limit)
IDLE_TIMEOUT = 30.0  # seconds for a request's head to arrive, and between kept-alive requests
WRITE_TIMEOUT = 10.0  # seconds an answer may wait for its client to read before it is closed
REQUEST_LOG = True  # a JSON line per request
WORKERS = 1  # processes serving the port

# The cache (`cache`)
MEMORY_CACHE_MB = 64.0  # the memory tier and the rendered answers of one process
MAX_RESOLUTIONS = 32  # upstream resolutions at once
# hashes a new Redis cache keeps its entries in: 1-4 million identities (2-8 million entries)
# make 30-120 fields a bucket, within what Redis keeps compact (`cache.stores.redis`)
REDIS_BUCKETS = 65_536
MAX_CLAIMS = 10_000  # DIDs re-verified at once after change events (each with a claim open)
# (fresh, at most) seconds of each kind of answer (`cache.policy` says why)
TTL_VERIFIED = (3600.0, 86400.0)
TTL_UNVERIFIED = (300.0, 3600.0)
TTL_ABSENT = (120.0, 600.0)

# Inter-service auth tokens (`auth`: `POST /v1/verify/service-auth`, the library's verifier)
TOKEN_LIFETIME = 3600  # seconds: SA-TIME-2's longest lifetime, what a PDS grants at most
SERVICE_AUTH_NONCES = 100_000  # nonces one process holds at once for the replay check
# of them, what one issuer may hold (a did:plc, or a did:web's registrable domain): an
# account of a PDS minting 60 s tokens (held 90 s with the skew) may send 11 a second
SERVICE_AUTH_ISSUER_NONCES = 1_000

# Audits (`audit`)
UNREACHABLE_AFTER = 3  # transient failures in a row before an `unreachable` finding
WEBHOOK_FORMAT = "json"
AUDIT_KEEP_DAYS = 90.0  # changed checks, findings and runs older than this are pruned
# seconds a process's claim on identities of a shared run lasts unless renewed (every third
# of it): how long the identities of a process that died wait before another takes them
AUDIT_LEASE = 60.0

# The PLC mirror (`mirror`)
PLC_MIRROR_INTERVAL = 5.0  # seconds between polls once caught up
# DIDs whose replay a verifying process keeps in memory (about 3.4 KiB each: two workers
# and the main process stay under 1 GiB); one evicted is rebuilt from its stored ops
PLC_MIRROR_REPLAYS = 100_000
PLC_MIRROR_PROFILE = "directory"  # answer as plc.directory does
# /export/stream: how far back a consumer may start (about a week of plc.directory's
# operations), and how long one message may wait for it to read
PLC_STREAM_BACKLOG = 1_000_000
PLC_STREAM_TIMEOUT = 10.0
# consumers at once: about 20 KiB each while waiting, up to a page of operations more while
# not reading (~60 KiB in all at most): ~60 MiB for the default bound
PLC_STREAM_CONSUMERS = 1_000
