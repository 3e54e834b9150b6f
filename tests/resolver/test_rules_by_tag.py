"""Rules the code cites that no test named: each test pins one rule (or a pair that only
make sense together) with an input that breaks it or a plain function that applies it. The
resolver's steps run here on injected DNS and HTTP (recording what was asked), so the
constants they must use (the well-known path, its body cap, the redirect cap, the TXT name)
are pinned without a network."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

import coincurve
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from atwhois.cache.policy import Kind, Lifetime, Policy
from atwhois.cli.serve import _policy
from atwhois.mirror.state import MirrorState
from atwhois.resolver import Config, Outcome, Resolver, Status, document, errors, syntax
from atwhois.resolver.did import (
    check_http_response,
    check_plc_response,
    document_url,
    mirror_note,
    view_age,
)
from atwhois.resolver.errors import NotFound, UpstreamFailure, UpstreamTimeout
from atwhois.resolver.handle import WELL_KNOWN_MAX_BYTES, WELL_KNOWN_PATH, did_from_well_known
from atwhois.resolver.identity import Evidence
from atwhois.resolver.keys import Curve, PublicKey, b58encode, parse_did_key, parse_legacy_multibase
from atwhois.resolver.plc.document import build_document
from atwhois.resolver.plc.encoding import dag_cbor, did_of_genesis
from atwhois.resolver.plc.operation import parse_operation
from atwhois.resolver.plc.signature import verify, why_unverified
from atwhois.resolver.response import Response
from atwhois.resolver.verdict import Step, with_plc_log
from atwhois.settings import Values
from devnet.plc_ops import Key, plc_operation

DID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
SPEC = (Path(__file__).resolve().parents[2] / "docs" / "spec.md").read_text()
ED25519 = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"  # W3C's example key
_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


# --- keys and signatures ---------------------------------------------------------------


def _p256_signed(message: bytes) -> tuple[str, bytes]:
    """A P-256 did:key and its low-S r||s signature of SHA-256(message)."""
    private = ec.generate_private_key(ec.SECP256R1())
    r, s = decode_dss_signature(private.sign(message, ec.ECDSA(hashes.SHA256())))
    s = min(s, _P256_ORDER - s)
    point = private.public_key().public_bytes(Encoding.X962, PublicFormat.CompressedPoint)
    return PublicKey(Curve.P256, point).did_key, r.to_bytes(32, "big") + s.to_bytes(32, "big")


def _k256_signed(message: bytes) -> tuple[str, bytes]:
    private = coincurve.PrivateKey(hashlib.sha256(b"C-CURVE-1").digest())
    compact = private.sign_recoverable(message)[:64]  # SHA-256 inside, low-S
    return PublicKey(Curve.K256, private.public_key.format()).did_key, compact


@pytest.mark.parametrize("signed", [_p256_signed, _k256_signed], ids=["p256", "k256"])
def test_c_curve_1_and_c_sig_1_both_curves_verify_ecdsa_over_sha256(signed: Any) -> None:
    """C-CURVE-1 and C-SIG-1: P-256 and K-256 alike, ECDSA over SHA-256 of the bytes."""
    message = b"the DAG-CBOR bytes of an operation"
    did_key, signature = signed(message)
    assert parse_did_key(did_key).curve in (Curve.P256, Curve.K256)
    assert verify(did_key, message, signature)
    assert not verify(did_key, message + b"!", signature)  # over these bytes, no others
    # C-SIG-1: the hash is SHA-256 of the message, not the message itself nor another hash
    assert not verify(did_key, hashlib.sha256(message).digest(), signature)


def test_crypto_enc_2_the_legacy_form_is_the_uncompressed_point_without_multicodec() -> None:
    """CRYPTO-ENC-2: `z` + base58btc(uncompressed point), no multicodec prefix."""
    key = parse_did_key("did:key:zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF")
    legacy = "z" + b58encode(key.uncompressed)
    assert len(key.uncompressed) == 65 and key.uncompressed[0] == 4
    assert parse_legacy_multibase(Curve.K256, legacy) == key
    with pytest.raises(errors.AtwhoisError):  # a multikey is no legacy value: it has a prefix
        parse_legacy_multibase(Curve.K256, key.multikey)


# --- did:plc operations ----------------------------------------------------------------


def test_p_op_3_a_legacy_create_reads_as_the_regular_state() -> None:
    """P-OP-3: a legacy `create`, normalized as the reference implementation does."""
    op = {
        "type": "create",
        "signingKey": "did:key:zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF",
        "recoveryKey": "did:key:zDnaembgSGUhZULN2Caob4HLJPaxBh92N7rtH21TErzqf8HQo",
        "handle": "dan.bsky.social",
        "service": "bsky.social",
        "prev": None,
        "sig": "x",
    }
    state = parse_operation(op).state
    assert state is not None
    assert state.rotation_keys == (op["recoveryKey"], op["signingKey"])  # this order
    assert state.verification_methods == (("atproto", op["signingKey"]),)
    assert state.also_known_as == ("at://dan.bsky.social",)
    assert state.service("atproto_pds") == ("AtprotoPersonalDataServer", "https://bsky.social")
    with pytest.raises(errors.AtwhoisError, match="prev: null"):  # a genesis only
        parse_operation({**op, "prev": "bafyreib"})


def test_p_state_1_and_p_op_4_the_state_an_operation_sets() -> None:
    """P-STATE-1 and P-OP-4: a state is its rotation keys in order, its methods by name,
    its aliases and its services by name; a method may be any did:key (an Ed25519 key
    fails nothing, and adds no context to the document), while only a K-256 or P-256
    rotation key can sign."""
    op = {
        "type": "plc_operation",
        "rotationKeys": ["did:key:zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF", ED25519],
        "verificationMethods": {"atproto": ED25519, "other": ED25519},
        "alsoKnownAs": ["at://alice.example.com"],
        "services": {"atproto_pds": {"type": "AtprotoPersonalDataServer", "endpoint": "https://p"}},
        "prev": None,
        "sig": "x",
    }
    state = parse_operation(op).state
    assert state is not None
    assert state.rotation_keys == tuple(op["rotationKeys"])
    assert state.method("other") == ED25519 and state.also_known_as == ("at://alice.example.com",)
    assert state.service("atproto_pds") == ("AtprotoPersonalDataServer", "https://p")
    built = build_document(DID, state)
    assert [m["publicKeyMultibase"] for m in built["verificationMethod"]] == [ED25519[8:]] * 2
    assert built["@context"] == [
        "https://www.w3.org/ns/did/v1",
        "https://w3id.org/security/multikey/v1",
    ]
    assert not verify(ED25519, b"anything", bytes(64))  # no curve of ours: it signs nothing


# --- DID syntax and documents ----------------------------------------------------------


def test_d_syn_8_three_failures_stay_apart() -> None:
    """D-SYN-8: invalid syntax, an unsupported method, a DID that did not resolve."""
    with pytest.raises(errors.InvalidDid) as bad:
        syntax.parse_lookup("did:PLC:abc", dev=False)
    with pytest.raises(errors.UnsupportedDidMethod) as unsupported:
        syntax.parse_lookup("did:key:zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF", dev=False)
    assert not isinstance(bad.value, errors.UnsupportedDidMethod)
    assert not isinstance(unsupported.value, errors.ResolutionError)
    unresolved = NotFound("not registered")  # a supported method that did not resolve
    assert isinstance(unresolved, errors.ResolutionError)
    assert not isinstance(unresolved, errors.InvalidInput)


def test_d_plc_2_the_directory_is_a_setting() -> None:
    """D-PLC-2: `<plc_url>/<did>`, whatever directory is configured."""
    mirror = Config(plc_url="https://plc.mirror.example/")
    assert document_url(DID, mirror) == f"https://plc.mirror.example/{DID}"
    assert document_url(DID, Config()) == f"https://plc.directory/{DID}"


def test_doc_key_4_no_valid_signing_key_is_a_warning_not_a_crash() -> None:
    """DOC-KEY-4: the account is likely broken; said, not raised."""
    bare = {"id": DID, "alsoKnownAs": ["at://alice.example.com"], "verificationMethod": []}
    data = document.extract(DID, bare)
    assert data.signing_key is None and "no_signing_key" in data.warnings
    assert data.declared_handle == "alice.example.com"  # the rest is still read


def test_h_syn_5_the_pattern_is_the_reference_one() -> None:
    """H-SYN-5, with H-SYN-1's length checked apart."""
    reference = (
        r"^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+"
        r"[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$"
    )
    for handle in ("alice.example.com", "a.b", "x--y.com", "1.2.3.com", "-a.com", "a.1com"):
        expected = re.match(reference, handle) is not None
        assert syntax.is_valid_handle(handle) is expected, handle
    long = ".".join(["a" * 63] * 4)  # 255 characters: the pattern matches, H-SYN-1 does not
    assert re.match(reference, long) and not syntax.is_valid_handle(long)


def test_u_2_the_authority_is_required_and_bare() -> None:
    """U-2: no empty authority, no @, no port, no user info, no trailing slash."""
    for uri in (
        "at://",
        "at:///app.bsky.feed.post",
        "at://@alice.example.com",
        "at://alice.example.com:443",
        "at://user@alice.example.com",
        "at://alice.example.com/",
    ):
        with pytest.raises(errors.InvalidIdentifier) as refused:
            syntax.parse_at_uri(uri)
        assert refused.value.rule in ("U-1", "U-2"), uri
    assert syntax.parse_at_uri("at://Alice.Example.com").authority == "alice.example.com"


def test_h_wk_2_an_answer_is_2xx_and_only_the_did() -> None:
    """H-WK-2: 2xx and the DID alone is an answer; 404 absence; any other status fails."""
    for status in (200, 203):
        check_http_response(Response("u", status, b""), "well-known")
    with pytest.raises(NotFound):
        check_http_response(Response("u", 404, b""), "well-known")
    for status in (301, 403, 429, 500):
        with pytest.raises(UpstreamFailure):
            check_http_response(Response("u", status, b""), "well-known")
    assert did_from_well_known(f" {DID}\n".encode()) == DID
    for body in (f"did={DID}".encode(), f'{{"did": "{DID}"}}'.encode(), f"{DID} extra".encode()):
        with pytest.raises(errors.InvalidData):
            did_from_well_known(body)


# --- the cache ---------------------------------------------------------------------------


def test_h_cache_3_a_verified_answer_can_be_kept_under_ten_minutes() -> None:
    """H-CACHE-3: the lifetimes are settings; a sign-in deployment sets `ttl_verified` under 600 s
    and the policy keeps verified answers no longer than that."""
    policy = _policy(dataclasses.replace(Values(), ttl_verified="300:540"))
    assert policy.lifetime(Kind.VERIFIED) == Lifetime(300, 540) and 540 < 600
    assert Policy().lifetime(Kind.VERIFIED).fresh >= 600  # the default is not for sign-in


# --- the resolver's steps, on injected DNS and HTTP ----------------------------------------


class _RecordingDns:
    def __init__(self, records: list[list[bytes]]) -> None:
        self.records = records
        self.asked: list[str] = []

    async def txt(self, name: str) -> list[list[bytes]]:
        self.asked.append(name)
        return self.records


class _RecordingWeb:
    def __init__(self, answers: dict[str, Response | Exception]) -> None:
        self.answers = answers
        self.asked: list[dict[str, Any]] = []

    async def get(self, url: str, **options: Any) -> Response:
        self.asked.append({"url": url, **options})
        answer = self.answers.get(url, Response(url, 404, b""))
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def aclose(self) -> None:
        pass


async def test_h_dns_1_h_res_1_h_wk_1_h_wk_6_h_wk_7_what_a_handle_lookup_asks() -> None:
    """Both methods are asked (H-RES-1): TXT at `_atproto.` + the lowered handle (H-DNS-1),
    and `https://<handle>/.well-known/atproto-did` (H-WK-1) with the 2,048-byte body cap
    (H-WK-7) and the configured redirect cap (H-WK-6)."""
    config = Config(max_redirects=3)
    dns = _RecordingDns([[f"did={DID}".encode()]])
    url = "https://alice.example.com" + WELL_KNOWN_PATH
    web = _RecordingWeb({url: Response(url, 200, DID.encode())})
    resolver = Resolver(config, dns=dns, web=web, plc=_RecordingWeb({}))  # type: ignore[arg-type]
    found = await resolver.resolve_handle(syntax.parse_lookup("Alice.Example.COM", dev=False).value)
    assert dns.asked == ["_atproto.alice.example.com"]
    assert [(a["url"], a["max_bytes"], a["max_redirects"]) for a in web.asked] == [
        (url, WELL_KNOWN_MAX_BYTES, 3)
    ]
    assert WELL_KNOWN_MAX_BYTES == 2048
    assert found.dns.outcome is Outcome.OK and found.https.outcome is Outcome.OK


async def test_h_wk_6_the_default_redirect_cap_is_the_one_the_spec_chose() -> None:
    """The spec states its choice in words; a default that drifted from it (5 → 50) must fail
    here, without a network, where `make mutate` runs."""
    chosen = re.search(r"\*\*H-WK-6\*\*.*?\*\*choice\*\*: (\d+), `max_redirects`", SPEC, re.S)
    assert chosen is not None
    url = "https://alice.example.com" + WELL_KNOWN_PATH
    web = _RecordingWeb({url: Response(url, 200, DID.encode())})
    resolver = Resolver(Config(), dns=_RecordingDns([[]]), web=web, plc=_RecordingWeb({}))  # type: ignore[arg-type]
    await resolver.resolve_handle(syntax.parse_lookup("alice.example.com", dev=False).value)
    assert [a["max_redirects"] for a in web.asked] == [int(chosen.group(1))]


# --- with --verify-plc, a log that cannot be read ------------------------------------------


def test_with_plc_log_a_failed_log_fetch_is_unavailable_whatever_the_document_said() -> None:
    """P-AUDIT-1 asked for and not done is no verdict: unavailable, never the directory's."""
    for status in Status:
        assert with_plc_log(status, Step.FAILED) is Status.UNAVAILABLE, status


async def test_a_verify_plc_lookup_whose_log_times_out_is_unavailable() -> None:
    """The directory serves the document, its `/log/audit` does not answer in time: the
    lookup asked to verify the log could not, which is a transient failure, never the
    directory's word standing in for it."""
    key = Key("with_plc_log")
    genesis = key.sign(plc_operation(None, [key], ["at://alice.example.com"]))
    did = did_of_genesis(dag_cbor(genesis))
    state = parse_operation(genesis).state
    assert state is not None
    body = json.dumps(build_document(did, state)).encode()
    base = "https://plc.example"
    plc = _RecordingWeb(
        {
            f"{base}/{did}": Response(f"{base}/{did}", 200, body),
            f"{base}/{did}/log/audit": UpstreamTimeout("the audit log took too long"),
        }
    )
    config = Config(plc_url=base, verify_plc=True)
    resolver = Resolver(config, dns=_RecordingDns([]), web=_RecordingWeb({}), plc=plc)  # type: ignore[arg-type]
    identity = await resolver.lookup(did)
    assert identity.did_doc.outcome is Outcome.OK
    assert identity.status is Status.UNAVAILABLE


def test_d_web_3_and_d_web_4_where_a_did_web_document_is() -> None:
    """D-WEB-4: `https://<host>/.well-known/did.json`; D-WEB-3: http on localhost, with its
    port, in development only."""
    assert document_url("did:web:example.com", Config()) == (
        "https://example.com/.well-known/did.json"
    )
    dev = Config(dev=True)
    assert document_url("did:web:localhost%3A8080", dev) == (
        "http://localhost:8080/.well-known/did.json"
    )
    assert document_url("did:web:localhost", dev) == "http://localhost/.well-known/did.json"
    with pytest.raises(errors.InvalidInput):
        document_url("did:web:localhost%3A8080", Config())


def test_a_mirrors_provenance_is_read_as_evidence_and_only_its_known_fields() -> None:
    def note(header: str | None) -> str | None:
        return mirror_note(Response("u", 200, b"", provenance=header))

    assert note(None) is None and note("upstream=https://plc.directory") is None
    assert note("verified; upstream=https://plc.directory; behind=1.5s") == (
        "verified PLC mirror of https://plc.directory (1.5s behind)"
    )
    assert (
        note("verified; upstream=x; behind=backfilling") == "verified PLC mirror of x (backfilling)"
    )
    assert note("verified") == "verified PLC mirror of ? (? behind)"
    spoofed = note("verified; upstream=https://a.example\x1b[31m; behind=" + "9" * 100)
    assert spoofed is not None and "\x1b" not in spoofed and len(spoofed) < 120


# --- the rules' edges that a vector does not reach -----------------------------------------


def test_p_doc_1_the_reference_servers_shape_of_a_document() -> None:
    """P-DOC-1 as the TypeScript reference server shapes it (`plc_mirror_profile =
    reference`): legacy key types carrying the uncompressed point, relative ids, no
    multikey context; a key of no known curve keeps its multikey form."""
    k256 = "did:key:zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF"
    p256 = "did:key:zDnaembgSGUhZULN2Caob4HLJPaxBh92N7rtH21TErzqf8HQo"
    op = {
        "type": "plc_operation",
        "rotationKeys": [k256],
        "verificationMethods": {"atproto": k256, "label": p256, "other": ED25519},
        "alsoKnownAs": ["at://alice.example.com"],
        "services": {},
        "prev": None,
        "sig": "x",
    }
    state = parse_operation(op).state
    assert state is not None
    built = build_document(DID, state, legacy_keys=True)
    assert built["@context"] == [
        "https://www.w3.org/ns/did/v1",
        "https://w3id.org/security/suites/secp256k1-2019/v1",
        "https://w3id.org/security/suites/ecdsa-2019/v1",
    ]
    atproto, label, other = built["verificationMethod"]
    assert atproto == {
        "id": "#atproto",
        "type": "EcdsaSecp256k1VerificationKey2019",
        "controller": DID,
        "publicKeyMultibase": "z" + b58encode(parse_did_key(k256).uncompressed),
    }
    assert (label["id"], label["type"]) == ("#label", "EcdsaSecp256r1VerificationKey2019")
    assert label["publicKeyMultibase"] == "z" + b58encode(parse_did_key(p256).uncompressed)
    assert other == {
        "id": f"{DID}#other",
        "type": "Multikey",
        "controller": DID,
        "publicKeyMultibase": ED25519.removeprefix("did:key:"),
    }


def test_c_sig_2_and_c_sig_4_a_refused_signature_names_the_rule_it_breaks() -> None:
    """A signature no key verifies as it is: DER where r||s belongs (C-SIG-4), high-S that
    would verify as low-S (C-SIG-2), or neither (P-SIG-5), with the message that says so."""
    message = b"an operation's unsigned bytes"
    private = coincurve.PrivateKey(hashlib.sha256(b"why_unverified").digest())
    key = PublicKey(Curve.K256, private.public_key.format()).did_key
    compact = private.sign_recoverable(message)[:64]
    r, s = int.from_bytes(compact[:32], "big"), int.from_bytes(compact[32:], "big")
    order = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
    high_s = compact[:32] + (order - s).to_bytes(32, "big")
    der = private.sign(message)  # coincurve signs DER, low-S
    assert why_unverified((ED25519, key), message, der) == (
        "C-SIG-4",
        "the signature is DER-encoded, not r||s",
    )
    assert why_unverified((ED25519, key), message, high_s) == (
        "C-SIG-2",
        "the signature is high-S (s > n/2)",
    )
    stranger = PublicKey(Curve.K256, coincurve.PrivateKey().public_key.format()).did_key
    for signature in (compact, high_s, der):
        assert why_unverified((stranger,), message, signature) == (
            "P-SIG-5",
            "no allowed rotation key verifies the signature",
        )
    assert r > 0 and verify(key, message, compact)  # the signature itself is sound


def test_p_api_1_the_directorys_statuses_and_what_they_say() -> None:
    """2xx only is an answer (300 is not); a 404 whose body is no object is absence;
    every refusal says what happened."""
    check_plc_response(Response("u", 299, b""), DID)
    for status in (300, 304):
        with pytest.raises(UpstreamFailure, match=f"HTTP {status}"):
            check_plc_response(Response("u", status, b""), DID)
    with pytest.raises(NotFound, match="is not registered in the PLC directory"):
        check_plc_response(Response("u", 404, b'["not", "an", "object"]'), DID)
    with pytest.raises(NotFound, match=DID):
        check_plc_response(Response("u", 404, b"{}"), DID)
    with pytest.raises(errors.DidDeactivated, match=f"{DID} is deactivated.*HTTP 410"):
        check_plc_response(Response("u", 410, b"{}"), DID)


def test_p_api_2_a_mirror_that_may_be_behind_cannot_confirm_an_absence() -> None:
    """A 404 from a mirror that had not read its upstream since the question came is a
    transient answer (a DID created meanwhile is not known yet); from one that had
    (`current=yes`), or from the directory itself, it is absence. A tombstone is one
    whatever the mirror's currency (the DID existed: a mirror never invents one)."""
    behind = "verified; upstream=https://plc.directory; behind=2.0s; cursor=-; current=no"
    current = behind.replace("current=no", "current=yes")
    older = "verified; upstream=https://plc.directory; behind=2.0s; cursor=-"  # says nothing
    for header in (behind, older):
        with pytest.raises(errors.UnconfirmedAbsence, match=r"not known yet \[P-API-2\]"):
            check_plc_response(Response("u", 404, b"{}", header), DID)
    with pytest.raises(NotFound):
        check_plc_response(Response("u", 404, b"{}", current), DID)
    with pytest.raises(NotFound):
        check_plc_response(Response("u", 404, b"{}"), DID)
    with pytest.raises(errors.DidDeactivated):
        check_plc_response(Response("u", 410, b"{}", behind), DID)
    failed = Evidence.failure(errors.UnconfirmedAbsence("not yet"), 1.0, "u")
    assert failed.outcome is Outcome.FAILED and not failed.confirmed  # never cached as absence


def test_p_api_2_a_mirror_says_how_old_its_view_is_and_a_bad_age_is_no_age() -> None:
    """What a mirror following another counts itself complete from: the directory's own
    answers (no header) are its view now; an atwhois mirror's `complete=` is read as a
    number of seconds; anything else in it (a mirror backfilling, one too old to say, a
    hostile header) is a view of unknown age, which confirms nothing."""
    header = "verified; upstream=https://plc.directory; behind=2.0s; cursor=-; current=no"
    assert view_age(None) == 0.0
    assert view_age(header + "; complete=4.3s") == 4.3
    assert view_age(header + "; complete=0.0s") == 0.0
    for age in ("none", "", "-1.0s", "nans", "infs", "1e30s", "4.3", "4.3ms", "0x10s"):
        assert view_age(f"{header}; complete={age}") is None, age
    assert view_age(header) is None  # an older mirror says nothing of its view
    state = MirrorState("https://plc.directory", caught_up_at=time.time())
    assert state.provenance(time.time()).endswith("; complete=none")  # not complete yet
    state.complete_as_of = time.time() - 4.21
    age = view_age(state.provenance(time.time()))
    assert age is not None and 4.21 <= age <= 4.4  # rounded up, never younger than it is


def test_d_syn_9_and_d_web_3_what_a_lookup_takes_in_development() -> None:
    with pytest.raises(errors.UnsupportedDidMethod) as refused:
        syntax.parse_lookup("did:example:123", dev=True)
    assert refused.value.rule == "D-SYN-9" and "did:example is not supported" in str(refused.value)
    assert syntax.parse_lookup("did:web:localhost%3A8080", dev=True).value == (
        "did:web:localhost%3A8080"
    )
    assert syntax.parse_lookup("did:web:pds.test", dev=True).value == "did:web:pds.test"
    for did in ("did:web:localhost%3A8080", "did:web:pds.test"):
        with pytest.raises(errors.InvalidInput):
            syntax.parse_lookup(did, dev=False)
    assert syntax.parse_lookup("alice.test", dev=True).value == "alice.test"


def test_with_plc_log_no_document_and_no_log_is_absence_not_a_bad_log() -> None:
    """P-AUDIT-1 where there is nothing to replay: the directory has no document and no
    log for the DID, which is absent either way; a log absent beside a live document is a
    directory contradicting itself."""
    assert with_plc_log(Status.DID_NOT_FOUND, Step.NOT_FOUND) is Status.DID_NOT_FOUND
    assert with_plc_log(Status.VERIFIED, Step.NOT_FOUND) is Status.PLC_LOG_INVALID


def test_d_web_4_the_statuses_of_a_did_web_document_or_a_well_known_answer() -> None:
    """D-WEB-4 and H-WK-2: 404 and 410 are absence, 300 and 411 are failures, and each
    says which fetch and which status."""
    for status in (404, 410):
        with pytest.raises(NotFound, match=f"did.json: HTTP {status}"):
            check_http_response(Response("u", status, b""), "did.json")
    for status in (300, 411):
        with pytest.raises(UpstreamFailure, match=f"did.json: HTTP {status}"):
            check_http_response(Response("u", status, b""), "did.json")


def test_h_tld_1_the_last_label_decides_whatever_comes_before() -> None:
    for handle in ("a.b.alt", "deep.sub.domain.onion", "x.example.internal"):
        with pytest.raises(errors.ReservedHandle) as refused:
            syntax.check_resolvable_handle(handle, allow_test_tld=True)
        assert refused.value.rule == "H-TLD-1"
    syntax.check_resolvable_handle("alt.example.com", allow_test_tld=False)
