"""The rules of inter-service auth tokens (docs/spec.md: SA-*), as plain functions over a
token's text, the time and the issuer's document: each refusal names its rule."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import coincurve
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from atwhois.resolver.keys import Curve, PublicKey
from atwhois.resolver.service_auth import (
    Expected,
    TokenRefused,
    check_claims,
    check_signature,
    issuer_key,
    mint,
    parse_token,
)

ISSUER = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
OTHER_DID = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
# The cases below are made when the module is read: times this far off stay off however
# long the suite takes to reach them.
DAYS = 10 * 86400
AUDIENCE = "did:web:feed.example#bsky_fg"
K256 = coincurve.PrivateKey(b"\x01" * 32)
OTHER = coincurve.PrivateKey(b"\x02" * 32)
N_K256 = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def claims(**changes: Any) -> dict[str, Any]:
    """A token's claims, valid for the longest lifetime allowed (an hour): the cases below
    are made when the module is read, and checked minutes later in a whole run."""
    now = int(time.time())
    base = {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 3600, "jti": "n0nce"}
    return {k: v for k, v in {**base, **changes}.items() if v is not None}


def document(**keys: PublicKey) -> dict[str, Any]:
    methods = [
        {
            "id": f"{ISSUER}#{key_id}",
            "type": "Multikey",
            "controller": ISSUER,
            "publicKeyMultibase": key.multikey,
        }
        for key_id, key in keys.items()
    ]
    return {"id": ISSUER, "verificationMethod": methods}


def public(key: coincurve.PrivateKey) -> PublicKey:
    return PublicKey(Curve.K256, key.public_key.format())


def refusal(
    text: str, expected: Expected | None = None, doc: Any = None, now: float | None = None
) -> tuple[str, str]:
    """The rule `text` is refused by and why, as a receiver of `expected` checks it all."""
    try:
        token = parse_token(text)
        check_claims(token, expected or Expected(AUDIENCE), time.time() if now is None else now)
        check_signature(token, issuer_key(token, doc or document(atproto=public(K256))))
    except TokenRefused as err:
        assert str(err) == f"{err.reason} [{err.rule}]"
        return err.rule, err.reason
    return "valid", ""


def refused(text: str, expected: Expected | None = None, doc: Any = None) -> str:
    """The rule `text` is refused by."""
    return refusal(text, expected, doc)[0]


def test_a_token_as_a_pds_mints_one_is_valid() -> None:
    assert refused(mint(K256, claims())) == "valid"
    assert refused(mint(K256, claims(lxm="app.bsky.feed.getFeedSkeleton")), Expected(
        AUDIENCE, "app.bsky.feed.getFeedSkeleton"
    )) == "valid"  # fmt: skip


def test_a_p256_token_is_valid_under_its_key() -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    point = private.public_key().public_bytes(Encoding.X962, PublicFormat.CompressedPoint)
    header = b64(json.dumps({"typ": "JWT", "alg": "ES256"}).encode())
    signed = f"{header}.{b64(json.dumps(claims()).encode())}"
    r, s = decode_dss_signature(private.sign(signed.encode(), ec.ECDSA(hashes.SHA256())))
    n = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
    s = min(s, n - s)  # C-SIG-2: low-S
    token = f"{signed}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"
    assert refused(token, doc=document(atproto=PublicKey(Curve.P256, point))) == "valid"
    assert refused(token) == "SA-ALG-2"  # ES256 under the document's K-256 key


def _with_signature(token: str, signature: bytes) -> str:
    return token.rpartition(".")[0] + "." + b64(signature)


def _signature(token: str) -> bytes:
    text = token.rpartition(".")[2]
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.mark.parametrize(
    ("token", "expected", "rule", "says"),
    [
        pytest.param(
            _with_signature(
                mint(K256, claims()),
                bytes([_signature(mint(K256, claims()))[0] ^ 1])
                + _signature(mint(K256, claims()))[1:],
            ),
            None,
            "SA-SIG-1",
            "the signature does not verify under #atproto",
            id="a flipped signature byte",
        ),
        pytest.param(
            mint(OTHER, claims()),
            None,
            "SA-SIG-1",
            "the signature does not verify under #atproto",
            id="another account's key",
        ),
        pytest.param(
            mint(K256, claims(exp=int(time.time()) - DAYS, iat=int(time.time()) - DAYS - 60)),
            None,
            "SA-TIME-1",
            "expired 86",  # ten days and the seconds since the token was made
            id="exp in the past",
        ),
        pytest.param(
            mint(K256, claims(iat=int(time.time()) + DAYS, exp=int(time.time()) + DAYS + 60)),
            None,
            "SA-TIME-1",
            "issued 86",  # ten days less the seconds since the token was made
            id="iat in the future beyond the skew",
        ),
        pytest.param(
            mint(K256, claims(exp=int(time.time()) + 7200)),
            None,
            "SA-TIME-2",
            "a lifetime of 7200 s (at most 3600)",
            id="a lifetime over an hour",
        ),
        pytest.param(
            mint(K256, claims(exp=int(time.time()) - 1, iat=int(time.time()))),
            None,
            "SA-TIME-2",
            "exp is not after iat",
            id="exp before iat",
        ),
        pytest.param(
            mint(K256, claims(aud="did:web:other.example#bsky_fg")),
            None,
            "SA-AUD-1",
            "for did:web:other.example#bsky_fg, not did:web:feed.example#bsky_fg",
            id="another audience",
        ),
        pytest.param(
            mint(K256, claims(aud="did:web:feed.example#bsky_labeler")),
            None,
            "SA-AUD-1",
            "for did:web:feed.example#bsky_labeler",
            id="another service of the receiver",
        ),
        pytest.param(
            mint(K256, claims(aud="did:web:feed.example")),
            Expected(AUDIENCE, bare_audience=False),
            "SA-AUD-1",
            "a bare audience did:web:feed.example, not",
            id="a bare audience, the legacy form not allowed",
        ),
        pytest.param(
            mint(K256, claims(aud=AUDIENCE)),
            Expected("did:web:feed.example"),
            "SA-AUD-1",
            "for did:web:feed.example#bsky_fg, not did:web:feed.example",
            id="a service where the receiver expects none",
        ),
        pytest.param(
            mint(K256, claims(lxm="com.atproto.repo.createRecord")),
            Expected(AUDIENCE, "app.bsky.feed.getFeedSkeleton"),
            "SA-LXM-1",
            "the token is for com.atproto.repo.createRecord, not app.bsky.feed.getFeedSkeleton",
            id="another method",
        ),
        pytest.param(
            mint(K256, claims()),
            Expected(AUDIENCE, "app.bsky.feed.getFeedSkeleton"),
            "SA-LXM-1",
            "the token is for no method, not app.bsky.feed.getFeedSkeleton",
            id="no method where one is required",
        ),
        pytest.param(
            mint(K256, claims(lxm="app.bsky.feed.getFeedSkeleton")),
            None,
            "SA-LXM-1",
            "the token is for app.bsky.feed.getFeedSkeleton; no method given",
            id="a method the receiver named none for",
        ),
        pytest.param(
            mint(K256, claims(), kid="#atproto_label"),
            None,
            "SA-KID-1",
            "key #atproto_label is not one accepted (#atproto)",
            id="kid naming a key the receiver does not accept",
        ),
        pytest.param(
            mint(K256, claims(), kid="did:plc:aaaaaaaaaaaaaaaaaaaaaaaa#atproto"),
            None,
            "SA-KID-1",
            f"kid '{OTHER_DID}#atproto' is not #key or {ISSUER}#key",
            id="kid of another DID",
        ),
        pytest.param(
            mint(K256, claims(iss=ISSUER + "#atproto_labeler"), kid="#atproto"),
            None,
            "SA-KID-1",
            "kid #atproto and iss #atproto_labeler name two keys",
            id="kid and iss service naming two keys",
        ),
        pytest.param(
            mint(K256, claims(iss=ISSUER + "#bsky_fg")),
            None,
            "SA-ISS-1",
            "iss names service 'bsky_fg', which has no key",
            id="iss with a service that has no key",
        ),
        pytest.param(
            mint(K256, claims(iss="alice.example.com")),
            None,
            "SA-ISS-1",
            "iss 'alice.example.com' is not a DID",
            id="iss not a DID",
        ),
        pytest.param(
            mint(K256, claims(), alg="ES256"),
            None,
            "SA-ALG-2",
            "ES256 for a k256 key",
            id="alg not matching the key",
        ),
        pytest.param(
            mint(K256, claims(), alg="none"),
            None,
            "SA-ALG-1",
            "algorithm 'none' (ES256K or ES256)",
            id="alg none",
        ),
        pytest.param(
            mint(K256, claims(), alg="HS256"), None, "SA-ALG-1", "algorithm 'HS256'", id="alg HS256"
        ),
        pytest.param(
            mint(K256, claims(), typ="at+jwt"),
            None,
            "SA-TYP-1",
            "typ 'at+jwt' is not JWT, a service token's",
            id="an OAuth access token",
        ),
        pytest.param(
            mint(K256, claims(jti=None)),
            None,
            "SA-JTI-1",
            "jti is not a string of 1 to 256 characters",
            id="no jti",
        ),
        pytest.param(
            mint(K256, claims(exp="soon")),
            None,
            "SA-TIME-1",
            "exp is not a time in whole seconds",
            id="exp not a number",
        ),
        pytest.param(
            mint(K256, claims(lxm="not an nsid")),
            None,
            "SA-LXM-1",
            "lxm 'not an nsid' is not an NSID",
            id="lxm not an NSID",
        ),
        pytest.param(
            "not-a-jwt", None, "SA-JWT-1", "1 segments, not header.claims.signature", id="not a JWT"
        ),
        pytest.param("a.b.c.d", None, "SA-JWT-1", "4 segments", id="four segments"),
        pytest.param(
            b64(b"[1]") + "." + b64(b"{}") + "." + b64(bytes(64)),
            None,
            "SA-JWT-1",
            "the header is not a JSON object",
            id="a header that is no object",
        ),
        pytest.param(
            b64(b'{"alg":"ES256K","alg":"none"}') + ".e30." + b64(bytes(64)),
            None,
            "SA-JWT-1",
            "the header is not JSON: duplicate key 'alg'",
            id="a header naming alg twice",
        ),
        pytest.param(
            mint(K256, claims()) + "==",
            None,
            "SA-JWT-2",
            "signature has '=' padding",
            id="padded signature",
        ),
        pytest.param(
            _with_signature(mint(K256, claims()), bytes(70)),
            None,
            "SA-JWT-2",
            "a signature of 70 bytes, not r||s 64",
            id="a 70-byte signature",
        ),
        pytest.param(
            "x" * 9000,
            None,
            "SA-JWT-1",
            "a token of 9000 characters (at most 8192)",
            id="a token over 8 KiB",
        ),
    ],
)
def test_each_refusal_names_its_rule(
    token: str, expected: Expected | None, rule: str, says: str
) -> None:
    named, reason = refusal(token, expected)
    assert named == rule and reason.startswith(says), reason


def test_a_high_s_twin_is_refused_naming_low_s() -> None:
    """The reference verifier accepts it (allowMalleableSig); C-SIG-2 does not."""
    token = mint(K256, claims())
    signature = _signature(token)
    s = int.from_bytes(signature[32:], "big")
    twin = _with_signature(token, signature[:32] + (N_K256 - s).to_bytes(32, "big"))
    assert refused(token) == "valid"
    assert refusal(twin) == ("C-SIG-2", "the signature is high-S (s > n/2)")


def test_a_bare_audience_is_the_legacy_form_allowed_by_default() -> None:
    token = mint(K256, claims(aud="did:web:feed.example"))
    assert refused(token) == "valid"
    assert refused(token, Expected("did:web:feed.example")) == "valid"


def test_the_key_is_the_one_the_token_names() -> None:
    """SA-KID-1/2: `kid` (or the deprecated iss#atproto_labeler) picks the document's
    `#atproto_label`; a document without it refuses the token."""
    label = coincurve.PrivateKey(b"\x03" * 32)
    doc = document(atproto=public(K256), atproto_label=public(label))
    labels = Expected(AUDIENCE, key_ids=("atproto_label",))
    assert refused(mint(label, claims(), kid="#atproto_label"), labels, doc) == "valid"
    assert refused(mint(label, claims(), kid=f"{ISSUER}#atproto_label"), labels, doc) == "valid"
    legacy = mint(label, claims(iss=ISSUER + "#atproto_labeler"))
    assert refused(legacy, labels, doc) == "valid"
    assert refused(mint(K256, claims(), kid="#atproto_label"), labels, doc) == "SA-SIG-1"
    without = document(atproto=public(K256))
    assert refusal(mint(label, claims(), kid="#atproto_label"), labels, without) == (
        "SA-KID-2",
        "the issuer's document has no valid #atproto_label key",
    )
    two = Expected(AUDIENCE, key_ids=("atproto", "atproto_label"))
    assert refusal(mint(K256, claims(), kid="#other"), two) == (
        "SA-KID-1",
        "key #other is not one accepted (#atproto, #atproto_label)",
    )


def test_the_clock_skew_is_allowed_and_bounded() -> None:
    now = int(time.time())
    just_expired = mint(K256, claims(iat=now - 70, exp=now - 10))
    assert refused(just_expired) == "valid"  # 10 s past exp, within 30 s of skew
    assert refused(just_expired, Expected(AUDIENCE, skew=5)) == "SA-TIME-1"


def test_the_time_rules_hold_to_the_second() -> None:
    """SA-TIME-1/2 at their edges, by a clock given (not waited for)."""
    at = 1_800_000_000
    one_hour = mint(K256, claims(iat=at, exp=at + 3600))
    assert refusal(one_hour, now=at)[0] == "valid"  # a lifetime of an hour is allowed
    assert refusal(mint(K256, claims(iat=at, exp=at + 3601)), now=at) == (
        "SA-TIME-2",
        "a lifetime of 3601 s (at most 3600)",
    )
    assert refusal(mint(K256, claims(iat=at, exp=at)), now=at)[0] == "SA-TIME-2"
    assert refusal(one_hour, now=at + 3600 + 30)[0] == "valid"  # the skew's last second
    assert refusal(one_hour, now=at + 3600 + 31) == ("SA-TIME-1", "expired 31 s ago")
    assert refusal(one_hour, now=at - 30)[0] == "valid"
    assert refusal(one_hour, now=at - 31) == ("SA-TIME-1", "issued 31 s in the future")


def test_the_forms_of_the_claims_hold_at_their_edges() -> None:
    assert parse_token(mint(K256, claims(iat=0, exp=2**53 - 1))).expires_at == 2**53 - 1
    for bad in (2**53, -1, 1.5, True):
        with pytest.raises(TokenRefused) as refusing:
            parse_token(mint(K256, claims(exp=bad)))
        assert refusing.value.rule == "SA-TIME-1"
    assert parse_token(mint(K256, claims(jti="n"))).nonce == "n"
    assert parse_token(mint(K256, claims(jti="n" * 256))).nonce == "n" * 256
    for nonce in ("", "n" * 257, 7):
        assert refused(mint(K256, claims(jti=nonce))) == "SA-JTI-1"
    token = mint(K256, claims())
    assert parse_token(token).signed == token.rpartition(".")[0].encode()
    for missing, rule, says in (("iss", "SA-ISS-1", "no iss"), ("aud", "SA-AUD-1", "no aud")):
        assert refusal(mint(K256, claims(**{missing: None}))) == (rule, says)
    assert refusal(mint(K256, claims(), kid=7)) == ("SA-KID-1", "kid is not a string")
    assert refusal(mint(K256, claims(aud=7))) == ("SA-AUD-1", "no aud")
    assert refusal(mint(K256, claims(aud=""))) == ("SA-AUD-1", "no aud")
    head, _, signature = mint(K256, claims()).split(".")
    assert refusal(f"{head}.e30=.{signature}") == ("SA-JWT-1", "claims has '=' padding")
    assert refusal(mint(K256, claims(), kid="##atproto"))[0] == "SA-KID-1"


def test_a_token_up_to_the_size_cap_is_read_and_one_past_it_refused() -> None:
    """SA-JWT-1's cap, 8 KiB, at its edge: tokens grown a character of padding at a time."""
    sizes: dict[int, str] = {}
    pad = 5800
    while not sizes or max(sizes) <= 8192:
        token = mint(K256, {**claims(), "pad": "x" * pad})
        sizes[len(token)] = token
        pad += 1
    fitting = max(size for size in sizes if size <= 8192)
    assert fitting > 8180 and refused(sizes[fitting]) == "valid"
    over = min(size for size in sizes if size > 8192)
    assert refusal(sizes[over]) == (
        "SA-JWT-1",
        f"a token of {over} characters (at most 8192)",
    )


def test_a_pds_style_token_says_jwt_and_es256k() -> None:
    header = mint(K256, claims()).split(".")[0]
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"typ": "JWT", "alg": "ES256K"}


def test_a_verification_reads_back_from_its_json() -> None:
    from atwhois.resolver.service_auth import Verification

    full = Verification(
        "invalid",
        "SA-SIG-1",
        "why",
        issuer=ISSUER,
        declared_handle="alice.example.com",
        key_id="atproto",
        method="app.bsky.feed.getFeedSkeleton",
        expires_at=123,
        document_checked_at="2026-12-05T00:00:00Z",
        refreshed=True,
        replay="shared",
    )
    shown = full.to_json()
    assert shown["valid"] is False and shown["document"] == {
        "checked_at": "2026-12-05T00:00:00Z",
        "refreshed": True,
    }
    assert shown["replay"] == {"scope": "shared", "warning": None}
    assert (shown["handle"], shown["handle_checked"]) == (None, False)  # SA-ISS-2: not checked
    assert Verification.from_json(json.loads(json.dumps(shown))) == full
    assert Verification.from_json({"outcome": "valid"}) == Verification("valid")
    assert Verification("valid").valid and not Verification("unavailable").valid
