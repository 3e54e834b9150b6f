"""What the mirror keeps, as records: a verified operation (`StoredOp`), a refused one
(`Rejection`), a line it could not use (`BadLine`), and one page's worth of changes
(`Batch`), written in one transaction by the store."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from atwhois.resolver.errors import AtwhoisError
from atwhois.resolver.plc.operation import BadOperation, State, parse_operation

ENTRY_CAP = 8192  # characters of a refused entry kept as evidence


@dataclass(frozen=True, slots=True)
class StoredOp:
    seq: int
    did: str
    cid: str
    created_at: str
    operation_json: str  # the operation as the upstream served it (its keys in its order)
    signer: int  # which of the rotation keys in force signed it
    nullified: bool

    @property
    def operation(self) -> Any:
        return json.loads(self.operation_json)

    def replay_entry(self) -> dict[str, Any]:
        """The op as a replay reads it: without a `nullified` flag (the replay works that
        out, and one that disagreed would be a finding of its own)."""
        return {
            "did": self.did,
            "operation": self.operation,
            "cid": self.cid,
            "createdAt": self.created_at,
        }


@dataclass(frozen=True, slots=True)
class Rejection:
    did: str
    cid: str
    created_at: str
    rule: str
    message: str
    entry: str  # the export line as the upstream served it (capped)
    seen_at: str


_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> str:
    """`text` as a database can hold it: a lone surrogate (JSON may escape one: `"\\ud800"`)
    becomes U+FFFD instead of failing the whole page's write."""
    return _SURROGATE.sub("\ufffd", text)


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line the upstream served that the mirror could not use, and why: kept once (by its
    digest, however often it is served), the newest `BAD_LINES_KEPT` of them (and up to
    `BAD_LINES_SLACK` more between two prunes)."""

    digest: str
    reason: str
    entry: str  # the line as served (capped)
    seen_at: str

    @classmethod
    def of(cls, line: str | bytes, reason: str, seen_at: str) -> BadLine:
        raw = line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")
        text = raw[: ENTRY_CAP * 4].decode("utf-8", "replace")[:ENTRY_CAP]
        return cls(hashlib.sha256(raw).hexdigest(), storable(reason), text, seen_at)


class InForce(NamedTuple):
    """A DID's op in force, as the mirror holds it: its seq, and the op read from the
    store when asked for (a read API whose document for `seq` is made already never
    reads it)."""

    seq: int
    tombstoned: bool
    read: Callable[[int], bytes]  # the op's JSON at a seq

    @property
    def operation_json(self) -> bytes:
        return self.read(self.seq)

    def state(self, did: str) -> State | None:
        """The state the op sets (None: tombstoned)."""
        if self.tombstoned:
            return None
        text = self.operation_json  # an op the store lacks is its own error (MirrorCorrupt)
        try:
            return parse_operation(json.loads(text)).state
        except (BadOperation, ValueError):
            raise CorruptState(f"the mirror's op in force for {did} is not an operation") from None


class CorruptState(AtwhoisError, ValueError):
    """An op in force the mirror stored that does not read back as one."""


class Head(NamedTuple):
    """The op in force of a DID whose state a page changed."""

    cid: str
    tombstoned: bool


@dataclass(slots=True)
class Batch:
    """One page's worth of changes, written in one transaction with the new cursor."""

    # did, cid, createdAt, the operation's JSON, the index of the rotation key that signed it
    ops: list[tuple[str, str, str, bytes, int]] = field(default_factory=list)
    nullified: list[tuple[str, str]] = field(default_factory=list)  # did, cid
    heads: dict[str, Head] = field(default_factory=dict)  # a DID's op in force, changed
    rejected: list[Rejection] = field(default_factory=list)
    flags: dict[str, tuple[str, str]] = field(default_factory=dict)  # did: reason, since
    meta: dict[str, str] = field(default_factory=dict)
    bad_lines: list[BadLine] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LogRewrite:
    """A DID's ops after a replay without the ones its upstream removed (P-CMP-2): those
    kept, by seq, each nullified or not; those dropped; the refusals to keep as evidence
    (the removed ops, and any op that built on one); its op in force (None: no op left)."""

    kept: list[tuple[int, bool]]
    dropped: list[int]
    refused: list[Rejection]
    head: int | None
    tombstoned: bool
