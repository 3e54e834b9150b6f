"""Replay of a did:plc audit log (P-SIG-*, P-NULL-*, P-AUDIT-1): from the signed operations
alone, which ops are valid, which are nullified and by what, who signed each, and the state
that results. Pure: the log comes in as parsed JSON, a readable `Audit` comes out.

Nothing raises out of `replay`: every problem, from a non-list log to a forged signature, is
a `Finding` that names the rule it breaks.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any

from atwhois.foundation import counted

from ..document import declared_handle
from ..errors import AtwhoisError
from .encoding import NotEncodable, cid_of, dag_cbor, did_of_genesis, unsigned_dag_cbor
from .operation import BadOperation, Operation, State, parse_operation
from .signature import BadSignature, decode_signature, verify, why_unverified

RECOVERY_WINDOW = datetime.timedelta(hours=72)  # P-NULL-2
_NOTHING_NULLIFIED: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    message: str
    index: int | None = None  # position in the log
    cid: str | None = None

    def __str__(self) -> str:
        where = f"op {self.index}: " if self.index is not None else ""
        return f"{where}{self.message} [{self.rule}]"


@dataclass(slots=True)
class OpRecord:
    """One log entry as replayed: what it is, who signed it, what it changed, its fate."""

    index: int
    cid: str
    created_at: str
    type: str
    prev: str | None
    accepted: bool = False
    signer_index: int | None = None
    signer_key: str | None = None
    nullified: bool = False
    nullified_by: str | None = None
    logged_nullified: bool | None = None
    changes: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()  # a list per op cost 56 B in every replay kept

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "cid": self.cid,
            "created_at": self.created_at,
            "type": self.type,
            "prev": self.prev,
            "accepted": self.accepted,
            "signer_index": self.signer_index,
            "signer_key": self.signer_key,
            "nullified": self.nullified,
            "nullified_by": self.nullified_by,
            "changes": list(self.changes),
            "findings": [str(f) for f in self.findings],
        }


@dataclass(frozen=True, slots=True)
class Audit:
    did: str
    ops: tuple[OpRecord, ...]
    state: State | None  # the current state; None when deactivated or nothing valid
    deactivated: bool
    findings: tuple[Finding, ...]
    warnings: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        return {
            "did": self.did,
            "valid": self.valid,
            "deactivated": self.deactivated,
            "findings": [str(f) for f in self.findings],
            "warnings": list(self.warnings),
            "operations": [op.to_json() for op in self.ops],
        }


@dataclass(slots=True)
class _Node:
    # None once a later op is accepted, in a replay that keeps no records: only the head's
    # op is read then, and a whole op is about 1 KB in every replay kept
    op: Operation | None
    created: datetime.datetime
    record: OpRecord
    signers: tuple[str, ...]  # the keys it names, which may sign a child (P-SIG-5)
    allowed: tuple[str, ...]  # those that may still sign a child (P-NULL-4 narrows it)
    child: str | None = None  # its child in the active chain


class BadTime(AtwhoisError, ValueError):
    """An operation's `createdAt` that is not an RFC 3339 time."""


class _Rejected(AtwhoisError):
    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


# RFC 3339 section 5.6: date "T" time, seconds required, an offset or "Z" required.
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)


def parse_time(text: Any) -> datetime.datetime:
    """§10.6 step 2: `createdAt` as an RFC 3339 datetime (other ISO 8601 forms refused)."""
    if not isinstance(text, str):
        raise BadTime("createdAt is not a string")
    if _RFC3339.fullmatch(text) is None:
        raise BadTime(f"createdAt {text[:40]!r} is not an RFC 3339 datetime")
    return datetime.datetime.fromisoformat(text.upper())


class Replay:
    __slots__ = (
        "chain",
        "count",
        "did",
        "displaced",
        "findings",
        "keep_records",
        "latest",
        "nodes",
        "nullified",
        "records",
        "trusted_signer",
        "warnings",
    )
    """Replays one DID's log entry by entry; `audit()` gives the result. Used whole
    (`replay`) for a `/log/audit` answer, and incrementally for a directory export, where
    `keep_records=False` and `prune()` keep only what a later op could still refer to
    (neither records nor warnings are kept then: a streaming check only counts findings)."""

    def __init__(self, did: str, *, keep_records: bool = True) -> None:
        self.did = did
        self.keep_records = keep_records
        self.count = 0
        self.records: list[OpRecord] = []
        self.nodes: dict[str, _Node] = {}
        self.chain: list[str] = []  # the active chain still open to forks, head last
        # what recoveries nullified: rare, so kept immutable and the empty one shared (an
        # empty set cost 216 B in every replay)
        self.nullified = _NOTHING_NULLIFIED
        self.displaced: list[str] = []  # the ops the last `add` nullified
        self.latest: datetime.datetime | None = None  # the latest createdAt read
        self.trusted_signer: int | None = None  # set by `restore` only
        self.findings: list[Finding] = []
        self.warnings: list[str] = []

    def restore(self, entry: dict[str, Any], signer: int) -> OpRecord:
        """Add again an op its owner verified before (a mirror's stored op, signed by
        rotation key `signer`): the same bookkeeping as `add`, without hashing it or
        checking its signature again."""
        self.trusted_signer = signer
        try:
            return self.add(entry)
        finally:
            self.trusted_signer = None

    def add(self, entry: Any) -> OpRecord:
        record = OpRecord(self.count, "", "", "?", None)
        self.count += 1
        self.displaced = []
        if self.keep_records:
            self.records.append(record)
        try:
            self._add(entry, record)
        except _Rejected as err:
            finding = Finding(err.rule, str(err), record.index, record.cid or None)
            record.findings += (finding,)
            self.findings.append(finding)
        return record

    def _add(self, entry: Any, record: OpRecord) -> None:
        if not isinstance(entry, dict):
            raise _Rejected("§10.6", "log entry is not a JSON object")
        cid = entry.get("cid")
        record.cid = cid if isinstance(cid, str) else ""
        record.created_at = str(entry.get("createdAt", ""))
        logged = entry.get("nullified")
        record.logged_nullified = logged if isinstance(logged, bool) else None
        if entry.get("did") != self.did:
            raise _Rejected("§10.6", f"entry belongs to {entry.get('did')!r}, not {self.did}")
        try:
            created = parse_time(entry.get("createdAt"))
        except ValueError as err:
            raise _Rejected("§10.6", f"bad createdAt: {err}") from None
        self.latest = created
        raw: Any = entry.get("operation")  # a dict once parse_operation accepts it
        try:
            op = parse_operation(raw)
        except BadOperation as err:
            raise _Rejected(err.rule, str(err)) from None
        record.type, record.prev = op.type, op.prev
        if self.trusted_signer is not None:
            if self.count == 1:
                self._genesis(op, b"", b"", b"", created, record)
            else:
                self._next(op, b"", b"", created, record)
            return
        try:
            encoded = dag_cbor(raw)
        except NotEncodable as err:
            raise _Rejected("P-ENC-1", f"the op has no DAG-CBOR encoding: {err}") from None
        computed = cid_of(encoded)
        if computed != record.cid:
            raise _Rejected("P-CID-1", f"entry says cid {cid!r}, the op hashes to {computed}")
        try:
            signature = decode_signature(op.sig)
        except BadSignature as err:
            raise _Rejected(err.rule, str(err)) from None
        message = unsigned_dag_cbor(encoded, raw)
        if self.keep_records:
            self._warn_limits(op, len(encoded))
        if self.count == 1:
            self._genesis(op, encoded, message, signature, created, record)
        else:
            self._next(op, message, signature, created, record)

    def _warn_limits(self, op: Operation, size: int) -> None:
        """P-LIM-3: historical ops break P-LIM-1 and stay valid; say so, do not fail."""
        if op.state is None:
            return
        keys = op.state.rotation_keys
        if not keys:
            self.warnings.append("empty rotationKeys [P-LIM-1]")
        if len(set(keys)) != len(keys):
            self.warnings.append("duplicate rotationKeys [P-LIM-1]")
        if len(keys) > 5:
            self.warnings.append("more than 5 rotationKeys [P-LIM-1]")
        if size > 7500:
            self.warnings.append("operation over 7500 bytes [P-LIM-1]")

    def _genesis(
        self,
        op: Operation,
        encoded: bytes,
        message: bytes,
        signature: bytes,
        created: datetime.datetime,
        record: OpRecord,
    ) -> None:
        if op.prev is not None or op.state is None:
            raise _Rejected("P-DID-2", "the first op must be a genesis op (prev: null)")
        derived = did_of_genesis(encoded) if self.trusted_signer is None else self.did
        if derived != self.did:
            raise _Rejected("P-DID-1", f"the genesis op hashes to {derived}, not {self.did}")
        signer = self._sign_index(op.state.rotation_keys, message, signature)
        if signer is None:
            raise _Rejected(*why_unverified(op.state.rotation_keys, message, signature))
        self._accept(op, created, record, signer, op.state.rotation_keys)
        if self.keep_records:
            record.changes = _describe_genesis(op.state)

    def _next(
        self,
        op: Operation,
        message: bytes,
        signature: bytes,
        created: datetime.datetime,
        record: OpRecord,
    ) -> None:
        if op.prev is None:
            rule = "P-OP-3" if op.type == "create" else "P-NULL-3"
            raise _Rejected(rule, "a second genesis op (prev: null)")
        if op.prev in self.nullified:
            raise _Rejected("P-NULL-3", f"prev {op.prev} is nullified")
        if not self.chain:
            raise _Rejected("P-NULL-3", "no valid op before this one")
        parent = self.nodes.get(op.prev)
        if parent is None:
            raise _Rejected("P-NULL-3", f"prev {op.prev} is not an open op of this DID")
        if not parent.signers:
            raise _Rejected("P-SIG-5", "prev is a tombstone: no keys to verify against")
        signer = self._sign_index(parent.allowed, message, signature)
        if signer is None:
            weaker = _signer(parent.signers, message, signature)
            if weaker is not None:
                raise _Rejected(
                    "P-NULL-2",
                    f"signed by rotation key {weaker}, which does not "
                    "outrank the key that signed the op it would nullify",
                )
            raise _Rejected(*why_unverified(parent.allowed, message, signature))
        head = self.nodes[self.chain[-1]]
        displaced: list[str] = []
        if op.prev == self.chain[-1]:
            if created <= head.created:  # P-NULL-1
                raise _Rejected("P-NULL-1", "createdAt is not later than prev's")
        else:
            first = self.nodes[parent.child] if parent.child else head
            if created - first.created > RECOVERY_WINDOW:
                raise _Rejected("P-NULL-2", "cannot nullify an op after 72h")
            if created <= head.created:
                raise _Rejected("P-NULL-2", "createdAt is not later than the head's")
            position = self.chain.index(op.prev)
            displaced = self.displaced = self.chain[position + 1 :]
            for cid in displaced:
                nullified = self.nodes.pop(cid).record
                nullified.nullified, nullified.nullified_by = True, record.cid
                self.nullified |= {cid}
                self._settle(nullified)
            del self.chain[position + 1 :]
        parent.allowed = parent.allowed[:signer]  # P-NULL-4
        parent.child = record.cid
        self._accept(op, created, record, signer, parent.signers)
        if not self.keep_records:
            return
        assert parent.op is not None  # kept whole while records are kept
        record.changes = _describe_change(parent.op.state, op.state)
        if displaced:
            what = f"recovery: nullifies {len(displaced)} op(s)"
            record.changes = (what, *(c for c in record.changes if c != "no change"))

    def _sign_index(self, keys: tuple[str, ...], message: bytes, signature: bytes) -> int | None:
        if self.trusted_signer is not None:
            return self.trusted_signer if self.trusted_signer < len(keys) else None
        return _signer(keys, message, signature)

    def _accept(
        self,
        op: Operation,
        created: datetime.datetime,
        record: OpRecord,
        signer: int,
        keys: tuple[str, ...],
    ) -> None:
        record.accepted = True
        record.signer_index, record.signer_key = signer, keys[signer]
        if self.chain and not self.keep_records:
            self.nodes[self.chain[-1]].op = None  # no longer the head
        self.nodes[record.cid] = _Node(op, created, record, op.signers, op.signers)
        self.chain.append(record.cid)

    def _settle(self, record: OpRecord) -> None:
        """An op's fate is final: its `nullified` flag in the log must match the replay's."""
        if record.logged_nullified is not None and record.logged_nullified != record.nullified:
            finding = Finding(
                "§10.6",
                f"the log marks nullified={record.logged_nullified}, "
                f"the replay says {record.nullified}",
                record.index,
                record.cid,
            )
            record.findings += (finding,)
            self.findings.append(finding)

    def prune(self, now: datetime.datetime | None = None) -> None:
        """Forget active ops whose child is past the recovery window at `now` (by default
        the latest op's time): nothing can fork from them any more (P-NULL-2), so their fate
        is final. Keeps the head."""
        now = now or self.latest
        while now is not None and len(self.chain) > 1:
            if now - self.nodes[self.chain[1]].created <= RECOVERY_WINDOW:
                break
            self._settle(self.nodes.pop(self.chain.pop(0)).record)

    @property
    def head(self) -> Operation | None:
        """The op in force: the end of the active chain (None before any valid op)."""
        return self.nodes[self.chain[-1]].op if self.chain else None

    def audit(self) -> Audit:
        for cid in self.chain:
            self._settle(self.nodes[cid].record)
        findings = list(self.findings)
        if not self.count:
            findings.append(Finding("§10.6", "the audit log is empty"))
        head = self.head
        deactivated = head is not None and head.state is None
        return Audit(
            did=self.did,
            ops=tuple(self.records),
            state=head.state if head else None,
            deactivated=deactivated,
            findings=tuple(findings),
            warnings=tuple(dict.fromkeys(self.warnings)),
        )


def replay(did: str, log: Any) -> Audit:
    """Verify a whole `/log/audit` answer (a JSON array of entries, oldest first)."""
    run = Replay(did)
    if not isinstance(log, list):
        run.findings.append(Finding("§10.6", "the audit log is not a JSON array"))
        return run.audit()
    for entry in log:
        run.add(entry)
    return run.audit()


def _signer(keys: tuple[str, ...], message: bytes, signature: bytes) -> int | None:
    """P-SIG-5: try the keys in order; the index of the first that verifies is the priority."""
    for index, key in enumerate(keys):
        if verify(key, message, signature):
            return index
    return None


def _pds(state: State) -> str | None:
    service = state.service("atproto_pds")
    return service.endpoint if service else None


def _describe_genesis(state: State) -> tuple[str, ...]:
    handle = declared_handle(list(state.also_known_as))
    return (
        f"created: handle {handle}, pds {_pds(state)}, "
        f"{counted(len(state.rotation_keys), 'rotation key')}",
    )


def _describe_change(before: State | None, after: State | None) -> tuple[str, ...]:
    if after is None:
        return ("tombstone: the DID is deactivated",)
    if before is None:
        return ()
    changes = []
    old, new = (
        declared_handle(list(before.also_known_as)),
        declared_handle(list(after.also_known_as)),
    )
    if before.also_known_as != after.also_known_as:
        changes.append(f"handle {old} -> {new}" if old != new else "aliases changed")
    if _pds(before) != _pds(after):
        changes.append(f"pds {_pds(before)} -> {_pds(after)}")
    if before.method("atproto") != after.method("atproto"):
        changes.append("signing key rotated")
    if before.rotation_keys != after.rotation_keys:
        changes.append("rotation keys changed")
    if before.services != after.services and _pds(before) == _pds(after):
        changes.append("services changed")
    return tuple(changes) or ("no change",)
