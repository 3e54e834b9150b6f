"""What the mirror keeps, as records: a verified operation (`StoredOp`), a refused one
(`Rejection`), a line it could not use (`BadLine`), and one page's worth of changes
(`Batch`), written in one transaction by the store."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

ENTRY_CAP = 8192  # characters of a refused entry kept as evidence


@dataclass(frozen=True, slots=True)
class StoredOp:
    seq: int
    did: str
    cid: str
    created_at: str
    entry: str  # the export line as the upstream served it, verified
    signer: int  # which of the rotation keys in force signed it
    nullified: bool

    @property
    def operation(self) -> Any:
        return json.loads(self.entry)["operation"]


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


@dataclass(slots=True)
class Batch:
    """One page's worth of changes, written in one transaction with the new cursor."""

    # did, cid, createdAt, the line, the index of the rotation key that signed it
    ops: list[tuple[str, str, str, str, int]] = field(default_factory=list)
    nullified: list[tuple[str, str]] = field(default_factory=list)  # did, cid
    states: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # did: state, at
    rejected: list[Rejection] = field(default_factory=list)
    flags: dict[str, tuple[str, str]] = field(default_factory=dict)  # did: reason, since
    meta: dict[str, str] = field(default_factory=dict)
    bad_lines: list[BadLine] = field(default_factory=list)
