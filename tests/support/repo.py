"""A repository's commit as a PDS sends it, made here and signed for real
(`atwhois.testing.mst`): the CAR file of `getBlocks`, for the PDS check's tests and its
fuzz target."""

from __future__ import annotations

import libipld

from atwhois.testing.mst import car, cid
from atwhois.testing.mst import signed_commit as signed_commit  # the PDS check's tests sign
from atwhois.testing.mst import varint as varint  # the tests build CARs by hand with it


def alone(block: bytes) -> tuple[str, bytes]:
    """`block`'s CID as text, and a CAR file of that block alone."""
    name = cid(block)
    return libipld.encode_cid(name), car((name, block))
