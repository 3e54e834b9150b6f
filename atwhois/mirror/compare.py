"""Does the mirror hold, DID by DID, what its upstream serves? (P-CMP-1, `atwhois plc
compare`), and taking out what the upstream removed, when asked (P-CMP-2).

The comparison is a pure function of the two logs, the mirror's refusals and the document
findings; `Comparer` reads them (the upstream through the mirror's own paced client, so a
comparison of every DID keeps to the directory's rate).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from atwhois.resolver.errors import ResolutionError
from atwhois.resolver.identity import now_iso
from atwhois.resolver.plc.audit import Replay
from atwhois.resolver.plc.document import compare_state

from .records import LogRewrite, Rejection, StoredOp
from .store import SqlMirrorStore
from .upstream import Upstream

REMOVED = "removed"  # the mirror keeps an op the upstream no longer serves
REFUSED = "refused"  # the upstream serves an op the mirror refused (with the rule)
MISSING = "missing"  # the upstream serves an op the mirror lacks and did not refuse
NULLIFIED = "nullified"  # both hold the op, only one side nullifies it
ORDER = "order"  # both hold the same ops in another order
DOCUMENT = "document"  # the upstream's document says otherwise than the mirror's state
REMOVAL_RULE = "P-CMP-2"  # the rule a removed op is kept under, among the refused
REFUSALS_READ = 10_000  # of one DID's refusals (a DID with more is a flood, not a log)
KEPT = 10_000  # comparisons kept for the JSON of a run, of each kind (the rest counted)
GIVE_UP_AFTER = 100  # DIDs in a row the upstream did not answer before a run stops

_BASE32 = "abcdefghijklmnopqrstuvwxyz234567"


@dataclass(frozen=True, slots=True)
class Difference:
    kind: str
    cid: str | None
    detail: str
    rule: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "cid": self.cid, "detail": self.detail, "rule": self.rule}


@dataclass(frozen=True, slots=True)
class DidComparison:
    """One DID compared: its differences, or why there is no verdict (`unavailable`: the
    upstream could not be asked, or did not answer with a log)."""

    did: str
    differences: tuple[Difference, ...] = ()
    unavailable: str | None = None

    @property
    def same(self) -> bool:
        return not self.differences and self.unavailable is None

    @property
    def removed(self) -> list[str]:
        return [d.cid for d in self.differences if d.kind == REMOVED and d.cid]

    def to_json(self) -> dict[str, Any]:
        return {
            "did": self.did,
            "same": self.same,
            "differences": [d.to_json() for d in self.differences],
            "unavailable": self.unavailable,
        }


def compare_logs(
    mine: list[StoredOp], theirs: list[Any], refused: dict[str, Rejection]
) -> list[Difference]:
    """P-CMP-1 over one DID's logs: the mirror's ops (`mine`, in order), the upstream's
    `/log/audit` entries (`theirs`), and what the mirror refused of the DID, by CID."""
    their_entries = [e for e in theirs if isinstance(e, dict) and isinstance(e.get("cid"), str)]
    their_nullified = {e["cid"]: bool(e.get("nullified")) for e in their_entries}
    my_nullified = {op.cid: op.nullified for op in mine}
    found: list[Difference] = []
    for op in mine:
        if op.cid not in their_nullified:
            detail = f"created {op.created_at}: kept here, no longer served upstream"
            found.append(Difference(REMOVED, op.cid, detail))
    for entry in their_entries:
        cid = entry["cid"]
        if cid in my_nullified:
            continue
        refusal = refused.get(cid)
        if refusal is not None:
            found.append(Difference(REFUSED, cid, refusal.message, refusal.rule))
        else:
            detail = f"created {entry.get('createdAt')}: served upstream, not applied here"
            found.append(Difference(MISSING, cid, detail))
    for cid, nullified in my_nullified.items():
        if cid in their_nullified and their_nullified[cid] != nullified:
            here, there = ("nullified", "in force") if nullified else ("in force", "nullified")
            found.append(Difference(NULLIFIED, cid, f"{here} here, {there} upstream"))
    my_order = [op.cid for op in mine if op.cid in their_nullified]
    their_order = [e["cid"] for e in their_entries if e["cid"] in my_nullified]
    if my_order != their_order:
        # the mirror's CIDs are unique and the upstream's hold them all: only the upstream's
        # list may be the longer (an op it lists twice)
        shorter = len(my_order)
        first = next((i for i in range(shorter) if my_order[i] != their_order[i]), shorter)
        here = my_order[first] if first < shorter else "nothing"
        detail = f"from op {first + 1} on: {here} here, {their_order[first]} upstream"
        found.append(Difference(ORDER, None, detail))
    return found


@dataclass
class CompareOutcome:
    """A run of comparisons: how many were the same, different, not compared; the first
    `KEPT` of those that differ or were not compared (a run over every DID holds no more,
    whatever the mirror's size), and the removals applied (DID, the CIDs taken out)."""

    compared: int = 0
    same: int = 0
    differing: int = 0
    unanswered: int = 0
    unanswered_in_a_row: int = 0
    different: list[DidComparison] = field(default_factory=list)
    unavailable: list[DidComparison] = field(default_factory=list)
    applied: list[tuple[str, list[str]]] = field(default_factory=list)

    def add(self, comparison: DidComparison) -> None:
        self.compared += 1
        if comparison.unavailable is not None:
            self.unanswered += 1
            self.unanswered_in_a_row += 1
            if len(self.unavailable) < KEPT:
                self.unavailable.append(comparison)
            return
        self.unanswered_in_a_row = 0
        if comparison.differences:
            self.differing += 1
            if len(self.different) < KEPT:
                self.different.append(comparison)
        else:
            self.same += 1

    @property
    def upstream_gone(self) -> bool:
        """Whether the upstream left the last `GIVE_UP_AFTER` DIDs in a row unanswered: a
        run over every DID then stops rather than going through them all for nothing."""
        return self.unanswered_in_a_row >= GIVE_UP_AFTER

    def exit_code(self) -> int:
        return 1 if self.differing else 3 if self.unanswered else 0

    def summary(self) -> str:
        line = (
            f"compared {self.compared:,} DIDs with the upstream: {self.same:,} the same, "
            f"{self.differing:,} different, {self.unanswered:,} not compared"
        )
        if self.upstream_gone:
            line += f" (stopped: the upstream answered none of the last {GIVE_UP_AFTER})"
        applied = [
            f"  {did}: {len(cids)} op(s) the upstream removed taken out, kept as evidence "
            f"[{REMOVAL_RULE}]"
            for did, cids in self.applied
        ]
        return "\n".join([line, *applied])

    def to_json(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "same": self.same,
            "different_count": self.differing,
            "unavailable_count": self.unanswered,
            "stopped": self.upstream_gone,
            "different": [c.to_json() for c in self.different],
            "unavailable": [c.to_json() for c in self.unavailable],
            "applied": [{"did": did, "removed": cids} for did, cids in self.applied],
        }


class Comparer:
    """Compares DIDs of the mirror in `store` with `upstream` (paced by its own client)."""

    def __init__(self, store: SqlMirrorStore, upstream: Upstream) -> None:
        self.store = store
        self.upstream = upstream

    def compare(self, did: str) -> DidComparison:
        try:
            theirs = self.upstream.audit_log(did)
            served = self.upstream.document(did) if theirs is not None else None
        except (ResolutionError, ValueError) as err:
            return DidComparison(did, unavailable=str(err))
        mine = self.store.log(did)
        refused = {r.cid: r for r in self.store.rejected(REFUSALS_READ, did)}
        found = compare_logs(mine, theirs or [], refused)
        current = self.store.in_force(did)
        if current is not None and theirs is not None:
            for finding in compare_state(did, current.state(did), served):
                found.append(Difference(DOCUMENT, None, finding.message, finding.rule))
        return DidComparison(did, tuple(found))

    def sample(self, count: int, rng: random.Random | None = None) -> list[str]:
        """About `count` DIDs of the mirror picked at random: the first DID at or after a
        random did:plc (their identifiers are hashes, spread evenly), through the table's
        key: a look-up each, however large the mirror."""
        rng = rng or random.Random()
        picked: dict[str, None] = {}
        for _ in range(count * 2):
            if len(picked) >= count:
                break
            start = "did:plc:" + "".join(rng.choice(_BASE32) for _ in range(24))
            found = self.store.dids_after(start, 1) or self.store.dids_after("", 1)
            picked.update(dict.fromkeys(found))
        return list(picked)

    def every_did(self, page: int = 1000) -> Iterator[str]:
        """Every DID of the mirror, in order, a page at a time."""
        after = ""
        while dids := self.store.dids_after(after, page):
            yield from dids
            after = dids[-1]

    def apply_removals(self, comparison: DidComparison) -> LogRewrite:
        """P-CMP-2: the DID replayed by the rules without the ops its upstream removed; the
        removed ones (and any op that built on one) kept among the refused as evidence."""
        removed = set(comparison.removed)
        did, seen_at = comparison.did, now_iso()
        log = self.store.log(did)
        replay = Replay(did)
        kept: list[StoredOp] = []
        refused: list[Rejection] = []
        for op in log:
            entry = op.replay_entry()
            line = json.dumps(entry, separators=(",", ":"))  # the evidence kept, if refused
            if op.cid in removed:
                message = f"{self.upstream.url} no longer serves it (compared {seen_at})"
                refused.append(
                    Rejection(did, op.cid, op.created_at, REMOVAL_RULE, message, line, seen_at)
                )
                continue
            record = replay.add(entry)
            if record.accepted:
                kept.append(op)
            else:
                finding = record.findings[0]
                refused.append(
                    Rejection(
                        did, op.cid, op.created_at, finding.rule, finding.message, line, seen_at
                    )
                )
        kept_seqs = {op.seq for op in kept}
        dropped = [op.seq for op in log if op.seq not in kept_seqs]
        head = None
        if kept:
            head_cid = replay.chain[-1]
            head = next(op.seq for op in kept if op.cid == head_cid)
        tombstoned = replay.head is None or replay.head.state is None
        rewrite = LogRewrite(
            [(op.seq, op.cid in replay.nullified) for op in kept],
            dropped,
            refused,
            head,
            tombstoned,
        )
        self.store.rewrite_log(did, rewrite)
        return rewrite
