"""Following an upstream directory's `/export`: page after page from the stored cursor, each
page verified and written with the cursor it moves to, so that a restart resumes where the
last commit left off and a page read twice changes nothing.

Both line formats (P-API-1): the first request asks `after=0`, which a
directory with sequence numbers answers in the `seq` format (then `after` is the last seq)
and the TypeScript reference reads as a date (then `after` is the last `createdAt`, minus one
millisecond, so that ops sharing the page boundary's millisecond are served again and
skipped rather than lost; the reference pages with `createdAt > after`).

Runs in a thread of its own (verification is CPU work; `serve` keeps its event loop); the
upstream is a URL the operator configured, read as `upstream` says (a deadline for each
whole answer, a size cap, pages that must not go back). A follower that makes no progress (no
page applied, no catch-up) within `stall_after`, or whose last poll failed, says so
(`MirrorState.problem`, in `/_health`), whatever the upstream is doing; `stop` returns
within `STOP_WAIT` seconds.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from foundation import Backoff, defaults
from resolver.errors import ResponseTooLarge, UpstreamFailure
from resolver.identity import now_iso
from resolver.plc.document import compare_state, state_from_data

from .records import BadLine, Batch
from .replica import Page, PageResult, Replica
from .store import SqlMirrorStore
from .upstream import PAGE_SIZE, Upstream, UpstreamFault, order_page

STALL_AFTER = 300.0  # seconds without progress before /_health says the follower is stalled
STOP_WAIT = 3.0  # seconds `stop` waits for the follower's thread, whatever the upstream does
# A poke (a reader asked about a DID the mirror does not know) starts a poll early, but polls
# start at least this many seconds apart: 404s asked in a flood cost the upstream at most
# one more request a second.
POKE_GAP = 1.0
NOTIFY_CHUNK = 10_000  # DIDs told to `on_applied` at once, at most, while catching up
DOCUMENT_CHECKS = 16  # upstream documents compared per poll, once caught up


@dataclass
class MirrorState:
    """What `/_health`, `/metrics`, the progress line and the lookups' evidence say."""

    upstream: str
    ops: int = 0  # applied since start
    dids: int = 0  # created since start
    duplicates: int = 0
    rejected: Counter[str] = field(default_factory=Counter)  # by rule
    nullified: int = 0
    pages: int = 0
    cursor: str | None = None
    cursor_time: str | None = None  # createdAt of the last op applied
    caught_up_at: float | None = None  # when a page last came back short (wall clock)
    # when the last complete read of the export began: the mirror holds every op the
    # upstream had then (P-API-2)
    complete_as_of: float | None = None
    documents_checked: int = 0
    disagreements: int = 0
    errors: int = 0
    faults: int = 0  # pages that went back (UpstreamFault)
    bad_lines: int = 0  # lines that did not parse, kept as evidence
    last_error: str | None = None
    role: str = "writer"  # or "reader": another process follows, this one reads the store
    progress_at: float = field(default_factory=time.time)  # a page applied, a catch-up
    stall_after: float = STALL_AFTER

    @classmethod
    def of(cls, upstream: str, store: SqlMirrorStore) -> MirrorState:
        """The state of a mirror kept in `store`, as far as it was stored."""
        state = cls(upstream, role="writer" if store.writable else "reader")
        state.reload(store)
        return state

    def reload(self, store: SqlMirrorStore) -> None:
        """The cursor and the last catch-up as stored (by this process or the writer)."""
        meta = store.meta()
        self.cursor, self.cursor_time = meta.get("cursor"), meta.get("cursor_time")
        caught_up, complete = meta.get("caught_up_at"), meta.get("complete_as_of")
        self.caught_up_at = float(caught_up) if caught_up else None
        self.complete_as_of = float(complete) if complete else None

    def current_for(self, asked_at: float) -> bool:
        """Whether the mirror's view is complete as of `asked_at` (a request's arrival): its
        404 then confirms absence (P-API-2)."""
        return self.complete_as_of is not None and self.complete_as_of >= asked_at

    def behind_seconds(self, now: float | None = None) -> float | None:
        """At most how far behind the upstream: the time since the export was last read
        to its end (None while backfilling)."""
        if self.caught_up_at is None:
            return None
        return max(0.0, (now or time.time()) - self.caught_up_at)

    def problem(self, now: float | None = None) -> str | None:
        """Why the follower is not doing its job (None: it is): the last poll failed, or
        nothing moved for longer than `stall_after` (a trickling or hanging upstream)."""
        if self.role != "writer":
            return None  # the writer's problems are the writer's to report
        if self.last_error is not None:
            return f"the last poll of {self.upstream} failed: {self.last_error}"
        idle = (now or time.time()) - self.progress_at
        if idle > self.stall_after:
            return f"no progress from {self.upstream} for {idle:.0f} s"
        return None

    def provenance(self, asked_at: float) -> str:
        """The `Atwhois-Plc-Mirror` header of an answer to a request that came at
        `asked_at`: what a lookup through the mirror cites, and whether the mirror had
        read its upstream since (`current`: its 404 is then a confirmed absence)."""
        behind = self.behind_seconds()
        lag = f"behind={behind:.1f}s" if behind is not None else "behind=backfilling"
        current = "yes" if self.current_for(asked_at) else "no"
        return (
            f"verified; upstream={self.upstream}; {lag}; cursor={self.cursor_time or '-'}; "
            f"current={current}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "upstream": self.upstream,
            "ops_applied": self.ops,
            "dids_created": self.dids,
            "duplicates": self.duplicates,
            "rejected": dict(self.rejected),
            "nullified": self.nullified,
            "pages": self.pages,
            "cursor": self.cursor,
            "cursor_time": self.cursor_time,
            "behind_s": self.behind_seconds(),
            "documents_checked": self.documents_checked,
            "disagreements": self.disagreements,
            "errors": self.errors,
            "faults": self.faults,
            "bad_lines": self.bad_lines,
            "last_error": self.last_error,
            "problem": self.problem(),
            "role": self.role,
        }

    def metrics(self) -> Iterator[Metric]:
        labels = ["upstream"]
        ops = CounterMetricFamily(
            "atwhois_plc_mirror_ops", "Operations verified and stored.", labels=labels
        )
        ops.add_metric([self.upstream], self.ops)
        yield ops
        refused = CounterMetricFamily(
            "atwhois_plc_mirror_refused_ops",
            "Operations the upstream served that the rules refuse, by the rule broken.",
            labels=[*labels, "rule"],
        )
        for rule, n in sorted(self.rejected.items()):
            refused.add_metric([self.upstream, rule], n)
        yield refused
        for name, value, what in (
            ("nullified_ops", self.nullified, "Operations nullified by a recovery."),
            ("upstream_errors", self.errors, "Failed polls of the upstream (retried)."),
            ("upstream_faults", self.faults, "Pages that went back (not followed)."),
            ("bad_lines", self.bad_lines, "Export lines that did not parse (kept as evidence)."),
            ("documents_checked", self.documents_checked, "Upstream documents compared."),
            (
                "disagreements",
                self.disagreements,
                "DIDs flagged: the upstream's document disagrees with the verified log.",
            ),
        ):
            family = CounterMetricFamily(f"atwhois_plc_mirror_{name}", what, labels=labels)
            family.add_metric([self.upstream], value)
            yield family
        behind = self.behind_seconds()
        if behind is not None:
            gauge = GaugeMetricFamily(
                "atwhois_plc_mirror_behind_seconds",
                "At most how far behind the upstream: time since its export was read to the end.",
                labels=labels,
            )
            gauge.add_metric([self.upstream], behind)
            yield gauge


class Follower:
    def __init__(
        self,
        replica: Replica,
        upstream: Upstream,
        *,
        interval: float = defaults.PLC_MIRROR_INTERVAL,
        page_size: int = PAGE_SIZE,
        progress: Callable[[MirrorState], None] | None = None,
        check_documents: int = DOCUMENT_CHECKS,
        stall_after: float = STALL_AFTER,
        on_applied: Callable[[list[str]], None] | None = None,
    ) -> None:
        """`on_applied`: told, on the follower's thread, of the DIDs whose state changed,
        once written, while following live (not while backfilling): what the daemon's
        cache re-verifies."""
        self.replica = replica
        self.upstream = upstream
        self.interval = interval
        self.page_size = page_size
        self.state = MirrorState.of(upstream.url, replica.store)
        # a poll waits out its interval and may take a whole answer's deadline: not a stall
        self.state.stall_after = max(stall_after, 2 * interval + upstream.deadline)
        self._progress = progress
        self._check_documents = check_documents
        self._suspects: list[str] = []  # disagreed once: checked again after the next poll
        self.on_applied = on_applied
        self._stop = threading.Event()
        self._wake = threading.Event()  # set: poll now (a poke, or stopping)
        self._thread: threading.Thread | None = None

    def catch_up(self) -> MirrorState:
        """Read the export to its end (a backfill, or `--once`). A page is fetched while
        the one before it is verified, and written while the next one is. On any failure
        what was not stored is forgotten, and the next try goes on from the stored cursor."""
        try:
            return self._catch_up()
        except BaseException:
            self._recover()
            raise

    def _catch_up(self) -> MirrorState:
        state, in_hand = self.state, None
        began = time.time()
        live = state.caught_up_at is not None  # following, not backfilling: tell of changes
        cursor = state.cursor or "0"
        result = PageResult()
        fault = None
        changed: list[str] = []
        while not self._stop.is_set():
            lines = self.upstream.page(cursor, self.page_size)
            full = len(lines) >= self.page_size
            order = order_page(lines, cursor)
            fault = f"went back: {order.fault}" if order.fault else None
            evidence = [self._fault_evidence(cursor, lines[order.usable], fault)] if fault else []
            page = self.replica.submit(lines[: order.usable], evidence) if lines else None
            if in_hand is not None:
                result = self._commit(*in_hand, pipelined=True)
                changed += result.touched if live else []
                if len(changed) >= NOTIFY_CHUNK:
                    self._tell_applied(changed)
                    changed = []
            in_hand = (page, order.moved) if page is not None else None
            if fault is not None or not full:
                break
            if order.moved is None or order.moved[0] == cursor:  # a full page, nothing on
                fault = f"does not advance past {cursor}"
                break
            cursor = order.moved[0]
        if in_hand is not None:
            result = self._commit(*in_hand, pipelined=False)
            changed += result.touched if live else []
        self._tell_applied(changed)
        if fault is not None:  # what the page had is judged and kept; then the fault
            state.faults += 1
            raise UpstreamFault(f"{self.upstream.url}/export {fault}")
        if not self._stop.is_set():
            state.caught_up_at = time.time()
            state.complete_as_of = began
            state.progress_at = state.caught_up_at
            # for the processes that read this store: how far behind it is, and as of when
            # it is complete
            meta = {"caught_up_at": repr(state.caught_up_at), "complete_as_of": repr(began)}
            self.replica.store.write(Batch(meta=meta))
            self._compare_documents(result.touched)
        return state

    def _tell_applied(self, dids: list[str]) -> None:
        """The DIDs whose state changed, once their pages are written (readers see them)."""
        self.replica.flush()
        if dids and self.on_applied is not None:
            self.on_applied(dids)

    def _fault_evidence(self, cursor: str, line: bytes, fault: str) -> BadLine:
        reason = f"{self.upstream.url}/export?after={cursor}, {fault}"
        return BadLine.of(line, reason, now_iso())  # as the verdicts' evidence is stamped

    def _recover(self) -> None:
        """After a failure mid-backfill: the verifiers saw pages that may not be stored,
        and the cursor may name one whose write failed; the store says what is true."""
        if self._stop.is_set():
            return  # stopping: the verifiers are let go, not started again
        self.replica.reset()
        self.state.reload(self.replica.store)

    def _commit(self, page: Page, moved: tuple[str, str] | None, *, pipelined: bool) -> PageResult:
        """A page's verdicts, written with the cursor it moves to (`moved`; None: no line
        of it parsed, the cursor stays and only the evidence is kept)."""
        meta = {"cursor": moved[0], "cursor_time": moved[1]} if moved else {}
        result = self.replica.commit(page, meta, pipelined=pipelined)
        state = self.state
        if moved is not None:
            state.cursor, state.cursor_time = moved
        state.progress_at = time.time()
        state.bad_lines += result.bad_lines
        state.pages += 1
        state.ops += result.applied
        state.dids += result.created
        state.duplicates += result.duplicates
        state.nullified += result.nullified
        state.rejected.update(result.by_rule)
        if self._progress:
            self._progress(state)
        return result

    def run(self) -> None:
        """Follow until stopped: catch up, wait a polling interval, again. Trouble (the
        upstream's, the database's, a worker's) is logged, counted and retried with
        back-off, never fatal and never silent."""
        backoff = Backoff(base=min(1.0, self.interval), cap=60.0)
        while not self._stop.is_set() and not self.replica.store.writable:
            self.state.reload(self.replica.store)  # a reader: the writer's progress
            self._stop.wait(min(1.0, self.interval))
        while not self._stop.is_set():
            try:
                self.catch_up()
            except Exception as err:  # an upstream's, a database's, a worker's trouble
                self.state.errors += 1
                self.state.last_error = f"{type(err).__name__}: {err}"[:500]
                logging.getLogger("atwhois.mirror").warning(
                    json.dumps({"event": "mirror_error", "error": self.state.last_error})
                )
                self._stop.wait(backoff.next())
                continue
            backoff.reset()
            self.state.last_error = None
            self._rest()

    def _rest(self) -> None:
        """Between polls: the interval, or less when poked; but polls start at least
        `POKE_GAP` (or the interval, if shorter) apart."""
        self._wake.wait(self.interval)
        self._wake.clear()
        began = self.state.complete_as_of or 0.0
        gap = min(POKE_GAP, self.interval) - (time.time() - began)
        if gap > 0:
            self._stop.wait(gap)

    def poke(self) -> None:
        """Poll now rather than at the end of the interval (coalesced: one poll for any
        number of pokes)."""
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="plc-mirror", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops following and lets the verifying workers go, within `STOP_WAIT` seconds
        whatever the upstream is doing: the answer being read is given up (a page not
        written is read again by the next run, from the stored cursor)."""
        self._stop.set()
        self._wake.set()
        self.upstream.closing.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_WAIT)
            if self._thread.is_alive():  # blocked in a read: its thread dies with the process
                logging.getLogger("atwhois.mirror").warning(
                    json.dumps({"event": "mirror_stop", "waited_s": STOP_WAIT, "joined": False})
                )
        self.replica.close()
        self.upstream.close()

    def _compare_documents(self, touched: list[str]) -> None:
        """Once caught up: does the upstream serve, for DIDs that just changed, the
        document the mirror's replay implies? A disagreement is checked again after the
        next poll (the upstream may have moved on meanwhile) before the DID is flagged."""
        suspects, self._suspects = self._suspects, []
        for did in [*suspects, *touched][: self._check_documents]:
            known, state_json = self.replica.store.state(did)
            if not known:
                continue
            try:
                served = self.upstream.document(did)
            except (UpstreamFailure, ResponseTooLarge, ValueError):
                continue  # says nothing about the DID
            self.state.documents_checked += 1
            state = state_from_data(json.loads(state_json)) if state_json else None
            findings = compare_state(did, state, served)
            if not findings:
                continue
            if did not in suspects:
                self._suspects.append(did)
                continue
            self.state.disagreements += 1
            reason = f"the upstream's document disagrees with the verified log: {findings[0]}"
            self.replica.store.flag(did, reason, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
