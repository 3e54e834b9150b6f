"""A repository's signed commit, as its PDS serves it: the CAR file of
`com.atproto.sync.getBlocks` read, the commit block found by the CID `getLatestCommit` named
and checked against it, its fields read strictly (R-COMMIT-*), and its signature verified
with a DID document's signing key. Pure functions over bytes: the fetching is
`resolver.pds`; a record's proof (`resolver.record_proof`) reads its CAR and its commit with
the same functions."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import libipld

from . import drisl
from .errors import InvalidData
from .plc.signature import verify

_DAG_CBOR, _SHA2_256 = 0x71, 0x12
_MAX_BLOCKS = 16  # getBlocks for one CID: a CAR of more blocks is not an answer to it
# R-COMMIT-6: a v3 commit's fields, `prev` among them even when null. The reference signs
# and verifies over the five it knows (its schema drops any other); a commit with another
# is refused, so that "every field but sig" and the reference's five are the same bytes.
_FIELDS = frozenset({"did", "version", "data", "rev", "prev", "sig"})


class InvalidCommit(InvalidData):
    """A CAR file or commit block that is not what it must be; `rule` names the rule."""

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(f"{message} [{rule}]")
        self.rule = rule


@dataclass(frozen=True, slots=True)
class Commit:
    cid: str
    did: str
    rev: str
    signature: bytes
    unsigned: bytes  # the commit encoded without `sig`: the bytes the key signed (R-COMMIT-4)
    data: bytes  # the binary CID of the MST's root node


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """An unsigned LEB128 integer of at most 9 bytes at `at`, and where the next item starts."""
    value = shift = 0
    for index in range(at, min(at + 9, len(data))):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    raise InvalidCommit("a varint that does not end", "R-CAR-1")


def _sections(car: bytes) -> tuple[list[drisl.Link], Iterator[bytes]]:
    """The roots a CAR v1 header names, and the sections after it: each a varint length and
    that many bytes."""
    length, at = _varint(car, 0)
    try:
        header = drisl.decode(car[at : at + length])
    except drisl.NotDrisl as err:
        raise InvalidCommit(f"the CAR header is not DAG-CBOR: {err}", "R-CAR-1") from None
    if not isinstance(header, dict) or header.get("version") != 1:
        raise InvalidCommit("not a CAR v1 header", "R-CAR-1")
    roots = header.get("roots")
    if not isinstance(roots, list) or not all(isinstance(r, drisl.Link) for r in roots):
        raise InvalidCommit("a CAR header whose roots are not a list of links", "R-CAR-1")
    return roots, _after(car, at + length)


def _after(car: bytes, at: int) -> Iterator[bytes]:
    while at < len(car):
        length, at = _varint(car, at)
        if length == 0 or at + length > len(car):
            raise InvalidCommit("a CAR section cut short", "R-CAR-1")
        yield car[at : at + length]
        at += length


def _block(section: bytes) -> tuple[bytes, bytes]:
    """A section's CID (as bytes) and its block: CIDv1, DAG-CBOR, SHA-256 (R-CAR-2)."""
    version, at = _varint(section, 0)
    codec, at = _varint(section, at)
    hashed, at = _varint(section, at)
    size, at = _varint(section, at)
    if (version, codec, hashed, size) != (1, _DAG_CBOR, _SHA2_256, 32):
        raise InvalidCommit("a block whose CID is not CIDv1 DAG-CBOR SHA-256", "R-CAR-2")
    return section[: at + size], section[at + size :]


def car_blocks(car: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Each block of a CAR v1 file, after its CID (as bytes). Raises `InvalidCommit`."""
    for section in _sections(car)[1]:
        yield _block(section)


def car_roots(car: bytes) -> list[drisl.Link]:
    """The roots a CAR v1 file's header names. Raises `InvalidCommit`."""
    return _sections(car)[0]


def read_commit(car: bytes, cid: str) -> Commit:
    """The commit `cid` names, from a CAR file of blocks. Raises `InvalidCommit`."""
    try:
        wanted = libipld.decode_cid(cid)
    except ValueError:
        raise InvalidCommit(
            f"the latest commit's CID {cid[:80]!r} is not a CID", "R-CAR-2"
        ) from None
    digest = wanted["hash"]["digest"]
    for count, (name, block) in enumerate(car_blocks(car), 1):
        if count > _MAX_BLOCKS:
            raise InvalidCommit(f"more than {_MAX_BLOCKS} blocks for one CID", "R-CAR-1")
        if name[-32:] != digest:
            continue
        if hashlib.sha256(block).digest() != digest:
            raise InvalidCommit(f"the block named {cid} does not hash to it", "R-CAR-2")
        return parse_commit(cid, block)
    raise InvalidCommit(f"no block {cid} in the answer", "R-CAR-2")


def parse_commit(cid: str, block: bytes) -> Commit:
    """The commit block named `cid` read strictly (R-COMMIT-1..3, R-COMMIT-6). Raises
    `InvalidCommit`."""
    try:
        fields = drisl.decode(block)
    except drisl.NotDrisl as err:
        raise InvalidCommit(f"the commit is not DAG-CBOR: {err}", "R-COMMIT-1") from None
    if not isinstance(fields, dict):
        raise InvalidCommit("the commit is not a map", "R-COMMIT-1")
    if fields.get("version") != 3:
        raise InvalidCommit(f"commit version {fields.get('version')!r:.20}, not 3", "R-COMMIT-2")
    did, rev, signature = fields.get("did"), fields.get("rev"), fields.get("sig")
    if not isinstance(did, str) or not isinstance(rev, str) or "data" not in fields:
        raise InvalidCommit("a commit without its did, rev or data", "R-COMMIT-1")
    if not isinstance(signature, bytes) or len(signature) != 64:
        size = len(signature) if isinstance(signature, bytes) else None
        raise InvalidCommit(f"the commit's sig is not 64 bytes r||s ({size})", "R-COMMIT-3")
    if fields.keys() != _FIELDS:
        named = ", ".join(sorted(fields.keys() ^ _FIELDS))[:120]
        raise InvalidCommit(f"a commit with fields other than v3's: {named}", "R-COMMIT-6")
    data, prev = fields["data"], fields["prev"]
    if not _blessed(data) or not (prev is None or _blessed(prev)):
        what = "a commit whose data or prev is no CIDv1 DAG-CBOR SHA-256 link"
        raise InvalidCommit(what, "R-COMMIT-6")
    unsigned = {name: value for name, value in fields.items() if name != "sig"}
    return Commit(cid, did, rev, signature, drisl.encode(unsigned), data.cid)


def _blessed(link: object) -> bool:
    return isinstance(link, drisl.Link) and link.blessed


def signed_by(commit: Commit, keys: Iterable[str]) -> str | None:
    """The first of these did:keys whose signature the commit carries (R-COMMIT-4), or
    None."""
    for key in keys:
        if verify(key, commit.unsigned, commit.signature):
            return key
    return None
