"""PLC signatures: strict decoding and ECDSA verification on K-256 and P-256 (P-SIG-*, C-SIG-*).

K-256 goes through libsecp256k1 (coincurve), about ten times faster than `cryptography` for
that curve; P-256 through `cryptography`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from functools import lru_cache

import coincurve
from coincurve._libsecp256k1 import ffi, lib
from coincurve.context import GLOBAL_CONTEXT
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from ..errors import AtwhoisError
from ..keys import Curve, InvalidKey, PublicKey, did_key_bytes, parse_did_key

_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_ORDER = {
    Curve.K256: 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141,
    Curve.P256: 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551,
}


class BadSignature(AtwhoisError, ValueError):
    """A `sig` that is not a well-formed signature; `rule` names the broken rule."""

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


_TO_STANDARD = bytes.maketrans(b"-_", b"+/")  # base64url to the alphabet binascii reads


def decode_signature(text: str) -> bytes:
    """P-SIG-3/4: base64url, no `=` padding, zero padding bits, nothing else, 64 bytes."""
    # What every well-formed op carries, the one spelling of 64 bytes: 86 characters of
    # the URL-safe alphabet (strict_mode refuses any other), the last one's four padding
    # bits zero. Cheaper than a regular expression over the 86 characters.
    if len(text) == 86 and text[85] in "AQgw" and "+" not in text and "/" not in text:
        try:
            standard = text.encode("ascii").translate(_TO_STANDARD)
            return binascii.a2b_base64(standard + b"==", strict_mode=True)
        except (UnicodeEncodeError, binascii.Error):
            pass  # not base64url: the checks below say how
    raw = strict_b64url(text)
    if len(raw) != 64:
        kind = " (DER?)" if raw[:1] == b"\x30" else ""
        raise BadSignature(f"signature is {len(raw)} bytes{kind}, not r||s 64", "C-SIG-4")
    return raw


def strict_b64url(text: str, what: str = "signature") -> bytes:
    """base64url in its one spelling (P-SIG-3/4): no `=` padding, zero padding bits, the
    URL-safe alphabet and nothing else (a JWT's segments are written the same way); `what`
    names the text in the error."""
    if "\r" in text or "\n" in text:
        raise BadSignature(f"{what} contains CR or LF", "P-SIG-4")
    if "=" in text:
        raise BadSignature(f"{what} has '=' padding", "P-SIG-3")
    if _B64URL.fullmatch(text) is None:
        raise BadSignature(f"{what} is not base64url", "P-SIG-4")
    if len(text) % 4 == 1:
        raise BadSignature(f"{what} length is impossible for base64", "P-SIG-4")
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if base64.urlsafe_b64encode(raw).decode().rstrip("=") != text:
        raise BadSignature(f"{what} has non-zero padding bits", "P-SIG-3")
    return raw


@lru_cache(maxsize=65536)
def _key(did_key: str) -> PublicKey:
    return parse_did_key(did_key)


_Verifier = tuple[Curve, coincurve.PublicKey | ec.EllipticCurvePublicKey]


@lru_cache(maxsize=1 << 17)
def _verifier(did_key: str) -> _Verifier | None:
    """A did:key parsed once into the object that verifies with it (None: unusable). Room
    for the signing keys of a PLC mirror worker's DIDs (`mirror.replica.MAX_REPLAYS`), whose
    ops come back hours of export apart: a smaller cache parsed every key again."""
    try:
        # the bytes parsed once, by what verifies with them (which checks they are a point)
        curve, point = did_key_bytes(did_key)
        if curve is Curve.K256:
            return curve, coincurve.PublicKey(point)
        return curve, ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
    except ValueError:  # InvalidKey, or bytes that are not a point on the curve
        return None


# n and n/2 as 32 big-endian bytes: equal-length byte strings compare as the numbers do.
_ORDER_BYTES = {curve: order.to_bytes(32, "big") for curve, order in _ORDER.items()}
_HALF_ORDER = {curve: (order // 2).to_bytes(32, "big") for curve, order in _ORDER.items()}
_ZERO = bytes(32)


def high_s(curve: Curve, signature: bytes) -> bool:
    """Whether r||s has the high S that C-SIG-2 refuses (s > n/2)."""
    return signature[32:] > _HALF_ORDER[curve]


def verify(did_key: str, message: bytes, signature: bytes) -> bool:
    """ECDSA-SHA256 over `message` (C-SIG-1) with a 64-byte, low-S signature (C-SIG-2/4).
    An unparseable key verifies nothing."""
    verifier = _verifier(did_key)
    if verifier is None:
        return False
    curve, key = verifier
    # ECDSA's range and C-SIG-2's low S at once: 0 < r < n and 0 < s <= n/2 (so s < n).
    # A stranger's 64 bytes need not be in range (P-SIG-4: then they verify nothing;
    # libsecp256k1 would refuse to parse them).
    r, s = signature[:32], signature[32:]
    if not (_ZERO < r < _ORDER_BYTES[curve] and _ZERO < s <= _HALF_ORDER[curve]):
        return False
    if isinstance(key, coincurve.PublicKey):
        return _verify_k256(key, message, signature)
    der = encode_dss_signature(int.from_bytes(r, "big"), int.from_bytes(s, "big"))
    try:
        key.verify(der, message, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def _verify_k256(key: coincurve.PublicKey, message: bytes, signature: bytes) -> bool:
    """libsecp256k1 on the compact r||s form as it is: coincurve's own `verify` takes DER,
    and converting to it cost more than the verification (issue 18's profile)."""
    parsed = ffi.new("secp256k1_ecdsa_signature *")
    if not lib.secp256k1_ecdsa_signature_parse_compact(GLOBAL_CONTEXT.ctx, parsed, signature):
        return False
    digest = hashlib.sha256(message).digest()
    return bool(lib.secp256k1_ecdsa_verify(GLOBAL_CONTEXT.ctx, parsed, digest, key.public_key))


def why_unverified(keys: tuple[str, ...], message: bytes, signature: bytes) -> tuple[str, str]:
    """When no key verifies: would one, had the signature been encoded right? Names the
    broken rule (DER instead of r||s, high-S) rather than a bare "invalid signature"."""
    try:
        r, s = decode_dss_signature(signature)
        compact = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    except (ValueError, OverflowError):
        compact = b""
    for key in keys:
        if compact and verify(key, message, compact):
            return "C-SIG-4", "the signature is DER-encoded, not r||s"
        try:
            curve = _key(key).curve
        except InvalidKey:
            continue
        high_s = int.from_bytes(signature[32:], "big")
        if _ORDER[curve] // 2 < high_s < _ORDER[curve]:
            flipped = signature[:32] + (_ORDER[curve] - high_s).to_bytes(32, "big")
            if verify(key, message, flipped):
                return "C-SIG-2", "the signature is high-S (s > n/2)"
    return "P-SIG-5", "no allowed rotation key verifies the signature"
