"""A repository's commit as a PDS sends it, made here and signed for real: the CAR file of
`getBlocks`, for the PDS check's tests and its fuzz target; the commit of a record's proof
(`tests.support.mst`)."""

from __future__ import annotations

from typing import Any

import libipld

from devnet.plc_ops import Key
from devnet.relay_frames import car, cid
from devnet.relay_frames import varint as varint  # the tests build CARs by hand with it


def alone(block: bytes) -> tuple[str, bytes]:
    """`block`'s CID as text, and a CAR file of that block alone."""
    name = cid(block)
    return libipld.encode_cid(name), car((name, block))


def signed_commit(
    key: Key, did: str, /, *, data: bytes | None = None, **changes: Any
) -> tuple[str, bytes, bytes]:
    """A commit of `did` signed by `key`, its `data` the MST root `data` (a binary CID), then
    `changes` made to it: its CID as text, the CID's bytes, and the block."""
    fields: dict[str, Any] = {
        "did": did,
        "version": 3,
        "data": data or cid(b"mst root"),
        "rev": "3n3qpjq7vrk2v",
        "prev": None,
    }
    signature = key.private.sign_recoverable(libipld.encode_dag_cbor(fields))[:64]
    block = libipld.encode_dag_cbor({**fields, "sig": signature, **changes})
    name = cid(block)
    return libipld.encode_cid(name), name, block
