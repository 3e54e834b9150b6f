"""Streaming verification of a PLC directory export (`GET /export`, JSON Lines).

Every DID met is replayed as its operations arrive, interleaved with everyone else's. Memory
stays bounded by what a later op could still refer to: per DID the head and the ops still
inside the 72-hour recovery window (`Replay.prune`), never the whole log.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidDid
from ..syntax import check_plc_did
from ..untrusted import parse_json
from .audit import Finding, Replay

_EXAMPLES = 20


@dataclass
class ExportSummary:
    dids: int = 0
    ops: int = 0
    invalid_ops: int = 0  # ops with a finding, not on the allow-list
    allowed_ops: int = 0  # ops with a finding, on the allow-list of known bad ops
    bad_lines: int = 0  # lines that are not an export entry at all
    by_rule: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.invalid_ops == 0 and self.bad_lines == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "dids": self.dids,
            "ops": self.ops,
            "invalid_ops": self.invalid_ops,
            "allowed_ops": self.allowed_ops,
            "bad_lines": self.bad_lines,
            "by_rule": dict(self.by_rule),
            "examples": self.examples,
        }


class ExportCheck:
    """What `verify_export` does, a line at a time: `feed` the lines in export order (or
    all the lines of some DIDs, in order: each DID is replayed on its own), then `finish`."""

    def __init__(self, known_bad: frozenset[str] = frozenset()) -> None:
        self.summary = ExportSummary()
        self._known_bad = known_bad
        self._replays: dict[str, Replay] = {}

    def feed(self, line: str | bytes) -> None:
        if not line.strip():
            return
        summary = self.summary
        entry = _entry(line)
        # A DID already replayed was checked when its first line came.
        run = self._replays.get(entry["did"]) if entry is not None else None
        if run is None:
            if entry is None or not _is_plc_did(entry["did"]):
                summary.bad_lines += 1
                summary.by_rule["§12"] += 1
                return
            run = self._replays[entry["did"]] = Replay(entry["did"], keep_records=False)
            summary.dids += 1
        run.add(entry)
        summary.ops += 1
        _drain(run, summary, self._known_bad)
        run.prune()

    def finish(self) -> ExportSummary:
        for run in self._replays.values():
            run.audit()
            _drain(run, self.summary, self._known_bad)
        return self.summary


def verify_export(
    lines: Iterable[str | bytes],
    *,
    known_bad: frozenset[str] = frozenset(),
    progress: Callable[[ExportSummary], None] | None = None,
    progress_every: int = 50_000,
) -> ExportSummary:
    """Replay every DID of an export. `known_bad` holds CIDs and DIDs the live directory is
    known to have accepted wrongly (go-didplc's lists): their findings are counted apart."""
    check = ExportCheck(known_bad)
    for line in lines:
        before = check.summary.ops
        check.feed(line)
        if progress and check.summary.ops != before and check.summary.ops % progress_every == 0:
            progress(check.summary)
    return check.finish()


def merge(summaries: Iterable[ExportSummary]) -> ExportSummary:
    """The summary of an export whose DIDs were checked in parts (each DID in one part)."""
    merged = ExportSummary()
    for part in summaries:
        merged.dids += part.dids
        merged.ops += part.ops
        merged.invalid_ops += part.invalid_ops
        merged.allowed_ops += part.allowed_ops
        merged.bad_lines += part.bad_lines
        merged.by_rule.update(part.by_rule)
        merged.examples.extend(part.examples[: _EXAMPLES - len(merged.examples)])
    return merged


# A line that begins with its top-level `did` (after `seq`/`type`, in the seq format) names
# its DID here; any other line is parsed to find it. Routing by a DID the line does not
# have would split a DID's replay between two workers.
_LEADING_DID = re.compile(
    rb'\{\s*(?:"seq"\s*:\s*\d+\s*,\s*|"type"\s*:\s*"sequenced_op"\s*,\s*)*'
    rb'"did"\s*:\s*"(did:plc:[a-z2-7]{24})"'
)


def route(line: str | bytes) -> int:
    """A number for the DID of a line (0 for a line without one), the same for every line
    of a DID: which worker replays it."""
    raw = line.encode() if isinstance(line, str) else line
    match = _LEADING_DID.match(raw)
    if match is not None:
        return zlib.crc32(match.group(1))
    entry = export_entry(raw)
    return zlib.crc32(entry["did"].encode()) if entry is not None else 0


def export_entry(line: str | bytes) -> dict[str, Any] | None:
    """One export line as an entry with a well-formed did:plc, or None."""
    entry = _entry(line)
    return entry if entry is not None and _is_plc_did(entry["did"]) else None


def _entry(line: str | bytes) -> dict[str, Any] | None:
    """One export line as an entry with a `did` string, or None."""
    try:
        entry = parse_json(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("did"), str):
        return None
    return entry  # either line format: the seq one's `type` and `seq` are not read


def _is_plc_did(did: str) -> bool:
    try:
        check_plc_did(did)
    except InvalidDid:
        return False
    return True


def _drain(run: Replay, summary: ExportSummary, known_bad: frozenset[str]) -> None:
    """Count the replay's new findings (an op counts once) and forget them."""
    if not run.findings:
        return
    first: dict[int | None, Finding] = {}
    for finding in run.findings:
        summary.by_rule[finding.rule] += 1
        first.setdefault(finding.index, finding)
    for finding in first.values():
        if finding.cid in known_bad or run.did in known_bad:
            summary.allowed_ops += 1
            continue
        summary.invalid_ops += 1
        if len(summary.examples) < _EXAMPLES:
            summary.examples.append(
                f"{run.did} {finding.cid or '?'}: {finding.message} [{finding.rule}]"
            )
    run.findings.clear()
