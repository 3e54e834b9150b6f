"""The audit store: watch-list, runs, checks, findings, each identity's current state and
the webhook deliveries not yet made. Durable data, unlike the cache: it is never dropped.
A SQLite file by default; PostgreSQL (`postgresql://…`) where audits run on several hosts
(`audit.database`). Times are Unix seconds inside, ISO 8601 wherever they leave.

What is kept (`record`, `prune`): per identity its current state, every check where
something changed (a finding, or another status), and its last check. A check that changed
nothing replaces the last one when that one changed nothing either: an identity that stays
as it was costs one row however many runs check it, and the run's summary counts it.
Checks left behind that way, findings and runs older than `audit_keep_days` are pruned at
the end of a run; changes never are, nor an identity's last check and the last one that
reached its upstream, nor findings whose webhook delivery is still owed."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atwhois.foundation import data_path, defaults
from atwhois.foundation.sql import in_chunks, marks
from atwhois.resolver.errors import AtwhoisError

from .checks import Check, iso
from .database import Database
from .findings import Finding
from .runs import SharedRuns
from .schema import set_up

DAY = 86400.0


# A check, its findings, and its failure streak (None: left as it was)
Judged = tuple[Check, list[Finding], int | None]


@dataclass(frozen=True, slots=True)
class State:
    """An identity's current status, since when, and the status before it."""

    status: str
    since: float
    previous: str | None


LABEL_MAX = 200  # characters of a watch label: a name for people, not a document


class LabelTooLong(AtwhoisError, ValueError):
    """A watch label over `LABEL_MAX` characters."""


def check_label(label: str | None) -> None:
    """Raises `LabelTooLong` for a label over `LABEL_MAX` characters (None: no label)."""
    if label is not None and len(label) > LABEL_MAX:
        raise LabelTooLong(f"a label of {len(label)} characters; at most {LABEL_MAX}")


def default_audit_path() -> Path:
    return data_path("audit.db")


@dataclass(frozen=True, slots=True)
class Watched:
    identifier: str
    label: str | None = None
    added_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"identifier": self.identifier, "label": self.label, "added_at": iso(self.added_at)}


class AuditStore:
    def __init__(self, where: str | Path) -> None:
        self.location = str(where)
        self.db = Database(where)
        try:
            set_up(self.db)
        except BaseException:
            self.db.close()
            raise
        self.runs_shared = SharedRuns(self.db)
        self.runs_shared.close_interrupted()

    def close(self) -> None:
        self.db.close()

    # --- the watch-list ---------------------------------------------------------------

    def watch_add(self, identifier: str, label: str | None = None) -> bool:
        """True if it was not watched before. A label given replaces the one kept; none
        given keeps it."""
        return self.watch_import([(identifier, label)]) == 1

    def watch_import(self, entries: Iterable[tuple[str, str | None]]) -> int:
        """Add many at once, in one transaction (all or none); how many were new. A label
        longer than `LABEL_MAX` characters is refused (`LabelTooLong`), the rest with it."""
        rows = [(identifier, label, time.time()) for identifier, label in entries]
        for _, label, _ in rows:
            check_label(label)
        with self.db.transaction():
            before = self._watched()
            self.db.many(
                "INSERT INTO watch VALUES (?, ?, ?) ON CONFLICT(identifier) DO UPDATE SET "
                "label=COALESCE(excluded.label, watch.label)",
                rows,
            )
            return self._watched() - before

    def _watched(self) -> int:
        row = self.db.one("SELECT count(*) FROM watch")
        return int(row[0]) if row else 0

    def watch_remove(self, identifier: str) -> bool:
        return bool(self.db.execute("DELETE FROM watch WHERE identifier=?", (identifier,)).rowcount)

    def is_watched(self, identifier: str) -> bool:
        return self.db.one("SELECT 1 FROM watch WHERE identifier=?", (identifier,)) is not None

    def watch_list(self) -> list[Watched]:
        rows = self.db.rows("SELECT identifier, label, added_at FROM watch ORDER BY identifier")
        return [Watched(*row) for row in rows]

    def labels(self, identifiers: Iterable[str] | None = None) -> dict[str, str]:
        """The labels of these identities (None: of all)."""
        labelled = "SELECT identifier, label FROM watch WHERE label IS NOT NULL"
        if identifiers is None:
            return {identifier: label for identifier, label in self.db.rows(labelled)}
        found: dict[str, str] = {}
        for chunk in in_chunks(identifiers):
            rows = self.db.rows(f"{labelled} AND identifier IN ({marks(chunk)})", chunk)
            found.update((identifier, label) for identifier, label in rows)
        return found

    # --- checks, findings, states -----------------------------------------------------

    def start_run(self, source: str) -> tuple[int, float]:
        """A run of this process alone, with nothing to check yet (`runs_shared.open`
        gives it the identities)."""
        run = self.runs_shared.open(source, [], defaults.AUDIT_LEASE)
        return run.id, run.started_at

    def finish_run(
        self, run_id: int, summary: dict[str, Any], status: str, finished_at: float
    ) -> None:
        self.db.execute(
            "UPDATE runs SET finished_at=?, summary=?, status=? WHERE id=?",
            (finished_at, json.dumps(summary), status, run_id),
        )

    def previous(self, identifiers: Iterable[str]) -> dict[str, tuple[Check | None, int]]:
        """Of each identity checked before: the last check that reached the upstream, and
        the transient failures since."""
        found: dict[str, tuple[Check | None, int]] = {}
        for chunk in in_chunks(identifiers):
            for identifier, failures, data in self.db.rows(
                "SELECT s.identifier, s.failures, c.data FROM streaks s LEFT JOIN checks c "
                f"ON c.id = s.last_reached WHERE s.identifier IN ({marks(chunk)})",
                chunk,
            ):
                check = Check.from_json(json.loads(data)) if data else None
                found[identifier] = (check, int(failures))
        return found

    def record(self, run_id: int, judged: list[Judged], *, claimed: bool = False) -> int:
        """Checks, each with its findings and its failure streak (None: left as it was, for
        a check that failed in an upstream's outage), and the identities' states, in one
        transaction; how many were kept. `claimed`: the identities were claimed in the run
        (`SharedRuns.claim`): one whose claim was lost (its lease ran out and another
        process took it) is not kept."""
        with self.db.transaction():
            if claimed:
                ours = self.runs_shared.settle(run_id, [check.identifier for check, *_ in judged])
                judged = [entry for entry in judged if entry[0].identifier in ours]
            ids = self._keep(run_id, judged)
            self.db.many(
                # a row rewritten as it was is a dead one for PostgreSQL to vacuum: only
                # what changed is written
                "INSERT INTO streaks VALUES (?, ?, ?) ON CONFLICT(identifier) DO UPDATE SET "
                "failures=excluded.failures, last_reached=COALESCE(excluded.last_reached, "
                "streaks.last_reached) WHERE streaks.failures != excluded.failures OR "
                "COALESCE(excluded.last_reached, streaks.last_reached, -1) != "
                "COALESCE(streaks.last_reached, -1)",
                [
                    (check.identifier, failures, None if check.transient else ids[check.identifier])
                    for check, _, failures in judged
                    if failures is not None
                ],
            )
            self.db.many(
                "INSERT INTO states VALUES (?, ?, ?, NULL) ON CONFLICT(identifier) DO UPDATE SET "
                "previous=states.status, status=excluded.status, since=excluded.since "
                "WHERE states.status != excluded.status",
                [(check.identifier, check.status, check.checked_at) for check, *_ in judged],
            )
            self._add_findings(run_id, [f for _, findings, _ in judged for f in findings])
        return len(judged)

    def _keep(self, run_id: int, judged: list[Judged]) -> dict[str, int]:
        """Each check's row, by identifier: a new one when something changed, or when the
        last one was a change (kept as such); else the last one, rewritten. An identity's
        first check is not a change: the next replaces it unless that one finds something."""
        names = [check.identifier for check, *_ in judged]
        last: dict[str, tuple[int, str, int]] = {}
        for chunk in in_chunks(names):
            rows = self.db.rows(
                "SELECT c.identifier, c.id, c.status, c.changed FROM checks c WHERE c.identifier "
                f"IN ({marks(chunk)}) AND c.id = (SELECT max(id) FROM checks l "
                "WHERE l.identifier = c.identifier)",
                chunk,
            )
            last.update((name, (int(i), status, int(changed))) for name, i, status, changed in rows)
        ids, rewritten, added = {}, [], []
        for check, findings, _ in judged:
            before = last.get(check.identifier)
            changed = before is not None and (bool(findings) or before[1] != check.status)
            if before is not None and not changed and not before[2]:
                ids[check.identifier] = before[0]
                rewritten.append((run_id, check.checked_at, check.encode(), before[0]))
            else:
                row = (check.checked_at, check.status, check.encode(), int(changed))
                added.append((run_id, check.identifier, *row))
        self.db.many("UPDATE checks SET run_id=?, checked_at=?, data=? WHERE id=?", rewritten)
        self.db.many(
            "INSERT INTO checks (run_id, identifier, checked_at, status, data, changed) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            added,
        )
        for chunk in in_chunks([row[1] for row in added]):
            rows = self.db.rows(
                "SELECT identifier, max(id) FROM checks WHERE identifier IN "
                f"({marks(chunk)}) GROUP BY identifier",
                chunk,
            )
            ids.update((name, int(i)) for name, i in rows)
        return ids

    def record_findings(self, run_id: int, findings: list[Finding]) -> None:
        """Findings about no one identity (an upstream's outage)."""
        self._add_findings(run_id, findings)

    def _add_findings(self, run_id: int, findings: list[Finding]) -> None:
        self.db.many(
            "INSERT INTO findings (run_id, identifier, at, kind, detail, severity, old, new) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (run_id, f.identifier, f.at, f.kind, f.detail, str(f.severity), f.old, f.new)
                for f in findings
            ],
        )

    def states(self, identifiers: Iterable[str]) -> dict[str, State]:
        found: dict[str, State] = {}
        for chunk in in_chunks(identifiers):
            rows = self.db.rows(
                "SELECT identifier, status, since, previous FROM states WHERE identifier IN "
                f"({marks(chunk)})",
                chunk,
            )
            found.update((row[0], State(*row[1:])) for row in rows)
        return found

    def prune(self, keep_days: float, now: float | None = None) -> dict[str, int]:
        """What is older than `keep_days` goes (0: nothing does): checks that changed
        nothing, but never an identity's last check nor the last one that reached its
        upstream; findings and runs, but not while their webhook delivery is owed. How many
        rows of each went."""
        if keep_days <= 0:
            return {}
        cutoff = (time.time() if now is None else now) - keep_days * DAY
        owed = "SELECT run_id FROM outbox"
        with self.db.transaction():
            checks = self.db.execute(
                "DELETE FROM checks WHERE checked_at < ? AND changed = 0 AND EXISTS (SELECT 1 FROM "
                "checks later WHERE later.identifier = checks.identifier AND later.id > checks.id) "
                "AND id NOT IN (SELECT last_reached FROM streaks WHERE last_reached IS NOT NULL)",
                (cutoff,),
            ).rowcount
            findings = self.db.execute(
                f"DELETE FROM findings WHERE at < ? AND run_id NOT IN ({owed})", (cutoff,)
            ).rowcount
            runs = self.db.execute(
                "DELETE FROM runs WHERE finished_at < ? AND status != 'running' "
                f"AND id NOT IN ({owed})",
                (cutoff,),
            ).rowcount
        return {"checks": checks, "findings": findings, "runs": runs}

    # --- webhook deliveries not yet made ----------------------------------------------

    def outbox_add(self, run_id: int, payload: dict[str, Any]) -> int:
        row = self.db.one(
            "INSERT INTO outbox (run_id, created_at, payload) VALUES (?, ?, ?) RETURNING id",
            (run_id, time.time(), json.dumps(payload, separators=(",", ":"))),
        )
        assert row is not None
        return int(row[0])

    def outbox_claim(self, seconds: float) -> list[tuple[int, dict[str, Any]]]:
        """The deliveries owed that no other process is sending, oldest first, claimed by
        this one for `seconds` (then another may send them: this one died)."""
        now = time.time()
        rows = self.db.rows(
            "UPDATE outbox SET claimed_until=? WHERE id IN (SELECT id FROM outbox WHERE "
            f"claimed_until IS NULL OR claimed_until < ? ORDER BY id{self.db.dialect.skip_locked}) "
            "RETURNING id, payload",
            (now + seconds, now),
        )
        return [(row[0], json.loads(row[1])) for row in sorted(rows)]

    def outbox(self) -> list[tuple[int, dict[str, Any]]]:
        rows = self.db.rows("SELECT id, payload FROM outbox ORDER BY id")
        return [(row[0], json.loads(row[1])) for row in rows]

    def owed(self) -> int:
        """How many deliveries are owed (`outbox` reads them all)."""
        row = self.db.one("SELECT count(*) FROM outbox")
        return int(row[0]) if row else 0

    def outbox_done(self, delivery: int) -> None:
        self.db.execute("DELETE FROM outbox WHERE id=?", (delivery,))

    def outbox_failed(self, delivery: int, error: str) -> None:
        self.db.execute(
            "UPDATE outbox SET attempts=attempts+1, last_error=?, claimed_until=NULL WHERE id=?",
            (error, delivery),
        )

    # --- reading ----------------------------------------------------------------------

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        rows = self.db.rows(
            "SELECT id, started_at, finished_at, source, summary, status FROM runs "
            "ORDER BY id DESC LIMIT ?",
            (limit,),
        )
        return [
            {
                "id": r[0],
                "started_at": iso(r[1]),
                "finished_at": iso(r[2]),
                "source": r[3],
                "status": r[5],
                "summary": json.loads(r[4]) if r[4] else None,
            }
            for r in rows
        ]

    def run_state(self, run_id: int) -> tuple[str, str, float | None]:
        """A run's source, status and when it finished."""
        row = self.db.one("SELECT source, status, finished_at FROM runs WHERE id=?", (run_id,))
        return (row[0], row[1], row[2]) if row else ("?", "failed", None)

    def run_counts(self, run_id: int) -> tuple[Counter[str], Counter[str], Counter[str]]:
        """A run's checks by status, its findings by kind and by severity."""
        statuses = "SELECT status, count(*) FROM checks WHERE run_id=? GROUP BY status"
        by_status = Counter({status: n for status, n in self.db.rows(statuses, (run_id,))})
        by_kind: Counter[str] = Counter()
        by_severity: Counter[str] = Counter()
        for kind, severity, count in self.db.rows(
            "SELECT kind, severity, count(*) FROM findings WHERE run_id=? GROUP BY kind, severity",
            (run_id,),
        ):
            by_kind[kind] += count
            by_severity[severity] += count
        return by_status, by_kind, by_severity

    _FINDING = "SELECT identifier, kind, detail, at, old, new FROM findings"

    def findings(self, since: float = 0.0, limit: int = 1000) -> list[Finding]:
        rows = self.db.rows(f"{self._FINDING} WHERE at >= ? ORDER BY id LIMIT ?", (since, limit))
        return [Finding(*row) for row in rows]

    def run_findings(self, run_id: int) -> list[Finding]:
        rows = self.db.rows(f"{self._FINDING} WHERE run_id=? ORDER BY id", (run_id,))
        return [Finding(*row) for row in rows]

    def run_checks(self, run_id: int) -> list[Check]:
        rows = self.db.rows("SELECT data FROM checks WHERE run_id=? ORDER BY id", (run_id,))
        return [Check.from_json(json.loads(row[0])) for row in rows]

    def run_check_keys(self, run_id: int) -> list[tuple[int, str, str]]:
        """Each check of a run: its id, identifier and status."""
        query = "SELECT id, identifier, status FROM checks WHERE run_id=?"
        return [(int(i), name, status) for i, name, status in self.db.rows(query, (run_id,))]

    def checks_by_id(self, ids: list[int]) -> dict[int, Check]:
        found: dict[int, Check] = {}
        for chunk in in_chunks(ids):
            rows = self.db.rows(f"SELECT id, data FROM checks WHERE id IN ({marks(chunk)})", chunk)
            found.update((int(i), Check.from_json(json.loads(data))) for i, data in rows)
        return found

    def history(self, identifier: str, limit: int = 50) -> list[Check]:
        """The checks kept (`record`): where something changed, and the last."""
        rows = self.db.rows(
            "SELECT data FROM checks WHERE identifier=? ORDER BY id DESC LIMIT ?",
            (identifier, limit),
        )
        return [Check.from_json(json.loads(row[0])) for row in rows][::-1]

    def watched_by_status(self) -> Counter[str]:
        """The current status of every watched identifier (never checked: "unchecked")."""
        rows = self.db.rows(
            "SELECT s.status FROM watch w LEFT JOIN states s ON s.identifier = w.identifier"
        )
        return Counter(status or "unchecked" for (status,) in rows)

    def findings_by_kind(self) -> Counter[str]:
        rows = self.db.rows("SELECT kind, count(*) FROM findings GROUP BY kind")
        return Counter({kind: count for kind, count in rows})
