"""Key encodings (CRYPTO-ENC-1, DOC-KEY-3) against the interop crypto vectors."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from atwhois.resolver import keys
from atwhois.resolver.plc.signature import verify
from tests.vectors import CRYPTO, load_json

K256_DIDKEYS = load_json(CRYPTO / "w3c_didkey_K256.json")
P256_DIDKEYS = load_json(CRYPTO / "w3c_didkey_P256.json")
SIGNATURES = load_json(CRYPTO / "signature-fixtures.json")


@pytest.mark.parametrize("case", K256_DIDKEYS, ids=lambda c: c["publicDidKey"][-8:])
def test_k256_private_key_to_did_key(case: dict[str, str]) -> None:
    private = ec.derive_private_key(int(case["privateKeyBytesHex"], 16), ec.SECP256K1())
    point = private.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    key = keys.parse_legacy_multibase(keys.Curve.K256, "z" + keys.b58encode(point))
    assert key.did_key == case["publicDidKey"]
    assert keys.parse_did_key(case["publicDidKey"]) == key


@pytest.mark.parametrize("case", P256_DIDKEYS, ids=lambda c: c["publicDidKey"][-8:])
def test_p256_private_key_to_did_key(case: dict[str, str]) -> None:
    secret = int.from_bytes(keys.b58decode(case["privateKeyBytesBase58"]), "big")
    private = ec.derive_private_key(secret, ec.SECP256R1())
    point = private.public_key().public_bytes(Encoding.X962, PublicFormat.CompressedPoint)
    assert keys.PublicKey(keys.Curve.P256, point).did_key == case["publicDidKey"]
    assert keys.parse_did_key(case["publicDidKey"]).curve is keys.Curve.P256


@pytest.mark.parametrize("case", SIGNATURES, ids=lambda c: c["comment"])
def test_signature_fixture_keys_parse_both_ways(case: dict[str, str]) -> None:
    # The fixtures pair a legacy suite with a *compressed* point (checklist DOC-KEY-3 note).
    curve = keys.Curve.P256 if case["algorithm"] == "ES256" else keys.Curve.K256
    from_did = keys.parse_did_key(case["publicKeyDid"])
    assert from_did.curve is curve
    assert keys.parse_legacy_multibase(curve, case["publicKeyMultibase"]) == from_did


def test_legacy_and_multikey_forms_of_one_key_agree() -> None:
    # The example pair in the checklist, DOC-KEY-3.
    legacy = keys.parse_legacy_multibase(
        keys.Curve.K256,
        "zQYEBzXeuTM9UR3rfvNag6L3RNAs5pQZyYPsomTsgQhsxLdEgCrPTLgFna8yqCnxPpNT7DBk6Ym3dgPKNu86vt9GR",
    )
    assert legacy.multikey == "zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF"


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "z",
        "zz0OIl",
        "Q3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF",
        "z" + keys.b58encode(b"\xe7\x01" + b"\x02" + b"\xff" * 32),  # x not on the curve
        "z" + keys.b58encode(b"\xed\x01" + b"\x00" * 32),
    ],  # ed25519: not an atproto curve
)
def test_bad_multikeys_are_refused(bad: str) -> None:
    with pytest.raises(keys.InvalidKey):
        keys.parse_multikey(bad)


def test_base58_round_trip_keeps_leading_zeros() -> None:
    for data in (b"", b"\x00", b"\x00\x00\x01", bytes(range(40))):
        assert keys.b58decode(keys.b58encode(data)) == data


@pytest.mark.parametrize("curve", list(keys.Curve))
def test_a_did_key_whose_bytes_are_no_point_is_refused_and_verifies_nothing(
    curve: keys.Curve,
) -> None:
    """33 bytes of the right length and prefix whose x is past the field: parsing refuses
    the key, and verifying with it (which parses the bytes itself) is False, not an error."""
    did_key = "did:key:z" + keys.b58encode(keys._MULTICODEC[curve] + b"\x02" + b"\xff" * 32)
    with pytest.raises(keys.InvalidKey):
        keys.parse_did_key(did_key)
    one = bytes(31) + b"\x01"
    assert verify(did_key, b"message", one + one) is False
