"""Inter-service auth tokens, the rules (docs/spec.md: SA-*): what a token says, whether its
claims hold for the receiver at a given time, which key of the issuer's document it names,
and whether its signature verifies under that key. Plain functions over the token's text,
the time and the issuer's document; resolving the issuer (and the refresh-once rule of
SA-SIG-2) is `atwhois.auth`'s.

Every refusal is a `TokenRefused` naming its rule, so a caller can say why a token failed
and a test can switch a rule off and see which refusal goes.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

import coincurve

from atwhois.foundation import defaults

from .document import verification_key
from .errors import AtwhoisError
from .keys import Curve, PublicKey
from .plc.signature import BadSignature, high_s, strict_b64url, verify
from .syntax import is_valid_did, is_valid_nsid
from .untrusted import parse_json

MAX_TOKEN = 8 * 1024  # SA-JWT-1: a PDS's token is ~400 characters
MAX_LIFETIME = defaults.TOKEN_LIFETIME  # SA-TIME-2: the longest a PDS grants (lxm-bound)
DEFAULT_SKEW = 30.0  # seconds two clocks may disagree by
MAX_NONCE = 256  # SA-JTI-1
DEFAULT_KEY_ID = "atproto"
ALGORITHMS = {"ES256K": Curve.K256, "ES256": Curve.P256}  # SA-ALG-1/2
KIND = "JWT"  # SA-TYP-1: the one `typ` of a service token, spelt exactly so
_SURROGATE = re.compile("[\ud800-\udfff]")  # SA-JWT-3: half a UTF-16 pair, escaped
SERVICE_KEYS = {"atproto_labeler": "atproto_label"}  # SA-ISS-1: the deprecated iss#service


class TokenRefused(AtwhoisError, ValueError):
    """A token that is not valid for the receiver; `rule` names the rule it breaks."""

    def __init__(self, reason: str, rule: str) -> None:
        super().__init__(f"{reason} [{rule}]")
        self.reason = reason
        self.rule = rule


@dataclass(frozen=True, slots=True)
class Token:
    """A token's parts, each checked for its form (not yet for the receiver)."""

    issuer: str  # the account's DID
    key_id: str  # the verification method that signs: `atproto`, `atproto_label`, …
    audience: str
    expires_at: int
    issued_at: int
    not_before: int | None  # `nbf`, when the token names one
    method: str | None  # `lxm`
    nonce: str  # `jti`
    algorithm: str
    signed: bytes  # `header.claims`, as sent: what the signature covers
    signature: bytes


@dataclass(frozen=True, slots=True)
class Expected:
    """What the receiver accepts."""

    audience: str  # its DID and service: `did:web:feed.example#bsky_fg`
    method: str | None = None  # the NSID the request is for (None: no method named)
    key_ids: tuple[str, ...] = (DEFAULT_KEY_ID,)
    bare_audience: bool = True  # a bare `aud` for `DID#service` (what PDSes mint today)
    skew: float = DEFAULT_SKEW


Outcome = Literal["valid", "invalid", "unavailable"]
# Where the replay check's nonces live: a store other processes share (a SQLite file, a
# Redis server), or this process's memory, which a restart or another process does not see.
ReplayScope = Literal["shared", "process"]
PROCESS_ONLY = (
    "the nonces seen are kept in this process's memory only: the replay check lasts as long "
    "as it, and another process (a restart, a second daemon) would take this token again"
)


@dataclass(frozen=True, slots=True)
class Verification:
    """What was decided of one token, and from which document."""

    outcome: Outcome
    rule: str | None = None  # the rule broken (invalid)
    reason: str | None = None  # why, in words (invalid, unavailable)
    issuer: str | None = None
    # The handle the issuer's document declares, never checked: a token's verdict rests on
    # the document and its key alone, and does not wait on the handle's hosts (SA-ISS-2).
    declared_handle: str | None = None
    key_id: str | None = None
    method: str | None = None
    expires_at: int | None = None
    document_checked_at: str | None = None  # when the document that decided was resolved
    refreshed: bool = False  # the document was resolved afresh for this token (SA-SIG-2)
    replay: ReplayScope | None = None  # where the nonces seen live (None: no replay check)

    @property
    def valid(self) -> bool:
        return self.outcome == "valid"

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "valid": self.valid,
            "rule": self.rule,
            "reason": self.reason,
            "issuer": self.issuer,
            "handle": None,  # no verified handle: see declared_handle, and look the DID up
            "handle_checked": False,
            "declared_handle": self.declared_handle,
            "key_id": self.key_id,
            "method": self.method,
            "expires_at": self.expires_at,
            "document": {"checked_at": self.document_checked_at, "refreshed": self.refreshed},
            "replay": self._replay_json(),
        }

    def _replay_json(self) -> dict[str, Any] | None:
        if self.replay is None:
            return None
        warning = PROCESS_ONLY if self.replay == "process" else None
        return {"scope": self.replay, "warning": warning}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Verification:
        document = data.get("document") or {}
        replay = data.get("replay") or {}
        return cls(
            outcome=data["outcome"],
            rule=data.get("rule"),
            reason=data.get("reason"),
            issuer=data.get("issuer"),
            declared_handle=data.get("declared_handle"),
            key_id=data.get("key_id"),
            method=data.get("method"),
            expires_at=data.get("expires_at"),
            document_checked_at=document.get("checked_at"),
            refreshed=bool(document.get("refreshed")),
            replay=replay.get("scope"),
        )


def parse_token(text: str) -> Token:
    """The token's parts (SA-JWT-*, SA-ALG-1, SA-TYP-1, SA-CRIT-1, SA-ISS-1, SA-KID-1's form,
    SA-TIME-*'s types, SA-LXM-1's form, SA-JTI-1). Any JSON in any field is refused naming
    a rule, never an error of another kind."""
    if len(text) > MAX_TOKEN:
        raise TokenRefused(f"a token of {len(text)} characters (at most {MAX_TOKEN})", "SA-JWT-1")
    segments = text.split(".")
    if len(segments) != 3:
        raise TokenRefused(f"{len(segments)} segments, not header.claims.signature", "SA-JWT-1")
    header = _json_segment(segments[0], "header")
    claims = _json_segment(segments[1], "claims")
    algorithm = header.get("alg")  # before the signature: `none` comes without one
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise TokenRefused(f"algorithm {str(algorithm)[:20]!r} (ES256K or ES256)", "SA-ALG-1")
    kind = header.get("typ")
    if kind != KIND:  # no case folding, prefix or trimming: `application/at+jwt` is at+jwt
        raise TokenRefused(f"typ {str(kind)[:20]!r} is not {KIND}, a service token's", "SA-TYP-1")
    if "crit" in header:
        raise TokenRefused("crit names extensions that must be understood: none is", "SA-CRIT-1")
    try:
        signature = strict_b64url(segments[2])
    except BadSignature as err:
        raise TokenRefused(str(err), "SA-JWT-2") from None
    if len(signature) != 64:
        raise TokenRefused(f"a signature of {len(signature)} bytes, not r||s 64", "SA-JWT-2")
    issuer, key_id = _issuer(claims.get("iss"), header.get("kid"))
    audience = claims.get("aud")
    if not isinstance(audience, str) or not audience:
        raise TokenRefused("no aud", "SA-AUD-1")
    expires_at, issued_at = _seconds(claims, "exp"), _seconds(claims, "iat")
    not_before = None if "nbf" not in claims else _seconds(claims, "nbf", "SA-TIME-3")
    method = claims.get("lxm")
    if method is not None and not (isinstance(method, str) and is_valid_nsid(method)):
        raise TokenRefused(f"lxm {str(method)[:80]!r} is not an NSID", "SA-LXM-1")
    nonce = claims.get("jti")
    if not isinstance(nonce, str) or not 0 < len(nonce) <= MAX_NONCE:
        raise TokenRefused("jti is not a string of 1 to 256 characters", "SA-JTI-1")
    return Token(
        issuer=issuer,
        key_id=key_id,
        audience=audience,
        expires_at=expires_at,
        issued_at=issued_at,
        not_before=not_before,
        method=method,
        nonce=nonce,
        algorithm=algorithm,
        signed=f"{segments[0]}.{segments[1]}".encode("ascii"),
        signature=signature,
    )


def _json_segment(segment: str, what: str) -> dict[str, Any]:
    try:
        raw = strict_b64url(segment, what)
    except BadSignature as err:
        raise TokenRefused(str(err), "SA-JWT-1") from None
    try:  # strict: a JSON reader would guess UTF-16 or -32, and pass encoded surrogates
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TokenRefused(f"the {what} is not UTF-8: {err.reason}", "SA-JWT-3") from None
    if "\x00" in text:  # valid UTF-8, but no JSON text holds a NUL: UTF-16's ASCII does
        raise TokenRefused(f"the {what} is not UTF-8: a NUL byte (UTF-16 or -32?)", "SA-JWT-3")
    if text.startswith("\ufeff"):
        raise TokenRefused(f"the {what} starts with a byte order mark", "SA-JWT-3")
    try:
        value = parse_json(text)
    except ValueError as err:  # not JSON, a key given twice, nested too deeply
        raise TokenRefused(f"the {what} is not JSON: {err}", "SA-JWT-1") from None
    if not isinstance(value, dict):
        raise TokenRefused(f"the {what} is not a JSON object", "SA-JWT-1")
    if not _unicode(value):
        raise TokenRefused(f"the {what} holds a lone UTF-16 surrogate (\\uD800-DFFF)", "SA-JWT-3")
    return value


def _unicode(value: Any) -> bool:
    """Whether every string in `value` (keys too) is Unicode text: an escaped half of a
    surrogate pair decodes to a string no UTF-8 encoder takes (I-JSON, RFC 7493 §2.1)."""
    pending = [value]  # a loop, not recursion: the nesting is the sender's
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return False
        elif isinstance(item, dict):
            pending += [*item, *item.values()]
        elif isinstance(item, list):
            pending += item
    return True


def _issuer(iss: Any, kid: Any) -> tuple[str, str]:
    """The issuer's DID and the key id the token names (SA-ISS-1, SA-KID-1)."""
    if not isinstance(iss, str):
        raise TokenRefused("no iss", "SA-ISS-1")
    did, _, service = iss.partition("#")
    if not is_valid_did(did):
        raise TokenRefused(f"iss {iss[:80]!r} is not a DID", "SA-ISS-1")
    from_service = None
    if service:
        from_service = SERVICE_KEYS.get(service)
        if from_service is None:
            raise TokenRefused(f"iss names service {service[:40]!r}, which has no key", "SA-ISS-1")
    if kid is None:
        return did, from_service or DEFAULT_KEY_ID
    if not isinstance(kid, str):
        raise TokenRefused("kid is not a string", "SA-KID-1")
    owner, hash_mark, fragment = kid.rpartition("#")
    if not hash_mark or owner not in ("", did) or not fragment:
        raise TokenRefused(f"kid {kid[:80]!r} is not #key or {did}#key", "SA-KID-1")
    if from_service is not None and from_service != fragment:
        raise TokenRefused(f"kid #{fragment} and iss #{service} name two keys", "SA-KID-1")
    return did, fragment


def _seconds(claims: dict[str, Any], name: str, rule: str = "SA-TIME-1") -> int:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
        raise TokenRefused(f"{name} is not a time in whole seconds", rule)
    return value


def check_claims(token: Token, expected: Expected, now: float) -> None:
    """The claims hold for this receiver at `now` (SA-AUD-1, SA-TIME-*, SA-LXM-1, SA-KID-1)."""
    if token.key_id not in expected.key_ids:
        accepted = ", ".join(f"#{k}" for k in expected.key_ids)
        raise TokenRefused(f"key #{token.key_id} is not one accepted ({accepted})", "SA-KID-1")
    _check_audience(token.audience, expected)
    if token.expires_at <= token.issued_at:
        raise TokenRefused("exp is not after iat", "SA-TIME-2")
    if token.expires_at - token.issued_at > MAX_LIFETIME:
        lifetime = token.expires_at - token.issued_at
        raise TokenRefused(f"a lifetime of {lifetime} s (at most {MAX_LIFETIME})", "SA-TIME-2")
    if now > token.expires_at + expected.skew:
        raise TokenRefused(f"expired {now - token.expires_at:.0f} s ago", "SA-TIME-1")
    if token.issued_at > now + expected.skew:
        raise TokenRefused(f"issued {token.issued_at - now:.0f} s in the future", "SA-TIME-1")
    if token.not_before is not None and token.not_before > now + expected.skew:
        ahead = token.not_before - now
        raise TokenRefused(f"not valid before {ahead:.0f} s from now (nbf)", "SA-TIME-3")
    if expected.method is None:
        if token.method is not None:
            raise TokenRefused(f"the token is for {token.method}; no method given", "SA-LXM-1")
    elif token.method != expected.method:
        named = "no method" if token.method is None else token.method
        raise TokenRefused(f"the token is for {named}, not {expected.method}", "SA-LXM-1")


def _check_audience(audience: str, expected: Expected) -> None:
    """SA-AUD-1: exactly the receiver's DID and service; bare only where allowed."""
    if audience == expected.audience:
        return
    did, _, service = expected.audience.partition("#")
    if audience == did and service and expected.bare_audience:
        return
    if audience == did and service:
        raise TokenRefused(f"a bare audience {audience}, not {expected.audience}", "SA-AUD-1")
    raise TokenRefused(f"for {audience[:120]}, not {expected.audience}", "SA-AUD-1")


def issuer_key(token: Token, document: Any) -> PublicKey:
    """The key the token names in the issuer's document (SA-KID-2)."""
    key = verification_key(document, token.issuer, token.key_id)
    if key is None:
        raise TokenRefused(f"the issuer's document has no valid #{token.key_id} key", "SA-KID-2")
    return key


def check_signature(token: Token, key: PublicKey) -> None:
    """The signature verifies under `key` (SA-ALG-2, SA-SIG-1; C-SIG-2 named for high-S)."""
    if ALGORITHMS[token.algorithm] is not key.curve:
        raise TokenRefused(f"{token.algorithm} for a {key.curve} key", "SA-ALG-2")
    if verify(key.did_key, token.signed, token.signature):
        return
    if high_s(key.curve, token.signature):
        raise TokenRefused("the signature is high-S (s > n/2)", "C-SIG-2")
    raise TokenRefused(f"the signature does not verify under #{token.key_id}", "SA-SIG-1")


def mint(key: coincurve.PrivateKey, claims: dict[str, Any], **header: Any) -> str:
    """A token of `claims` signed with a K-256 key, low-S, as a PDS writes one: for tests,
    benchmarks and tools that stand in for a PDS (atwhois verifies, it does not issue)."""
    head = {"typ": "JWT", "alg": "ES256K", **header}
    signed = f"{_b64url(json.dumps(head).encode())}.{_b64url(json.dumps(claims).encode())}"
    signature = key.sign_recoverable(signed.encode())[:64]  # libsecp256k1 signs low-S
    return f"{signed}.{_b64url(signature)}"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")
