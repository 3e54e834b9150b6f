"""DAG-CBOR, CIDs and DID derivation for PLC operations (P-ENC-1, P-CID-1, P-DID-1).

libipld (a dependency of the `atproto` package) encodes DAG-CBOR with map keys sorted
length-first, then bytewise, as the spec requires; `prev` stays a text string.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import libipld

_CID_PREFIX = b"\x01\x71\x12\x20"  # CIDv1, dag-cbor, sha2-256, 32 bytes


def dag_cbor(value: Any) -> bytes:
    return bytes(libipld.encode_dag_cbor(value))


def base32(data: bytes) -> str:
    return base64.b32encode(data).decode("ascii").lower().rstrip("=")


def cid_of(encoded: bytes) -> str:
    """P-CID-1: the CID string of DAG-CBOR bytes (`b` + base32 of the binary CID)."""
    return "b" + base32(_CID_PREFIX + hashlib.sha256(encoded).digest())


def did_of_genesis(encoded_signed_genesis: bytes) -> str:
    """P-DID-1: `did:plc:` + the first 24 base32 characters of the signed genesis' hash."""
    return "did:plc:" + base32(hashlib.sha256(encoded_signed_genesis).digest())[:24]


def unsigned(operation: dict[str, Any]) -> dict[str, Any]:
    """P-SIG-1: the op with the `sig` key removed entirely (not set to null)."""
    return {k: v for k, v in operation.items() if k != "sig"}
