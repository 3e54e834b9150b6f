"""Fuzzing every parser that takes a stranger's bytes: identifiers, TXT records, well-known
bodies, `Retry-After` headers, DID documents, PLC operations, audit logs and export lines,
service auth tokens (their text, and their header's and claims' bytes through the
verifier), XRPC query strings and bodies, the TOML configuration, DNSSEC responses and the
walk over them (`fuzz_dnssec`), DRISL blocks and records' proofs (`fuzz_records`),
moderation labels and labelers' frames (`fuzz_labels`), OAuth discovery's documents and
token responses (`fuzz_oauth`); and the
followers of hostile sources (`fuzz_hostile`): export page sequences, stream frame
sequences, the mirror's read API queries.

Each target is a Hypothesis strategy (random input, and real inputs from the vectors with
parts swapped for random ones) and a function that may fail only in the classified ways the
code promises; any other exception is a crash. `tests/house/test_fuzz.py` runs every target a
little, with a fixed seed, in `make test`; `make fuzz` (`python -m tests.support.fuzz`) runs each
for 100,000 inputs at least and prints what it found.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import functools
import json
import sys
import tempfile
import time
import tomllib
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import coincurve
import httpx
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from atwhois import settings as atwhois_settings
from atwhois.cache.entry import Entry, decode_cached
from atwhois.cache.packing import pack, unpack
from atwhois.mirror import MirrorApi, MirrorState, Replica
from atwhois.mirror.backends import SqliteMirrorStore
from atwhois.resolver import Config, syntax
from atwhois.resolver.config import Nameserver
from atwhois.resolver.document import parse_json_document
from atwhois.resolver.errors import InvalidInput, ResolutionError
from atwhois.resolver.handle import did_from_txt, did_from_well_known
from atwhois.resolver.plc import replay
from atwhois.resolver.plc.encoding import NotEncodable, dag_cbor
from atwhois.resolver.plc.export import verify_export
from atwhois.resolver.plc.operation import BadOperation, parse_operation
from atwhois.server import routes
from atwhois.stream import MalformedFrame
from atwhois.stream import decode as decode_frame
from atwhois.stream.frames import decode_jetstream, decode_jetstream_v2
from atwhois.testing import World
from devnet import relay_frames
from devnet.atwhois import error_name
from devnet.jetstream_wire import events
from devnet.shaped_entries import shaped
from devnet.synthetic_plc import export_lines

from . import fuzz_dnssec, fuzz_labels, fuzz_oauth, fuzz_records
from .fuzz_hostile import HOSTILE
from .fuzz_inputs import (
    LOGS,
    documents,
    identifiers,
    json_bytes,
    json_values,
    mutated_json,
    mutated_text,
)

# --- targets ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    name: str
    inputs: st.SearchStrategy[Any]
    run: Callable[[Any], None]  # raises only what the code promises


def _syntax(text: str) -> None:
    for check in (syntax.is_valid_handle, syntax.is_valid_did, syntax.is_valid_at_identifier):
        assert isinstance(check(text), bool)
    try:
        query = syntax.parse_query(text)
    except InvalidInput as err:
        assert err.rule
        return
    if query.kind == "did" and query.value.startswith("did:web:"):
        with contextlib.suppress(InvalidInput):
            syntax.parse_did_web(query.value, dev=True, allow_test_tld=True)
    assert query.value.isascii()


def _txt(records: list[list[bytes]]) -> None:
    with contextlib.suppress(ResolutionError):
        assert did_from_txt(records).startswith("did:")


def _well_known(body: bytes) -> None:
    with contextlib.suppress(ResolutionError):
        assert did_from_well_known(body).startswith("did:")


def _document(body: bytes) -> None:
    for did in ("did:plc:ewvi7nxzyoun6zhxrhs64oiz", "did:web:example.com"):
        try:
            served, data = parse_json_document(did, body)
        except ResolutionError:
            continue
        served.decode("utf-8")  # what the daemon splices into its answers
        assert data.did == did
        json.dumps([data.declared_handle, data.pds, list(data.also_known_as)], ensure_ascii=False)


def _operation(op: Any) -> None:
    try:
        parse_operation(op)
    except BadOperation as err:
        assert err.rule
    with contextlib.suppress(NotEncodable):
        dag_cbor(op)


def _log(log: Any) -> None:
    did = log[0].get("did") if isinstance(log, list) and log and isinstance(log[0], dict) else None
    audit = replay(did if isinstance(did, str) else "did:plc:ewvi7nxzyoun6zhxrhs64oiz", log)
    json.dumps(audit.to_json())


EXPORT = list(export_lines(6, 4))
# pages of an export: real lines, lines with parts swapped for random JSON, and garbage
export_pages = st.lists(
    st.one_of(
        st.sampled_from(EXPORT),
        mutated_json([json.loads(line) for line in EXPORT]).map(
            lambda v: json.dumps(v, allow_nan=True)
        ),
        st.text(max_size=80),
    ),
    max_size=12,
)


def _export(lines: list[str]) -> None:
    summary = verify_export(lines)
    json.dumps(summary.to_json())  # what --json prints; the text goes through an escaping stdout


_MIRROR: list[tuple[Replica, MirrorApi]] = []


def _mirror_page(lines: list[str]) -> None:
    """One store for every example: hostile pages pile up on each other's DIDs."""
    if not _MIRROR:
        store = SqliteMirrorStore(Path(tempfile.mkdtemp(prefix="atwhois-fuzz-")) / "mirror.db")
        _MIRROR.append(
            (
                Replica(store),
                MirrorApi(store, MirrorState("https://upstream.test", caught_up_at=time.time())),
            )
        )
    replica, api = _MIRROR[0]
    result = replica.apply(lines)
    assert result.applied + result.rejected + result.duplicates + result.bad_lines == sum(
        1 for line in lines if line.strip()
    )
    for line in lines:
        did = line.split('"did": "')[-1].split('"')[0]
        for path in (f"/{did}", f"/{did}/data", f"/{did}/log/audit", f"/{did}/log/last"):
            reply = api.answer("GET", path, {})
            assert reply.status in (200, 404, 410), (path, reply.status)
            for text in reply.body.splitlines():  # JSON, or JSON Lines (a DID named "export")
                json.loads(text)
    api.answer("GET", "/export", {"after": "0"})


def _config(text: str) -> None:
    try:
        merged = atwhois_settings.from_file(tomllib.loads(text))
        Config.from_settings(merged)
    except (
        ValueError,
        atwhois_settings.SettingError,
        InvalidInput,
    ):  # TOMLDecodeError: a ValueError
        pass


FRAMES = [
    relay_frames.identity(1),
    relay_frames.account(2, False, "takendown"),
    relay_frames.commit(3, blocks=64),
    relay_frames.info(),
    relay_frames.error(),
]


def _flipped(case: tuple[bytes, list[tuple[int, int]], int]) -> bytes:
    """A real frame with some bytes replaced and its tail perhaps cut."""
    frame, flips, cut = case
    data = bytearray(frame)
    for at, value in flips:
        data[at % len(data)] = value
    return bytes(data[: max(1, len(data) - cut)])


def flipped_or_random(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    """Random bytes, or a real input with some bytes replaced and its tail perhaps cut."""
    return st.one_of(
        st.binary(max_size=200),
        st.tuples(
            st.sampled_from(seeds),
            st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
            st.integers(0, 40),
        ).map(_flipped),
    )


frames = flipped_or_random(FRAMES)
# Jetstream's JSON for the same frames, as the reference writes them on v1 and on v2 (with
# the frames rebuilt from its code: info, error, unknown types): mutated as JSON, and as bytes
JETSTREAM_EVENTS = [(n, e) for n, f in enumerate(FRAMES) for e in events(f)]
JETSTREAM_MESSAGES = [m for n, e in JETSTREAM_EVENTS if (m := e.v1(10**15 + n, n + 1))]
_VECTORS = Path(__file__).parents[1] / "vectors" / "jetstream" / "frames.json"
JETSTREAM_V2 = [e.v2(n + 1, 10**15 + n) for n, e in JETSTREAM_EVENTS] + [
    v["frame"].encode() for v in json.loads(_VECTORS.read_text())["frames"] if "status" not in v
]


def _json_and_bytes(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    return st.one_of(
        mutated_json([json.loads(s) for s in seeds]).map(lambda value: json.dumps(value).encode()),
        flipped_or_random(seeds),
    )


def _frame(raw: bytes, decoder: Callable[[bytes], object] = decode_frame) -> None:
    with contextlib.suppress(MalformedFrame):
        event = decoder(raw)
        assert type(event).__name__ in (
            "IdentityEvent",
            "AccountEvent",
            "InfoEvent",
            "ErrorFrame",
            "Skipped",
        )


_SHAPED = shaped(0)
COMPACT_DID = _SHAPED.did


def compact_entries() -> list[bytes]:
    return [entry.encode(key) for key, entry in _SHAPED.entries]


_PACKED = [
    Entry({"handle": "a.test"}, 1.0, 2.0, 3.0).encode_whole(),
    Entry({"did": "did:web:a.test", "evidence": {}}, 1.0, 2.0, 3.0, body=b"{}").encode_whole(),
    pack(b"{}"),
]
# and as JSON, as once stored; and compact (`cache.compact`), of a handle and a document
ENTRIES = _PACKED + [unpack(packed) for packed in _PACKED] + compact_entries()


def _entry(raw: bytes) -> None:
    """A cache entry that is not what the cache wrote is refused with the errors the cache
    takes for "unreadable: drop it and resolve again" (`CachedResolver._cached`)."""
    for key in ("h:a.test", "d:" + COMPACT_DID):
        with contextlib.suppress(ValueError, TypeError, KeyError):
            decode_cached(key, raw, dev=False)


def _car_of_commit() -> tuple[bytes, str]:
    """A real commit block, signed, in a CAR as `getBlocks` sends it; and its CID."""
    from devnet.plc_ops import Key

    from .repo import alone, signed_commit

    _, _, block = signed_commit(Key("fuzz").private, "did:plc:" + "f" * 24)
    text, car = alone(block)
    return car, text


COMMIT_CAR, COMMIT_CID = _car_of_commit()


def _commit(raw: bytes) -> None:
    """A CAR a PDS answered: a commit, or `InvalidCommit` naming the rule (never another
    error: the PDS check classifies only what it is promised)."""
    from atwhois.resolver.commit import InvalidCommit, read_commit

    with contextlib.suppress(InvalidCommit):
        commit = read_commit(raw, COMMIT_CID)
        assert isinstance(commit.signature, bytes) and len(commit.signature) == 64


def _token_parts(value: tuple[Any, Any]) -> str:
    """A token of a (mutated) header and claims, signed with the fuzz key."""
    from atwhois.resolver.service_auth import mint

    header, claims = value
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return mint(TOKEN_KEY, {"iss": claims}, alg=header)  # values where objects go
    return mint(TOKEN_KEY, claims, **header)


def _service_auth(token: str) -> None:
    """A token from anyone: valid, or `TokenRefused` naming the rule (never another error),
    through every rule (its form, its claims, its issuer's key, its signature)."""
    from atwhois.resolver.keys import Curve, PublicKey
    from atwhois.resolver.service_auth import (
        Expected,
        TokenRefused,
        check_claims,
        check_signature,
        issuer_key,
        parse_token,
    )

    key = PublicKey(Curve.K256, TOKEN_KEY.public_key.format())
    with contextlib.suppress(TokenRefused):
        parsed = parse_token(token)
        check_claims(parsed, Expected(TOKEN_AUDIENCE, key_ids=("atproto", "atproto_label")), 1e9)
        method = {"id": f"{parsed.issuer}#{parsed.key_id}", "type": "Multikey"}
        method |= {"controller": parsed.issuer, "publicKeyMultibase": key.multikey}
        check_signature(
            parsed, issuer_key(parsed, {"id": parsed.issuer, "verificationMethod": [method]})
        )


def _token_seeds() -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]:
    from atwhois.resolver.service_auth import mint

    headers: list[dict[str, Any]] = [{}, {"kid": "#atproto_label"}, {"typ": "at+jwt"}]
    claims: list[dict[str, Any]] = [
        {"iss": "did:plc:" + "a" * 24, "aud": TOKEN_AUDIENCE, "iat": 10**9 - 10,
         "exp": 10**9 + 50, "jti": "n"},
        {"iss": "did:web:example.com#atproto_labeler", "aud": "did:web:feed.example",
         "iat": 10**9, "exp": 10**9 + 60, "jti": "x", "lxm": "app.bsky.feed.getFeedSkeleton"},
    ]  # fmt: skip
    return [mint(TOKEN_KEY, c, **h) for c in claims for h in headers], headers, claims


TOKEN_KEY = coincurve.PrivateKey(b"\x07" * 32)
TOKEN_AUDIENCE = "did:web:feed.example#bsky_fg"
TOKENS, TOKEN_HEADERS, TOKEN_CLAIMS = _token_seeds()
tokens = st.one_of(
    mutated_text(TOKENS),
    st.tuples(mutated_json(TOKEN_HEADERS), mutated_json(TOKEN_CLAIMS)).map(_token_parts),
    st.text(max_size=300),
)


def _retry_after(text: str) -> None:
    """Any host's `Retry-After`: seconds within the cap, or None (POL-RA-1), never an error."""
    from atwhois.resolver.untrusted import retry_after

    pause = retry_after(text, cap=300.0)
    assert pause is None or 0.0 <= pause <= 300.0


RETRY_AFTER_SEEDS = [
    "3",
    "3600",
    "Sun, 06 Nov 1994 08:49:37 GMT",
    "Sunday, 06-Nov-94 08:49:37 GMT",
    "Sun Nov  6 08:49:37 1994",
    "Fri, 31 Dec 9999 23:59:59 +0000",
    "Mon, 01 Jan 99999999999 00:00:00 GMT",
    "²",
]

# A token's header and claims as any bytes (JSON of any kind in any field, in UTF-8 or
# not, with a BOM or not, or bytes flipped), signed by an issuer the verifier resolves, so
# that every rule is reached, the replay check's included.
_ISSUER_WORLD = World()
TOKEN_ISSUER = _ISSUER_WORLD.add("fuzz.example.org")
_ISSUER_KEY = coincurve.PrivateKey(_ISSUER_WORLD.accounts[TOKEN_ISSUER].secret)
_AT = 1_000_000_000  # the verifier's clock: the seeds' tokens stay in their time
_ISSUED = [
    {"iss": TOKEN_ISSUER, "aud": TOKEN_AUDIENCE, "iat": _AT, "exp": _AT + 60, "jti": "n"},
    {"iss": TOKEN_ISSUER, "aud": "did:web:feed.example", "iat": _AT - 10, "exp": _AT + 50,
     "jti": "x", "lxm": "app.bsky.feed.getFeedSkeleton", "nbf": _AT},
]  # fmt: skip
_ENCODINGS = ["utf-8", "utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32"]


def _encoded(case: tuple[Any, str, bool]) -> bytes:
    value, encoding, ascii_only = case
    text = json.dumps(value, allow_nan=True, ensure_ascii=ascii_only)
    return text.encode(encoding, "surrogatepass")


def _segment(seeds: list[Any]) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.tuples(mutated_json(seeds), st.sampled_from(_ENCODINGS), st.booleans()).map(_encoded),
        flipped_or_random([json.dumps(seed).encode() for seed in seeds]),
    )


token_bytes = st.tuples(
    _segment([{"typ": "JWT", "alg": "ES256K"}, *TOKEN_HEADERS]), _segment(_ISSUED)
)
_VERIFYING: list[Any] = []  # the event loop and the verifier, made on first use


def _token_bytes(parts: tuple[bytes, bytes]) -> None:
    """Any bytes as a token's header and claims, signed: through the verifier, the replay
    check on, a verdict of the three, naming a rule when invalid (never another error: an
    `alg` list and a lone surrogate in `jti` were a 500 each, issue 66)."""
    from atwhois.auth import ServiceAuthVerifier
    from atwhois.resolver.rules import TAG
    from atwhois.resolver.service_auth import Expected

    if not _VERIFYING:
        loop = asyncio.new_event_loop()
        cached = _ISSUER_WORLD.cached(clock=lambda: _AT)
        _VERIFYING.extend([loop, ServiceAuthVerifier(cached, clock=lambda: _AT)])
    loop, verifier = _VERIFYING
    header, claims = parts
    signed = f"{_b64url(header)}.{_b64url(claims)}"
    token = f"{signed}.{_b64url(_ISSUER_KEY.sign_recoverable(signed.encode())[:64])}"
    expected = Expected(TOKEN_AUDIENCE, key_ids=("atproto", "atproto_label"))
    verification = loop.run_until_complete(verifier.verify(token, expected, replay=True))
    json.dumps(verification.to_json())  # what the daemon answers
    if verification.outcome == "invalid":
        assert verification.rule and TAG.fullmatch(verification.rule), verification
    else:
        assert verification.rule is None, verification


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


TOML_SEEDS = [
    'cache = "memory:"\nttl_verified = "1:3600"\n',
    'dev = true\nplc_url = "https://plc.directory"\nport = 2584\n',
    'dns_server = ["127.0.0.1:53"]\nallow_net = ["127.0.0.0/8"]\ntimeout = 2.5\n',
    'refresh_token = "t"\nmemory_cache_mb = 64\nmax_concurrency = 10\n',
]

TARGETS = [
    Target("identifier syntax", identifiers, _syntax),
    Target(
        "TXT records",
        st.lists(
            st.lists(
                st.one_of(
                    st.binary(max_size=80),
                    identifiers.map(lambda t: b"did=" + t.encode("utf-8", "surrogatepass")),
                ),
                min_size=1,
                max_size=3,
            ),
            max_size=4,
        ),
        _txt,
    ),
    Target(
        "well-known bodies",
        st.one_of(
            st.binary(max_size=300),
            identifiers.map(lambda t: t.encode("utf-8", "surrogatepass")),
            st.text(max_size=40).map(lambda t: (" \n" + t + "\r\n").encode("utf-8", "replace")),
        ),
        _well_known,
    ),
    Target(
        "Retry-After headers",
        st.one_of(
            mutated_text(RETRY_AFTER_SEEDS),
            st.integers(min_value=-(10**40), max_value=10**40).map(str),
            st.text(max_size=60),
        ),
        _retry_after,
    ),
    Target("DID documents", documents, _document),
    Target(
        "PLC operations",
        st.one_of(
            mutated_json([e["operation"] for log in LOGS for e in log if isinstance(e, dict)]),
            json_values,
        ),
        _operation,
    ),
    Target("PLC audit logs", st.one_of(mutated_json(LOGS), json_values), _log),
    Target("export lines", export_pages, _export),
    Target("PLC mirror pages", export_pages, _mirror_page),
    Target("event stream frames", frames, _frame),
    Target(
        "Jetstream messages",
        _json_and_bytes(JETSTREAM_MESSAGES),
        functools.partial(_frame, decoder=decode_jetstream),
    ),
    Target(
        "Jetstream v2 frames",
        _json_and_bytes(JETSTREAM_V2),
        functools.partial(_frame, decoder=decode_jetstream_v2),
    ),
    Target("cache entries", flipped_or_random(ENTRIES), _entry),
    Target("PDS commit blocks", flipped_or_random([COMMIT_CAR]), _commit),
    Target("DRISL blocks", flipped_or_random(fuzz_records.BLOCKS), fuzz_records.drisl_block),
    Target("record proofs", flipped_or_random(fuzz_records.PROOFS), fuzz_records.proof),
    Target("record proofs, trees changed", fuzz_records.changed_trees(), fuzz_records.changed),
    Target("record claims", fuzz_records.claims, fuzz_records.claim),
    Target("label bytes and frames", flipped_or_random(fuzz_labels.BYTES), fuzz_labels.label_bytes),
    Target("labels as JSON", fuzz_labels.labels_json, fuzz_labels.label_json),
    Target("labels through the verifier", fuzz_labels.batches, fuzz_labels.through_verifier),
    Target(
        "OAuth documents",
        st.tuples(flipped_or_random(fuzz_oauth.SEEDS), flipped_or_random(fuzz_oauth.SEEDS)),
        fuzz_oauth.documents,
    ),
    Target("OAuth discovery", fuzz_oauth.document_values, fuzz_oauth.flow),
    Target("OAuth token responses", fuzz_oauth.token_responses, fuzz_oauth.token),
    Target("DNSSEC records", flipped_or_random(fuzz_dnssec.SEEDS), fuzz_dnssec.rules_and_walk),
    Target("service auth tokens", tokens, _service_auth),
    Target("service auth token bytes", token_bytes, _token_bytes),
    Target("DNSSEC walk, hostile", fuzz_dnssec.hostile_seeds, fuzz_dnssec.hostile_walk),
    Target(
        "TOML configuration",
        st.one_of(mutated_text(TOML_SEEDS), st.text(max_size=120)),
        _config,
    ),
    *(Target(name, inputs, run) for name, inputs, run in HOSTILE),
]

# --- the daemon's HTTP input ------------------------------------------------------------

# Every XRPC method the daemon describes, from its own table, and the /v1 report.
METHODS = (
    *((m.verb, m.path, m.parameter) for m in routes.METHODS if m.described),
    ("GET", "/v1/identity/", ""),
)


class XrpcTarget:
    """The daemon on loopback, its upstreams unreachable (every lookup fails fast): only its
    input handling is under test. Any 5xx but a 502 XRPC body is a crash."""

    name = "XRPC queries and bodies"

    def __init__(self) -> None:
        from atwhois.cache import CachedResolver, MemoryStore
        from atwhois.resolver import Resolver
        from atwhois.server import Service, Settings
        from tests.support.cache_model import LoopThread

        config = Config(
            dns_servers=(Nameserver("127.0.0.1", 9),),
            plc_url="http://127.0.0.1:9",
            dns_timeout=0.05,
            https_timeout=0.05,
            document_timeout=0.05,
        )
        self.thread = LoopThread()

        async def start() -> tuple[Any, str]:
            from aiohttp import web

            cached = CachedResolver(Resolver(config), MemoryStore(4 * 1024 * 1024))
            service = Service(cached, Settings(refresh_token="t", request_log=False))
            runner = web.AppRunner(service.app())
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            host, port = runner.addresses[0][:2]
            return runner, f"http://{host}:{port}"

        self.runner, self.url = self.thread.run(start())
        self.http = httpx.Client(base_url=self.url, timeout=30)
        self.inputs = st.tuples(
            st.sampled_from(METHODS),
            st.one_of(identifiers, st.text(max_size=50)),
            st.one_of(st.none(), json_values.map(json_bytes), st.binary(max_size=60)),
            st.booleans(),
        )

    def run(self, case: tuple[tuple[str, str, str], str, bytes | None, bool]) -> None:
        (method, path, param), value, body, as_param = case
        if method == "POST":
            content = body if body is not None else json_bytes({param: value})
            response = self.http.post(path, content=content, headers={"Authorization": "Bearer t"})
        else:  # the bytes an attacker may send: any, percent-encoded, valid UTF-8 or not
            raw = urllib.parse.quote(value.encode("utf-8", "surrogatepass"), safe="")
            if not param:
                response = self.http.get(path + raw)
            else:
                query = f"{param}={raw}" if as_param else f"{param}={raw}&{param}=x"
                response = self.http.get(f"{path}?{query}")
        status = response.status_code
        if status >= 500:
            assert status in (502, 503) and error_name(response), (status, response.text[:200])
        if status >= 400 and response.headers.get("content-type", "").startswith(
            "application/json"
        ):
            assert "error" in response.json()

    def close(self) -> None:
        self.http.close()
        self.thread.run(self.runner.cleanup())
        self.thread.stop()


# --- running ---------------------------------------------------------------------------


def fuzz(target: Target | XrpcTarget, examples: int, fixed_seed: int | None) -> tuple[int, str]:
    """Run `target` on `examples` inputs; returns how many ran and the first crash ('' if
    none). A crash is shrunk to its smallest form by Hypothesis before it is reported."""
    count = 0

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
    )
    @given(target.inputs)
    def case(value: Any) -> None:
        nonlocal count
        count += 1
        target.run(value)

    if fixed_seed is not None:
        case = seed(fixed_seed)(case)
    try:
        case()
    except Exception as err:  # the crash, shrunk: report it (and what a flaky one hid)
        inner = getattr(err, "exceptions", ())
        said = "; ".join(f"{type(e).__name__}: {e}" for e in inner)
        return count, f"{type(err).__name__}: {err} {said}"[:2000]
    return count, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.fuzz", description=__doc__)
    parser.add_argument("--examples", type=int, default=100_000, help="inputs per target")
    parser.add_argument("--seed", type=int, help="fix the random seed")
    parser.add_argument(
        "--only", action="append", help="run the targets whose name contains this (repeatable)"
    )
    args = parser.parse_args(argv)

    def chosen(name: str) -> bool:
        return not args.only or any(part.lower() in name.lower() for part in args.only)

    targets: list[Target | XrpcTarget] = [t for t in TARGETS if chosen(t.name)]
    if chosen(XrpcTarget.name):
        targets.append(XrpcTarget())
    crashes = 0
    for target in targets:
        started = time.monotonic()
        ran, crash = fuzz(target, args.examples, args.seed)
        seconds = time.monotonic() - started
        verdict = "0 crashes" if not crash else f"CRASH: {crash}"
        print(f"{target.name:26} {ran:>8,} inputs {seconds:7.1f} s  {verdict}", flush=True)
        crashes += bool(crash)
        if isinstance(target, XrpcTarget):
            target.close()
    print(f"{crashes} target(s) crashed")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
