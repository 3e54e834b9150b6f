"""An audit run's report: who needs attention, how badly, since when. One row per identity,
sorted by severity, then name; the same rows as text (one screen), JSON, CSV or Markdown."""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from atwhois.resolver import Status

from .checks import iso
from .findings import STATE_SEVERITY, Finding, Severity
from .store import AuditStore


@dataclass
class RunReport:
    run_id: int
    source: str = "watch-list"
    started_at: float = 0.0
    finished_at: float | None = None
    status: str = "running"  # finished, failed
    total: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    findings: Counter[str] = field(default_factory=Counter)  # by kind
    by_severity: Counter[str] = field(default_factory=Counter)  # the new findings'
    seconds: float = 0.0
    delivered: bool | None = None  # the webhook: None when there was nothing to send

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "source": self.source,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "status": self.status,
            "total": self.total,
            "by_status": dict(self.by_status),
            "findings_by_kind": dict(self.findings),
            "findings_by_severity": dict(self.by_severity),
            "seconds": round(self.seconds, 3),
            "webhook_delivered": self.delivered,
        }


FORMATS = ("text", "json", "csv", "markdown")
COLUMNS = (
    "severity",
    "identifier",
    "label",
    "status",
    "reason",
    "since",
    "previous",
    "did",
    "handle",
    "pds",
    "method",
    "ms",
    "findings",
)
SCREEN = 15  # rows per severity in the text summary


@dataclass(frozen=True, slots=True)
class Row:
    severity: Severity  # the worse of the state's and of this run's findings
    identifier: str
    label: str | None
    status: str
    reason: str | None
    since: str | None  # first seen in this status
    previous: str | None  # the status before
    did: str | None
    handle: str
    pds: str | None
    method: str
    ms: float
    findings: tuple[Finding, ...]

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__slots__}
        return {
            **data,
            "severity": str(self.severity),
            "findings": [f.to_json() for f in self.findings],
        }

    def cells(self) -> dict[str, str]:
        """Flat text, for CSV and Markdown."""
        data = {**self.to_json(), "ms": f"{self.ms:.0f}"}
        data["findings"] = "; ".join(f"{f.kind} ({f.severity}): {f.detail}" for f in self.findings)
        return {k: "" if data[k] is None else str(data[k]) for k in COLUMNS}


_BY_RANK = {severity.rank: severity for severity in Severity}


class StoredRows:
    """A run's rows in report order, read from the store a chunk at a time: only each
    row's sort key is held (a report of a million rows built at once took gigabytes)."""

    CHUNK = 500

    def __init__(self, store: AuditStore, run_id: int) -> None:
        self._store = store
        self.findings: dict[str, list[Finding]] = {}
        for finding in store.run_findings(run_id):
            self.findings.setdefault(finding.identifier, []).append(finding)
        keys, checked = [], set()
        for check_id, identifier, status in store.run_check_keys(run_id):
            own = self.findings.get(identifier, ())
            if own:
                checked.add(identifier)
            severity = max(
                [STATE_SEVERITY[Status(status)], *(f.severity for f in own)], key=lambda s: s.rank
            )
            keys.append((-severity.rank, identifier, check_id))
        keys.sort()
        self._keys = keys
        # findings about no one identity of the run: an upstream's outage
        self.upstreams = [
            f for name, found in self.findings.items() if name not in checked for f in found
        ]

    def __len__(self) -> int:
        return len(self._keys)

    def severities(self) -> Iterator[Severity]:
        return (_BY_RANK[-rank] for rank, _, _ in self._keys)

    def __iter__(self) -> Iterator[Row]:
        for start in range(0, len(self._keys), self.CHUNK):
            chunk = self._keys[start : start + self.CHUNK]
            checks = self._store.checks_by_id([check_id for _, _, check_id in chunk])
            names = [identifier for _, identifier, _ in chunk]
            states, labels = self._store.states(names), self._store.labels(names)
            for rank, identifier, check_id in chunk:
                check, state = checks[check_id], states.get(identifier)
                yield Row(
                    _BY_RANK[-rank],
                    identifier,
                    labels.get(identifier),
                    check.status,
                    check.error,
                    iso(state.since) if state else None,
                    state.previous if state else None,
                    check.did,
                    check.handle,
                    check.pds,
                    check.method,
                    check.duration_ms,
                    tuple(self.findings.get(identifier, ())),
                )


@dataclass(frozen=True)
class Report:
    run: RunReport
    rows: Sequence[Row] | StoredRows
    upstreams: list[Finding]  # outages: findings about no one identity

    @classmethod
    def of(cls, run: RunReport, store: AuditStore) -> Report:
        rows = StoredRows(store, run.run_id)
        return cls(run, rows, rows.upstreams)

    def _severities(self) -> Iterable[Severity]:
        if isinstance(self.rows, StoredRows):
            return self.rows.severities()
        return (row.severity for row in self.rows)

    def worst(self) -> Severity:
        levels = [*self._severities(), *(f.severity for f in self.upstreams)]
        return max(levels, key=lambda s: s.rank, default=Severity.OK)

    def counts(self) -> dict[str, int]:
        counted = {str(s): 0 for s in Severity}
        for severity in self._severities():
            counted[str(severity)] += 1
        return counted

    def write(self, out: TextIO, fmt: str) -> None:
        """The report in `fmt`, a row at a time: a 10,000-row JSON report made at once
        (json.dumps' chunks, then its text) took the audit's peak memory 40 MiB higher."""
        if fmt == "json":
            head = {**self.run.to_json(), "rows_by_severity": self.counts()}
            out.write(json.dumps(head, indent=2)[:-2] + ',\n  "rows": [')
            for index, row in enumerate(self.rows):
                # what json.dumps(indent=2) writes for an item of a list two levels down
                text = json.dumps(row.to_json(), indent=2).replace("\n", "\n    ")
                out.write(("," if index else "") + "\n    " + text)
            upstreams = json.dumps([f.to_json() for f in self.upstreams], indent=2)
            closing = "\n  ]" if self.rows else "]"
            out.write(closing + ',\n  "upstreams": ' + upstreams.replace("\n", "\n  ") + "\n}\n")
        elif fmt == "csv":
            writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
            writer.writeheader()
            writer.writerows(r.cells() for r in self.rows)
        elif fmt == "markdown":
            out.write("| " + " | ".join(COLUMNS) + " |\n" + "|" + "---|" * len(COLUMNS) + "\n")
            for row in self.rows:
                cells = (row.cells()[c].replace("|", "\\|").replace("\n", " ") for c in COLUMNS)
                out.write("| " + " | ".join(cells) + " |\n")
        else:
            out.write(self._text())

    def _text(self) -> str:
        """One screen: the counts, then who is critical and who is a warning, by name."""
        run, counts = self.run, self.counts()
        new = sum(run.by_severity.values())
        lines = [
            f"audit run {run.run_id} ({run.source}, {run.status}): {run.total} identities in "
            f"{run.seconds:.1f} s: {counts['critical']} critical, {counts['warning']} warning, "
            f"{counts['info']} info, {counts['ok']} ok; {new} new findings"
        ]
        for outage in self.upstreams:
            lines.append(f"upstream {outage.identifier} unavailable: {outage.detail}")
        shown: dict[Severity, list[Row]] = {Severity.CRITICAL: [], Severity.WARNING: []}
        for row in self.rows:
            if row.severity in shown:
                if len(shown[row.severity]) < SCREEN:
                    shown[row.severity].append(row)
            elif isinstance(self.rows, StoredRows):  # worst first: the rest need not be read
                break
        for level, rows in shown.items():
            if not rows:
                continue
            lines.append(f"{level}:")
            for row in rows:
                name = row.identifier + (f" [{row.label}]" if row.label else "")
                what = ", ".join(f.kind for f in row.findings) or row.status
                since = f" since {row.since}" if row.since else ""
                was = f" (was {row.previous})" if row.previous else ""
                lines.append(f"  {name}: {what}; {row.status}{since}{was}")
                if row.reason:
                    lines.append(f"      {row.reason}")
            if counts[str(level)] > SCREEN:
                more = counts[str(level)] - SCREEN
                lines.append(f"  … and {more} more (--format csv lists all)")
        if run.delivered is False:
            lines.append("webhook: NOT delivered; kept, and sent again by the next run")
        return "\n".join(lines) + "\n"
