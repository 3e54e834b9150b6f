"""A repository's commit as a PDS sends it, made here and signed for real: the CAR file of
`getBlocks`, for the PDS check's tests and its fuzz target."""

from __future__ import annotations

import hashlib
from typing import Any

import libipld

from devnet.plc_ops import Key


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def cid(block: bytes, codec: int = 0x71) -> bytes:
    """A CIDv1 of `block` (DAG-CBOR unless `codec` says otherwise), SHA-256, as bytes."""
    return bytes([1]) + varint(codec) + bytes([0x12, 32]) + hashlib.sha256(block).digest()


def car(*blocks: tuple[bytes, bytes]) -> bytes:
    """A CAR v1 file of these (CID, block) pairs, with no roots (as `getBlocks` sends)."""
    header = libipld.encode_dag_cbor({"roots": [], "version": 1})
    sections = b"".join(varint(len(name) + len(b)) + name + b for name, b in blocks)
    return varint(len(header)) + header + sections


def alone(block: bytes) -> tuple[str, bytes]:
    """`block`'s CID as text, and a CAR file of that block alone."""
    name = cid(block)
    return libipld.encode_cid(name), car((name, block))


def signed_commit(key: Key, did: str, **changes: Any) -> tuple[str, bytes, bytes]:
    """A commit of `did` signed by `key` (then `changes` made to it): its CID as text, the
    CID's bytes, and the block."""
    fields: dict[str, Any] = {
        "did": did,
        "version": 3,
        "data": cid(b"mst root"),
        "rev": "3n3qpjq7vrk2v",
        "prev": None,
    }
    signature = key.private.sign_recoverable(libipld.encode_dag_cbor(fields))[:64]
    block = libipld.encode_dag_cbor({**fields, "sig": signature, **changes})
    name = cid(block)
    return libipld.encode_cid(name), name, block
