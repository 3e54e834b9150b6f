"""Public keys as atproto writes them: multibase base58btc, multikey and did:key, on the two
curves atproto uses (C-CURVE-1). Pure functions over strings and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import coincurve
import libipld

from .errors import AtwhoisError


class InvalidKey(AtwhoisError, ValueError):
    """A key string that cannot be decoded into a point on a supported curve."""


class Curve(StrEnum):
    P256 = "p256"
    K256 = "k256"


# CRYPTO-ENC-1: varint multicodec prefixes of the compressed public keys.
_MULTICODEC = {Curve.P256: b"\x80\x24", Curve.K256: b"\xe7\x01"}
# DOC-KEY-3: the legacy verification-method types and the curve each names.
LEGACY_KEY_TYPES = {
    "EcdsaSecp256r1VerificationKey2019": Curve.P256,
    "EcdsaSecp256k1VerificationKey2019": Curve.K256,
}


def b58decode(text: str) -> bytes:
    """base58btc (libipld's multibase `z`, without the prefix)."""
    try:
        return bytes(libipld.decode_multibase("z" + text)[1])
    except ValueError:
        raise InvalidKey("not base58btc") from None


def b58encode(data: bytes) -> str:
    return str(libipld.encode_multibase("z", data))[1:]


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A validated public key: its curve and its compressed SEC1 point (33 bytes)."""

    curve: Curve
    compressed: bytes

    @property
    def multikey(self) -> str:
        return "z" + b58encode(_MULTICODEC[self.curve] + self.compressed)

    @property
    def did_key(self) -> str:
        return "did:key:" + self.multikey

    @property
    def uncompressed(self) -> bytes:
        """The 65-byte SEC1 point (what legacy verification methods carry, CRYPTO-ENC-2)."""
        if self.curve is Curve.K256:
            return coincurve.PublicKey(self.compressed).format(compressed=False)
        return _p256_point(self.compressed, compressed=False)


def _point(curve: Curve, sec1: bytes) -> PublicKey:
    """Validate a SEC1 point (compressed or not) on `curve` and keep it compressed."""
    if len(sec1) not in (33, 65):
        raise InvalidKey(f"a {curve} point is 33 or 65 bytes, not {len(sec1)}")
    try:
        if curve is Curve.K256:  # libsecp256k1 parses (and validates) ten times faster
            return PublicKey(curve, coincurve.PublicKey(sec1).format(compressed=True))
        return PublicKey(curve, _p256_point(sec1, compressed=True))
    except ValueError as err:
        raise InvalidKey(f"not a point on {curve}: {err}") from None


def _p256_point(sec1: bytes, *, compressed: bool) -> bytes:
    """A P-256 point validated by cryptography, in the form asked. Imported here: most
    atproto keys are K-256, and a lookup answered from the cache should not load the
    other curve's library (python -m bench startup)."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), sec1)
    form = PublicFormat.CompressedPoint if compressed else PublicFormat.UncompressedPoint
    return key.public_bytes(Encoding.X962, form)


def _multibase(text: str) -> bytes:
    if not text.startswith("z") or len(text) > 200:
        raise InvalidKey("expected multibase base58btc ('z' prefix)")
    return b58decode(text[1:])


def multikey_bytes(text: str) -> tuple[Curve, bytes]:
    """CRYPTO-ENC-1: `z` + base58btc(multicodec prefix + compressed point), decoded: the
    curve and the 33 bytes, not yet checked to be a point on it (`_point` does, and so does
    a verifier parsing them)."""
    raw = _multibase(text)
    for curve, prefix in _MULTICODEC.items():
        if raw.startswith(prefix):
            point = raw[len(prefix) :]
            if len(point) != 33:  # DOC-KEY-1: a Multikey holds the compressed point only
                raise InvalidKey(f"a multikey holds a 33-byte compressed point, not {len(point)}")
            return curve, point
    raise InvalidKey("multikey is neither p256-pub nor secp256k1-pub")


def did_key_bytes(text: str) -> tuple[Curve, bytes]:
    if not text.startswith("did:key:"):
        raise InvalidKey(f"{text[:40]!r} is not a did:key")
    return multikey_bytes(text.removeprefix("did:key:"))


def parse_multikey(text: str) -> PublicKey:
    return _point(*multikey_bytes(text))


def parse_did_key(text: str) -> PublicKey:
    return _point(*did_key_bytes(text))


def parse_legacy_multibase(curve: Curve, text: str) -> PublicKey:
    """DOC-KEY-3 / CRYPTO-ENC-2: `z` + base58btc(SEC1 point), no multicodec. Signature
    fixtures carry compressed points under legacy types too, so both sizes are accepted."""
    return _point(curve, _multibase(text))
