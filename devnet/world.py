"""The test network's world: identities on the PLC directory, the DNS zone, the HTTPS hosts.

One description, read by the orchestrator (to build the servers) and by the tests (to know
what each case should produce). Every name here lives under the reserved `test.` TLD.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

from atwhois.testing import authorization_server_metadata, protected_resource_metadata

PDS = "https://pds.test"
# The reference PDS of the test network (devnet/pds.py): its host, the domain of the
# handles it serves, and the accounts made on it at start-up, through its own API.
LIVE_PDS_HOST = "live.test"
LIVE_HANDLE_SUFFIX = ".live.test"
LIVE_ACCOUNTS = ("paula", "pete")
LIVE_PDS_ADMIN_PASSWORD = "atwhois-devnet-admin"


def live_password(name: str) -> str:
    return f"devnet-password-{name}"


# A P-256 did:key (from the crypto spec's examples): a signing key on the other curve.
P256_SIGNING_KEY = "did:key:zDnaembgSGUhZULN2Caob4HLJPaxBh92N7rtH21TErzqf8HQo"
NEVER_REGISTERED_DID = "did:plc:neverregisteredaaaaaaaaa"


def private_key_hex(name: str) -> str:
    """A fixed secp256k1 private key per name, so DIDs are the same on every run."""
    return hashlib.sha256(f"atwhois devnet key {name}".encode()).hexdigest()


def _create(handle: str, *, signer: str, aliases: list[str] | None = None) -> dict[str, Any]:
    return {
        "op": "create",
        "signer": signer,
        "rotationKeys": [signer],
        "signingKey": f"{signer}-signing",
        "alsoKnownAs": aliases if aliases is not None else [f"at://{handle}"],
        "pds": PDS,
    }


@dataclass(frozen=True)
class PlcIdentity:
    name: str
    steps: list[dict[str, Any]]
    what: str


def _plain(name: str, handle: str, what: str) -> PlcIdentity:
    return PlcIdentity(name, [_create(handle, signer=name)], what)


PLC_IDENTITIES: list[PlcIdentity] = [
    _plain("alice", "alice.test", "plain account; DNS and HTTPS agree"),
    PlcIdentity(
        "bob",
        [
            _create("bob-old.test", signer="bob"),
            {"op": "update", "signer": "bob", "alsoKnownAs": ["at://bob.test"]},
        ],
        "handle change: bob-old.test -> bob.test (bob-old.test still points here in DNS)",
    ),
    PlcIdentity(
        "carol",
        [
            _create("carol.test", signer="carol"),
            {"op": "update", "signer": "carol", "signingKey": "carol-signing-2"},
        ],
        "signing-key rotation; handle served over HTTPS only",
    ),
    PlcIdentity(
        "dave",
        [
            {**_create("dave.test", signer="dave"), "rotationKeys": ["dave", "dave-backup"]},
            {"op": "update", "signer": "dave", "rotationKeys": ["dave-new", "dave-backup"]},
            {"op": "update", "signer": "dave-new", "pds": "https://pds2.test"},
        ],
        "rotation-key rotation, then an op signed by the new rotation key (PDS move)",
    ),
    PlcIdentity(
        "erin",
        [_create("erin.test", signer="erin"), {"op": "tombstone", "signer": "erin"}],
        "tombstoned",
    ),
    PlcIdentity(
        "frank",
        [
            {**_create("frank.test", signer="frank"), "rotationKeys": ["frank", "frank-hot"]},
            {"op": "update", "signer": "frank-hot", "alsoKnownAs": ["at://evil.test"]},
            {"op": "update", "signer": "frank", "fork": 0, "alsoKnownAs": ["at://frank.test"]},
        ],
        "recovery: the hot key (index 1) hijacks the handle; key 0 nullifies that op",
    ),
    PlcIdentity(
        "grace",
        [
            _create(
                "grace.test",
                signer="grace",
                aliases=[
                    "https://grace.example.com",
                    "at://under_score.test",
                    "at://grace.test",
                    "at://grace-alt.test",
                ],
            )
        ],
        "several aliases: the first *valid* at:// one (grace.test) is the handle",
    ),
    PlcIdentity(
        "henry",
        [_create("henry.test", signer="henry", aliases=["at://Henry.TEST"])],
        "mixed-case alias, lowercased before comparison",
    ),
    _plain("ivan", "conflict.test", "DNS says ivan, HTTPS says alice: DNS wins, conflict reported"),
    _plain("judy", "dupe.test", "two identical TXT records, collapsed"),
    _plain("kate", "split.test", "TXT record split into two character-strings"),
    _plain("leo", "cname.test", "_atproto name is a CNAME to a valid record"),
    _plain("mallory", "big.test", "TXT answer too large for plain UDP (TCP fallback)"),
    _plain("nina", "redirect.test", "well-known redirects to another host"),
    _plain("olivia", "spaces.test", "well-known body has whitespace around the DID"),
    _plain("peggy", "slow.test", "DNS answer is slow; HTTPS answers fast"),
    PlcIdentity(
        "trent",
        [_create("alice.test", signer="trent")],
        "impersonator: declares alice.test, which resolves to alice (DID-first mismatch)",
    ),
    PlcIdentity(
        "uma",
        [_create("uma.local", signer="uma")],
        "declares a handle under a reserved TLD (never resolved, H-TLD-1)",
    ),
    # Identities the audit tests change between runs (no other test may rely on them).
    _plain("victor", "victor.test", "audit: changes handle (victor.test -> victor2.test)"),
    _plain("wendy", "wendy.test", "audit: gets tombstoned"),
    _plain("xavier", "xavier.test", "audit: DNS record flips to another DID, then breaks"),
    _plain("yvonne", "yvonne.test", "audit: moves from DNS to HTTPS"),
    # DNSSEC (`devnet.dnssec`): DNS-only handles in the zones under dnssec.test.
    _plain("sam", "sam.dnssec.test", "DNSSEC: TXT in a zone Knot signs (secure)"),
    _plain("nora", "nora.nsec3.dnssec.test", "DNSSEC: TXT in a zone signed with NSEC3 (secure)"),
    _plain("ursula", "ursula.plain.dnssec.test", "DNSSEC: unsigned child of an NSEC zone"),
    _plain("otto", "otto.plain.nsec3.dnssec.test", "DNSSEC: unsigned child of an NSEC3 zone"),
    _plain("bruno", "bruno.broken.dnssec.test", "DNSSEC: TXT whose signature fails (bogus)"),
    _plain("dana", "dana.moving.dnssec.test", "audit: its zone's DS goes, then comes back wrong"),
    PlcIdentity(
        "quinn",
        [{**_create("quinn.test", signer="quinn"), "signingKey": P256_SIGNING_KEY}],
        "P-256 signing key",
    ),
]

# Rotation/signing key names used by the steps, each with its fixed private key.
KEY_NAMES = sorted(
    {
        key
        for identity in PLC_IDENTITIES
        for step in identity.steps
        for key in [
            step["signer"],
            *step.get("rotationKeys", []),
            *([step["signingKey"]] if "signingKey" in step else []),
        ]
        if not key.startswith("did:key:")
    }
)


def plc_plan() -> dict[str, Any]:
    """The seeding plan handed to `plc.js seed`."""
    return {
        "keys": {name: private_key_hex(name) for name in KEY_NAMES},
        "identities": [{"name": i.name, "steps": i.steps} for i in PLC_IDENTITIES],
    }


# --- DNS ------------------------------------------------------------------------------
# TXT values may name an identity as "{did:NAME}"; the orchestrator fills in the DID.


@dataclass(frozen=True)
class DnsName:
    txt: list[str] = field(default_factory=list)
    cname: str | None = None
    split_strings: bool = False  # each record as two character-strings (H-DNS-4)


ATPROTO_TXT: dict[str, DnsName] = {
    "alice.test": DnsName(["did={did:alice}"]),
    "bob.test": DnsName(["did={did:bob}"]),
    "bob-old.test": DnsName(["did={did:bob}"]),
    "dave.test": DnsName(["did={did:dave}"]),
    "erin.test": DnsName(["did={did:erin}"]),
    "frank.test": DnsName(["did={did:frank}"]),
    "grace.test": DnsName(["did={did:grace}"]),
    "henry.test": DnsName(["did={did:henry}"]),
    "quinn.test": DnsName(["did={did:quinn}"]),
    "conflict.test": DnsName(["did={did:ivan}"]),
    "dupe.test": DnsName(["did={did:judy}", "did={did:judy}", "v=spf1 -all"]),
    "split.test": DnsName(["did={did:kate}"], split_strings=True),
    "cname.test": DnsName(cname="_atproto.target.test."),
    "target.test": DnsName(["did={did:leo}"]),
    "big.test": DnsName(
        ["did={did:mallory}"] + [f"filler-{i:02d}-" + "x" * 200 for i in range(12)]
    ),
    "slow.test": DnsName(["did={did:peggy}"]),
    "two-dids.test": DnsName(["did={did:alice}", "did={did:bob}"]),
    "no-did.test": DnsName(["hello world", "v=spf1 -all"]),
    "bad-did.test": DnsName(["did=not-a-did"]),
    "web.test": DnsName(["did=did:web:web.test"]),
    "legacyweb.test": DnsName(["did=did:web:legacyweb.test"]),
    "ghost.test": DnsName(["did={did:never}"]),
    "imposter.test": DnsName(["did=did:web:imposter.test"]),
    "wrong.test": DnsName(),
    "servfail.test": DnsName(["did={did:alice}"]),
    "victor.test": DnsName(["did={did:victor}"]),
    "victor2.test": DnsName(["did={did:victor}"]),
    "wendy.test": DnsName(["did={did:wendy}"]),
    "xavier.test": DnsName(["did={did:xavier}"]),
    "yvonne.test": DnsName(["did={did:yvonne}"]),
    "blackhole.test": DnsName(["did={did:alice}"]),
}

# Names whose `_atproto` TXT the DNS proxy mistreats, whatever the zone says.
DNS_SLOW = {"_atproto.slow.test."}
DNS_NEVER = {"_atproto.blackhole.test."}
DNS_SERVFAIL = {"_atproto.servfail.test."}
DNS_SLOW_SECONDS = 1.5

# Names that exist with some record but no TXT: a TXT query gets NODATA.
NODATA_NAMES = {"_atproto.nodata.test."}

# Hosts with an A record to a forbidden address (the SSRF guard must refuse, never connect).
FORBIDDEN_HOSTS = {"forbidden.test": "0.0.0.0"}

# --- HTTPS hosts ----------------------------------------------------------------------
# Every host below has `A 127.0.0.1` and is served by one TLS server, chosen by SNI.

# Hosts served with a broken certificate.
TLS_EXPIRED = "expired.test"
TLS_UNKNOWN_CA = "unknown-ca.test"
TLS_WRONG_NAME = "wrong-name.test"

WELL_KNOWN = "/.well-known/atproto-did"
DID_JSON = "/.well-known/did.json"

# (host, path) -> body; "{did:NAME}" placeholders filled in. Absent paths are 404.
STATIC_FILES: dict[tuple[str, str], str] = {
    ("alice.test", WELL_KNOWN): "{did:alice}",
    ("carol.test", WELL_KNOWN): "{did:carol}",
    ("conflict.test", WELL_KNOWN): "{did:alice}",
    ("wrong.test", WELL_KNOWN): "{did:alice}",
    ("spaces.test", WELL_KNOWN): "  \n\t{did:olivia}\r\n  \n",
    ("slow.test", WELL_KNOWN): "{did:peggy}",
    ("files.test", "/nina"): "{did:nina}",
    ("html.test", WELL_KNOWN): "<!doctype html><html><body>This domain is parked</body></html>",
    ("empty.test", WELL_KNOWN): "",
    ("servfail.test", WELL_KNOWN): "{did:alice}",
    ("yvonne.test", "/.well-known/atproto-did.later"): "{did:yvonne}",
    ("web.test", DID_JSON): "{doc:web.test}",
    ("legacyweb.test", DID_JSON): "{doc:legacyweb.test}",
    ("imposter.test", DID_JSON): "{doc:web.test}",
    ("feedgen.test", DID_JSON): "{doc:feedgen.test}",
    ("nested.test", DID_JSON): "[" * 30000 + "]" * 30000,  # exhausts a naive JSON parser
    (TLS_EXPIRED, WELL_KNOWN): "{did:alice}",
    (TLS_UNKNOWN_CA, WELL_KNOWN): "{did:alice}",
    (TLS_WRONG_NAME, WELL_KNOWN): "{did:alice}",
}

# OAuth (issue 68): a PDS whose authorization server is another host, an entryway, as
# bsky.social is for Bluesky's PDSes (the reference PDS of the test network is its own).
# Both serve the reference's documents (`atwhois.testing`'s, held to tests/vectors/oauth/).
ENTRYWAY = "https://entryway.test"
ENTRYWAY_PDS = "https://pds.entryway.test"
PROTECTED_RESOURCE = "/.well-known/oauth-protected-resource"
AUTHORIZATION_SERVER = "/.well-known/oauth-authorization-server"
OAUTH_DOCUMENTS = {PROTECTED_RESOURCE, AUTHORIZATION_SERVER}  # served as JSON, as .json files
STATIC_FILES[("pds.entryway.test", PROTECTED_RESOURCE)] = json.dumps(
    protected_resource_metadata(ENTRYWAY_PDS, ENTRYWAY), separators=(",", ":")
)
STATIC_FILES[("entryway.test", AUTHORIZATION_SERVER)] = json.dumps(
    authorization_server_metadata(ENTRYWAY), separators=(",", ":")
)

# One K-256 key in both encodings (spec checklist DOC-KEY-3): the same signing key.
K256_MULTIKEY = "zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF"
K256_LEGACY = (
    "zQYEBzXeuTM9UR3rfvNag6L3RNAs5pQZyYPsomTsgQhsxLdEgCrPTLgFna8yqCnxPpNT7DBk6Ym3dgPKNu86vt9GR"
)


def did_web_document(host: str) -> dict[str, Any]:
    """did:web documents: web.test in the current format, legacyweb.test in the legacy one,
    feedgen.test a service with no handle and no key."""
    did = f"did:web:{host}"
    if host == "feedgen.test":
        return {
            "@context": ["https://www.w3.org/ns/did/v1"],
            "id": did,
            "alsoKnownAs": [],
            "authentication": None,
            "service": [
                {
                    "id": "#bsky_fg",
                    "type": "BskyFeedGenerator",
                    "serviceEndpoint": "https://feedgen.test",
                }
            ],
        }
    if host == "legacyweb.test":
        key = {
            "id": "#atproto",
            "type": "EcdsaSecp256k1VerificationKey2019",
            "controller": did,
            "publicKeyMultibase": K256_LEGACY,
        }
    else:
        key = {
            "id": f"{did}#atproto",
            "type": "Multikey",
            "controller": did,
            "publicKeyMultibase": K256_MULTIKEY,
        }
    return {
        "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"],
        "id": did,
        "alsoKnownAs": [f"at://{host}"],
        "verificationMethod": [key],
        "service": [
            {"id": "#atproto_pds", "type": "AtprotoPersonalDataServer", "serviceEndpoint": PDS}
        ],
    }


# Hosts whose behaviour is code in the TLS server, not a file.
HTTPS_BEHAVIOURS = {
    "redirect.test": "redirect to https://files.test/nina",
    "loop.test": "redirects to itself forever",
    "huge.test": "a body of 4 MiB",
    "slow-headers.test": "headers only after 30 s",
    "trickle.test": "headers at once, then one byte a second",
    "error.test": "503 Service Unavailable",
    "redirect-private.test": "redirect to https://0.0.0.0/ (a forbidden address literal)",
    "redirect-http.test": "redirect to plain http://alice.test/",
    "chunked.test": "a chunked body of 4 MiB with no Content-Length",
    "bigdoc.test": "a did.json of 256 KiB",
    "gzip.test": "a well-known DID gzip-compressed although identity was asked for",
}


# `--bulk N` adds N did:web identities for load tests: u00000.bulk.test ... each with its
# TXT record, an A record, and a document and well-known file generated by the TLS server.
# `pad<K>-<anything>.bulk.test` is served the same way, with a document of about K KiB,
# padded with service entries (many small objects: the costliest JSON to hold); the zone's
# wildcard A record covers it, and its handle is verified over HTTPS. Any other name under
# bulk.test is an ordinary host whose files tests write (`DevnetState.set_file`).
BULK_SUFFIX = ".bulk.test"
_GENERATED = re.compile(r"u\d{5}|pad(\d+)-[a-z0-9-]+")
# Scripted bulk hosts serving the well-known file tests write: `hops<N>-x` after N
# redirects (H-WK-6), `status<NNN>-x` with that status (H-WK-2).
SCRIPTED_BULK = re.compile(r"hops(?P<hops>\d+)-[a-z0-9-]+|status(?P<status>\d{3})-[a-z0-9-]+")


def bulk_document(host: str) -> dict[str, Any] | None:
    """The generated document of a bulk host, or None when its files are on disk."""
    label = host.removesuffix(BULK_SUFFIX)
    generated = _GENERATED.fullmatch(label)
    if generated is None:
        return None
    document = did_web_document(host)
    if generated.group(1):
        document["service"] += [
            {"id": f"#pad{i}", "type": "Padding", "serviceEndpoint": f"https://p{i}.example"}
            for i in range(int(generated.group(1)) * 1024 // 83)
        ]
    return document


def bulk_host(index: int) -> str:
    return f"u{index:05d}{BULK_SUFFIX}"


HTTPS_HOSTS = sorted(
    {host for host, _ in STATIC_FILES}
    | set(HTTPS_BEHAVIOURS)
    | {"web.test", "legacyweb.test", "imposter.test", "pds.test", "pds2.test", "nodata.test"}
    | {TLS_EXPIRED, TLS_UNKNOWN_CA, TLS_WRONG_NAME}
)


# The network's shape, for benchmarks at its scale (`bench/network_world.py`, the test
# network's `--shaped FILE`). On the real network most accounts are did:plc with a handle
# under their PDS's domain, answered by that host's well-known file for every handle under
# it (`*.bsky.social`); a minority bring a domain of their own, answered by a DNS TXT record;
# a few are did:web. Per hundred identities: 90 under a PDS domain (one host far larger than
# the others), 9 with a domain of their own, 1 did:web (a bulk host, its document generated).
PDS_DOMAINS = (("bsky.net.test", 70), ("pds-a.net.test", 9), ("pds-b.net.test", 6),
               ("pds-c.net.test", 3), ("pds-d.net.test", 2))  # fmt: skip
OWN_DOMAIN_SUFFIX = ".own.test"
_PDS_OF_HUNDRED = [domain for domain, share in PDS_DOMAINS for _ in range(share)]


def shaped_handle(index: int) -> str:
    """The handle of the network-shaped world's identity `index` (did:web for 1 in 100)."""
    slot = index % 100
    if slot < len(_PDS_OF_HUNDRED):
        return f"h{index}.{_PDS_OF_HUNDRED[slot]}"
    if slot < 99:
        return f"n{index}{OWN_DOMAIN_SUFFIX}"
    return bulk_host(index // 100)  # did:web, generated: fewer than 100,000 of them


def shaped_pds(handle: str) -> str:
    """The PDS domain `handle` is under, whose host answers its well-known file ('': none)."""
    return next((d for d, _ in PDS_DOMAINS if handle.endswith("." + d)), "")


def shaped_kind(handle: str) -> str:
    """Which kind of the network-shaped world's identities `handle` names."""
    if shaped_pds(handle):
        return "under a PDS domain"
    return "did:web" if handle.endswith(BULK_SUFFIX) else "on a domain of their own"


def latency_share(name: str) -> float:
    """Where between near (0) and far (1) the server answering for `name` is: fixed per
    name, spread evenly over the names."""
    return zlib.crc32(name.encode()) % 1001 / 1000
