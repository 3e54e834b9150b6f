"""Token forms a receiver must refuse, each naming its rule (docs/spec.md: SA-TYP-1,
SA-CRIT-1, SA-TIME-3, SA-JWT-3), and any JSON in any field of a token: a verdict that
names a rule, never an error of another kind (issue 66: an `alg` that is a list, a lone
surrogate in `jti` with the replay check on, were a 500 and a traceback each)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import coincurve
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atwhois.auth import ServiceAuthVerifier
from atwhois.resolver.keys import Curve, PublicKey
from atwhois.resolver.rules import TAG
from atwhois.resolver.service_auth import (
    Expected,
    TokenRefused,
    check_claims,
    check_signature,
    issuer_key,
    mint,
    parse_token,
)
from atwhois.testing import World
from tests.support.fuzz_inputs import json_values

ISSUER = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
AUDIENCE = "did:web:feed.example#bsky_fg"
K256 = coincurve.PrivateKey(b"\x01" * 32)
AT = 1_800_000_000  # the receiver's clock in these cases


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def claims(**changes: Any) -> dict[str, Any]:
    base = {"iss": ISSUER, "aud": AUDIENCE, "iat": AT, "exp": AT + 60, "jti": "n0nce"}
    return {k: v for k, v in {**base, **changes}.items() if v is not None}


def signed(header: bytes, body: bytes, key: coincurve.PrivateKey = K256) -> str:
    """A token of these very bytes, signed low-S as a PDS signs (`mint` writes JSON)."""
    text = f"{b64(header)}.{b64(body)}"
    return f"{text}.{b64(key.sign_recoverable(text.encode())[:64])}"


HEADER = b'{"typ":"JWT","alg":"ES256K"}'
CLAIMS = json.dumps(claims()).encode()


def refusal(token: str, now: float = AT) -> tuple[str, str]:
    """The rule `token` is refused by and why, through every rule; ("valid", "") if none."""
    document = {
        "id": ISSUER,
        "verificationMethod": [
            {
                "id": f"{ISSUER}#atproto",
                "type": "Multikey",
                "controller": ISSUER,
                "publicKeyMultibase": PublicKey(Curve.K256, K256.public_key.format()).multikey,
            }
        ],
    }
    try:
        parsed = parse_token(token)
        check_claims(parsed, Expected(AUDIENCE), now)
        check_signature(parsed, issuer_key(parsed, document))
    except TokenRefused as err:
        return err.rule, err.reason
    return "valid", ""


def test_the_bytes_as_signed_here_are_a_valid_token() -> None:
    assert refusal(signed(HEADER, CLAIMS)) == ("valid", "")


@pytest.mark.parametrize(
    ("kind", "valid"),
    [
        ("JWT", True),
        ("at+jwt", False),
        ("application/at+jwt", False),  # RFC 7515's long form of the same media type
        ("at+jwt ", False),
        ("AT+JWT", False),
        ("refresh+jwt", False),
        ("dpop+jwt", False),
        ("jwt", False),
        (" JWT", False),
        ("application/jwt", False),
        (None, False),
    ],
)
def test_typ_is_jwt_spelt_exactly(kind: str | None, valid: bool) -> None:
    """SA-TYP-1: the spec's `JWT` only; a spelling that reads as another kind of token
    (an access token under another name) is no service token."""
    token = mint(K256, claims(), typ=kind) if kind else signed(b'{"alg":"ES256K"}', CLAIMS)
    named, reason = refusal(token)
    if valid:
        assert named == "valid"
    else:
        assert named == "SA-TYP-1" and reason.endswith("is not JWT, a service token's"), reason


@pytest.mark.parametrize(
    ("header", "body", "rule", "says"),
    [
        pytest.param(
            HEADER.decode().encode("utf-16"), CLAIMS, "SA-JWT-3", "the header is not UTF-8",
            id="a header in UTF-16 with its BOM",
        ),
        pytest.param(
            HEADER, CLAIMS.decode().encode("utf-16-le"), "SA-JWT-3", "the claims is not UTF-8",
            id="claims in UTF-16 without a BOM",
        ),
        pytest.param(
            HEADER, CLAIMS.decode().encode("utf-32"), "SA-JWT-3", "the claims is not UTF-8",
            id="claims in UTF-32",
        ),
        pytest.param(
            HEADER, b"\xef\xbb\xbf" + CLAIMS, "SA-JWT-3",
            "the claims starts with a byte order mark", id="claims in UTF-8 with a BOM",
        ),
        pytest.param(
            b"\xef\xbb\xbf" + HEADER, CLAIMS, "SA-JWT-3",
            "the header starts with a byte order mark", id="a header with a BOM",
        ),
        pytest.param(
            HEADER, json.dumps(claims(jti="\ud800")).encode(), "SA-JWT-3",
            "the claims holds a lone UTF-16 surrogate", id="an escaped lone surrogate in jti",
        ),
        pytest.param(
            HEADER, CLAIMS.replace(b'"n0nce"', b'"n0\xed\xa0\x80nce"'), "SA-JWT-3",
            "the claims is not UTF-8", id="a surrogate encoded in UTF-8's bytes",
        ),
        pytest.param(
            HEADER, json.dumps({**claims(), "\udc00": 1}).encode(), "SA-JWT-3",
            "the claims holds a lone UTF-16 surrogate", id="a lone surrogate as a key",
        ),
        pytest.param(
            HEADER, json.dumps({**claims(), "x": [[{"y": "\udfff"}]]}).encode(), "SA-JWT-3",
            "the claims holds a lone UTF-16 surrogate", id="a lone surrogate nested deep",
        ),
        pytest.param(
            HEADER, CLAIMS.replace(b'"n0nce"', b'"n\xff"'), "SA-JWT-3",
            "the claims is not UTF-8", id="a byte that is no UTF-8",
        ),
        pytest.param(
            b'{"typ":"JWT","alg":["ES256K"]}', CLAIMS, "SA-ALG-1", "algorithm \"['ES256K']\"",
            id="alg a list",
        ),
        pytest.param(
            b'{"typ":"JWT","alg":{"ES256K":1}}', CLAIMS, "SA-ALG-1", "algorithm \"{'ES256K': 1}\"",
            id="alg an object",
        ),
        pytest.param(
            b'{"typ":"JWT","alg":"ES256K","crit":["exp"]}', CLAIMS, "SA-CRIT-1",
            "crit names extensions that must be understood", id="crit naming a claim",
        ),
        pytest.param(
            b'{"typ":"JWT","alg":"ES256K","crit":[]}', CLAIMS, "SA-CRIT-1",
            "crit names extensions", id="crit empty",
        ),
        pytest.param(
            b'{"typ":"JWT","alg":"ES256K","crit":null}', CLAIMS, "SA-CRIT-1",
            "crit names extensions", id="crit null",
        ),
        pytest.param(
            HEADER, json.dumps(claims(nbf=AT + 3600)).encode(), "SA-TIME-3",
            "not valid before 3600 s from now (nbf)", id="nbf an hour ahead",
        ),
        pytest.param(
            HEADER, json.dumps(claims(nbf="soon")).encode(), "SA-TIME-3",
            "nbf is not a time in whole seconds", id="nbf not a number",
        ),
        pytest.param(
            HEADER, json.dumps(claims(nbf=1.5)).encode(), "SA-TIME-3",
            "nbf is not a time in whole seconds", id="nbf not whole seconds",
        ),
    ],
)  # fmt: skip
def test_each_form_is_refused_naming_its_rule(
    header: bytes, body: bytes, rule: str, says: str
) -> None:
    named, reason = refusal(signed(header, body))
    assert named == rule and reason.startswith(says), reason


def test_nbf_holds_with_the_skew_to_the_second() -> None:
    """SA-TIME-3: a token not valid before a moment within the skew is valid now (clocks
    disagree); a second further is refused; an nbf past is no matter."""
    for nbf, expected in ((AT + 30, "valid"), (AT + 31, "SA-TIME-3"), (AT - 600, "valid")):
        assert refusal(signed(HEADER, json.dumps(claims(nbf=nbf)).encode()))[0] == expected


# Every field a token's reader looks at, with JSON of any kind in its place.
HEADER_FIELDS = ("alg", "typ", "kid", "crit")
CLAIM_FIELDS = ("iss", "aud", "exp", "iat", "nbf", "lxm", "jti")
anything = st.one_of(json_values, st.sampled_from(["\ud800", "\udfff", "", "ES256K", "JWT"]))


@st.composite
def tokens(draw: st.DrawFn, key: coincurve.PrivateKey = K256, iss: str = ISSUER) -> str:
    header: dict[str, Any] = {"typ": "JWT", "alg": "ES256K"}
    body = claims(iss=iss, iat=int(time.time()), exp=int(time.time()) + 60)
    for field in draw(st.lists(st.sampled_from(HEADER_FIELDS + CLAIM_FIELDS), max_size=3)):
        (header if field in HEADER_FIELDS else body)[field] = draw(anything)
    encode = draw(st.sampled_from(["utf-8", "utf-16", "utf-8-sig"]))
    return signed(
        json.dumps(header, ensure_ascii=False).encode(encode, "surrogatepass"),
        json.dumps(body, ensure_ascii=draw(st.booleans())).encode(encode, "surrogatepass"),
        key,
    )


def _classified(outcome: str, rule: str | None) -> bool:
    return (outcome, rule) in (("valid", None), ("unavailable", None)) or (
        outcome == "invalid" and rule is not None and TAG.fullmatch(rule) is not None
    )


@settings(max_examples=200, deadline=None, database=None)
@given(tokens())
def test_any_json_in_any_field_is_refused_by_a_rule_or_valid(token: str) -> None:
    rule, _ = refusal(token, time.time())
    assert rule == "valid" or TAG.fullmatch(rule), rule


@settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_json_in_any_field_gets_a_verdict_with_the_replay_check_on(data: st.DataObject) -> None:
    """Through the verifier, the issuer real (its document resolved, its nonces kept), the
    replay check on: every verdict one of the three, naming a rule when invalid."""
    world = World()
    did = world.add("alice.example.org")
    key = coincurve.PrivateKey(world.accounts[did].secret)
    texts = [data.draw(tokens(key, did)) for _ in range(3)]

    async def verify() -> list[tuple[str, str | None]]:
        async with world.cached() as cached:
            verifier = ServiceAuthVerifier(cached)
            results = [await verifier.verify(t, Expected(AUDIENCE), replay=True) for t in texts]
        return [(r.outcome, r.rule) for r in results]

    for outcome, rule in asyncio.run(verify()):
        assert _classified(outcome, rule), (outcome, rule)
