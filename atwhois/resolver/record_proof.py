"""A record's proof, as `com.atproto.sync.getRecord` answers it (R-REC-*): a CAR file whose
one root is the repository's signed commit, holding the MST nodes on the path from the
commit's `data` to `collection/rkey` and, when the key is there, the record. Read here: the
CAR and its caps, the commit (R-COMMIT-*, `resolver.commit`), the path (R-MST-*,
`resolver.mst`), the record; what the caller holds (a CID, or the record's content) read
into the CID it claims; and the verdict's shape. Pure functions over bytes; asking the PDS
and checking the commit's signature under the identity's key is `resolver.record`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

import libipld

from atwhois.resolver import drisl, mst
from atwhois.resolver.commit import Commit, InvalidCommit, car_blocks, car_roots, parse_commit
from atwhois.resolver.errors import InvalidIdentifier
from atwhois.resolver.plc.encoding import cid_of
from atwhois.resolver.syntax import AtUri, parse_at_uri
from atwhois.resolver.untrusted import parse_json

MAX_CAR = 2 * 1024 * 1024  # R-REC-3: a record of up to 1 MB (the firehose's cap) and its path
MAX_BLOCKS = 64  # R-REC-3: the commit, a path of at most 32 nodes, the record, and room
BLESSED = (1, 0x71, 0x12, 32)  # CIDv1, DAG-CBOR, SHA-256 of 32 bytes


@dataclass(frozen=True, slots=True)
class Proof:
    """What an answer proves of one key: the commit, and the record's CID and value when
    the key is there (None: the path shows it is not)."""

    commit: Commit
    cid: str | None
    value: dict[str, Any] | None


def record_uri(text: str) -> AtUri:
    """R-REC-1: an at:// URI naming one record, checked before anything is asked (the
    reference PDS answers a malformed parameter with a 500). Raises `InvalidInput`."""
    uri = parse_at_uri(text)
    if uri.collection is None or uri.rkey is None:
        raise InvalidIdentifier(f"{text[:120]!r} names no record (collection/rkey)", "R-REC-1")
    return uri


def read_proof(car: bytes, did: str, collection: str, rkey: str) -> Proof:
    """The proof `car` carries for `collection/rkey` in `did`'s repository (R-REC-3..5);
    the signature is the caller's to check. Raises `InvalidCommit` (`mst.InvalidProof`)."""
    if len(car) > MAX_CAR:
        raise mst.InvalidProof(f"an answer of {len(car)} bytes, over {MAX_CAR}", "R-REC-3")
    roots = car_roots(car)
    if len(roots) != 1 or not roots[0].blessed:
        raise mst.InvalidProof("a CAR whose roots are not one CIDv1 DAG-CBOR commit", "R-REC-4")
    blocks: dict[bytes, bytes] = {}
    for count, (name, block) in enumerate(car_blocks(car), 1):
        if count > MAX_BLOCKS:
            raise mst.InvalidProof(f"more than {MAX_BLOCKS} blocks in one proof", "R-REC-3")
        if hashlib.sha256(block).digest() != name[-32:]:
            text = drisl.Link(name).text
            raise mst.InvalidProof(f"block {text} does not hash to its CID", "R-CAR-2")
        blocks[name] = block  # a block repeated is the same bytes: it hashes to its name
    root = roots[0].cid
    if root not in blocks:
        raise mst.InvalidProof("no block for the CAR's root, the commit", "R-REC-4")
    commit = parse_commit(roots[0].text, blocks[root])
    if commit.did != did:
        raise InvalidCommit(f"the commit is {commit.did[:80]}'s, not {did}'s", "R-COMMIT-5")
    found = mst.find(blocks, commit.data, f"{collection}/{rkey}".encode())
    if found is None:
        return Proof(commit, None, None)
    if not found.blessed:
        raise mst.InvalidProof(f"the record's CID {found.text} is not blessed", "R-REC-5")
    record = blocks.get(found.cid)
    if record is None:
        raise mst.InvalidProof(f"the record {found.text} is not in the answer", "R-REC-5")
    try:
        value = drisl.decode(record)
    except drisl.NotDrisl as err:
        raise mst.InvalidProof(f"the record is not DRISL: {err}", "R-REC-5") from None
    if not isinstance(value, dict):
        raise mst.InvalidProof("the record is not a map", "R-REC-5")
    return Proof(commit, found.text, value)


def claimed_cid(cid: str | None = None, record: bytes | None = None) -> str | None:
    """R-REC-7: the CID the caller holds: `cid` as given (a CID, any form), or that of
    `record`, the record's DRISL bytes or its JSON (atproto's form, R-DATA-4). Raises
    `InvalidInput`."""
    if cid is not None:
        try:
            parsed = libipld.decode_cid(cid)
        except ValueError:
            raise InvalidIdentifier(f"{cid[:80]!r} is not a CID", "R-REC-7") from None
        hashed = parsed["hash"]
        if (parsed["version"], parsed["codec"], hashed["code"], hashed["size"]) != BLESSED:
            return cid  # no record proven is named by it (R-REC-5): it matches none
        return drisl.Link(b"\x01\x71\x12\x20" + hashed["digest"]).text  # as proofs spell it
    if record is None:
        return None
    as_drisl = bool(record) and record[0] >> 5 == 5  # a CBOR map; JSON starts printable
    try:
        value = drisl.decode(record) if as_drisl else drisl.from_json(parse_json(record))
        if not isinstance(value, dict):
            raise drisl.NotDrisl(f"a record is a map, not a {type(value).__name__}")
        return cid_of(drisl.encode(value))  # DRISL read is the bytes given, encoded again
    except ValueError as err:  # a bound of the data model, in the JSON or in the bytes
        form = "DRISL" if as_drisl else "atproto JSON"
        raise InvalidIdentifier(f"the record given is not {form}: {err}", "R-REC-7") from None


Outcome = Literal["verified", "invalid", "absent", "inactive", "unavailable"]


@dataclass(frozen=True, slots=True)
class RecordVerification:
    """What was decided of one record, and from what."""

    outcome: Outcome
    uri: str
    did: str | None = None
    collection: str | None = None
    rkey: str | None = None
    rule: str | None = None  # the rule broken (invalid)
    reason: str | None = None  # why, in words (all but verified)
    proven: bool = False  # verified, or absent as the signed tree shows (not as a PDS says)
    cid: str | None = None  # the record's CID, as proven
    value: Any = None  # the record in atproto's JSON form
    commit: str | None = None  # the commit that proves it, its CID and rev
    rev: str | None = None
    key: str | None = None  # the did:key the commit is signed with
    pds: str | None = None
    status: str | None = None  # inactive: the account's status at its PDS
    claimed: str | None = None  # the CID the caller holds (given, or of the content given)
    refreshed: bool = False  # the identity was resolved afresh for this record (R-REC-8)

    @property
    def verified(self) -> bool:
        return self.outcome == "verified"

    @property
    def matches(self) -> bool | None:
        """Whether the record proven is the one the caller holds: None when nothing was
        claimed, or nothing could be proven either way."""
        if self.claimed is None or self.outcome not in ("verified", "absent"):
            return None
        return self.verified and self.cid == self.claimed

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__slots__}
        return {**out, "verified": self.verified, "matches": self.matches}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RecordVerification:
        return cls(**{name: data.get(name) for name in cls.__slots__})  # type: ignore[arg-type]
