"""DAG-CBOR, CIDs and DID derivation for PLC operations (P-ENC-1, P-CID-1, P-DID-1).

libipld (a dependency of the `atproto` package) encodes DAG-CBOR with map keys sorted
length-first, then bytewise, as the spec requires; `prev` stays a text string.
"""

from __future__ import annotations

import hashlib
from typing import Any

import libipld

from ..errors import AtwhoisError

_CID_PREFIX = b"\x01\x71\x12\x20"  # CIDv1, dag-cbor, sha2-256, 32 bytes


class NotEncodable(AtwhoisError, ValueError):
    """JSON that has no DAG-CBOR form: a string with a lone surrogate (JSON can escape one,
    UTF-8 cannot hold it), a float, an integer beyond 64 bits (P-ENC-1)."""


def dag_cbor(value: Any) -> bytes:
    try:
        return bytes(libipld.encode_dag_cbor(value))
    except (ValueError, TypeError, OverflowError) as err:
        raise NotEncodable(str(err)) from None


def cid_of(encoded: bytes) -> str:
    """P-CID-1: the CID string of DAG-CBOR bytes (`b` + base32 of the binary CID)."""
    return libipld.encode_multibase("b", _CID_PREFIX + hashlib.sha256(encoded).digest())


def did_of_genesis(encoded_signed_genesis: bytes) -> str:
    """P-DID-1: `did:plc:` + the first 24 base32 characters of the signed genesis' hash."""
    digest = hashlib.sha256(encoded_signed_genesis).digest()
    return "did:plc:" + libipld.encode_multibase("b", digest)[1:25]


def unsigned(operation: dict[str, Any]) -> dict[str, Any]:
    """P-SIG-1: the op with the `sig` key removed entirely (not set to null)."""
    return {k: v for k, v in operation.items() if k != "sig"}


_SIG_KEY = b"\x63sig"  # the text string "sig", the shortest key of every PLC op


def unsigned_dag_cbor(encoded_signed: bytes, operation: dict[str, Any]) -> bytes:
    """P-SIG-1 bytes, cut from the signed encoding instead of encoding again: map keys sort
    length-first, so `sig` is the first entry; drop it and count one entry fewer. Falls
    back to a fresh encoding for any other shape."""
    header = encoded_signed[0]
    if 0xA1 <= header <= 0xB7 and encoded_signed[1:5] == _SIG_KEY:
        kind, info = encoded_signed[5] >> 5, encoded_signed[5] & 0x1F
        if kind == 3 and info < 24:
            end = 6 + info
        elif kind == 3 and info == 24:
            end = 7 + encoded_signed[6]
        elif kind == 3 and info == 25:
            end = 8 + int.from_bytes(encoded_signed[6:8], "big")
        else:
            return dag_cbor(unsigned(operation))
        return bytes([header - 1]) + encoded_signed[end:]
    return dag_cbor(unsigned(operation))
