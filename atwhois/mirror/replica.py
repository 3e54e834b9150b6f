"""Applying a directory's export to the mirror: every operation verified by the replay rules
(`resolver.plc.audit.Replay`: signatures, `prev` chain, key priority, the 72-hour
nullification window, tombstones) before it enters the state.

An op that fails is kept out, recorded with the rule it breaks, and its DID flagged: the
upstream accepted what the rules refuse, so its document for that DID is not to be trusted.
The DID stays at its last verified state, and later ops built on the refused one are refused
in turn (their `prev` is not an op of the verified chain).

Verification uses every core: a page's lines are split by DID among worker processes, each
holding the replays of its DIDs (a DID always goes to the same worker, so its ops are
replayed in order), and the verdicts are merged back in page order and written in one
transaction. Replays of recently seen DIDs stay in memory (bounded); one evicted is rebuilt
from its stored, verified ops. The export's own `nullified` flags are ignored: they are a
snapshot of when the page was read, and the mirror works out nullification itself.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from atwhois.foundation import defaults
from atwhois.foundation.pool import RoutedPool
from atwhois.resolver.identity import now_iso
from atwhois.resolver.plc.audit import Replay
from atwhois.resolver.plc.export import export_entry, route

from .backends import open_mirror_store
from .records import ENTRY_CAP, BadLine, Batch, Head, Rejection, StoredOp, storable
from .store import SqlMirrorStore

MAX_REPLAYS = defaults.PLC_MIRROR_REPLAYS  # DIDs whose replay stays in memory, per worker
KEPT_LISTED = 32  # a DID in memory with more kept ops than this has them read from the store


class Verdict(NamedTuple):
    """What became of one line of a page (a tuple: it crosses from the worker processes,
    and a tuple pickles twenty times faster than a dataclass)."""

    position: int  # in the page
    kind: str  # "applied", "refused", "duplicate" or "unreadable"
    did: str = ""
    cid: str = ""
    created_at: str = ""
    rule: str = ""
    message: str = ""
    displaced: tuple[str, ...] = ()  # the ops an applied recovery nullified
    signer: int = 0  # an applied op: the index of the rotation key that signed it
    genesis: bool = False  # an applied op that created its DID
    operation: bytes = b""  # an applied op: its JSON, as served (key order kept), compact


@dataclass(slots=True)
class PageResult:
    """What one export page did to the mirror."""

    applied: int = 0  # verified and stored
    created: int = 0  # of which the genesis ops of new DIDs
    duplicates: int = 0  # already kept (a page served again)
    rejected: int = 0
    nullified: int = 0
    bad_lines: int = 0
    rebuilt: int = 0  # replays of DIDs not in memory, rebuilt from the store to verify it
    by_rule: Counter[str] = field(default_factory=Counter)
    touched: list[str] = field(default_factory=list)  # DIDs whose state changed


class Verifier:
    """The replays of some DIDs and the verdicts on their lines. Reads the store (which ops
    are kept already; the log of a DID not in memory) but never writes it."""

    def __init__(self, store: SqlMirrorStore, max_replays: int = MAX_REPLAYS) -> None:
        self.store = store
        self._replays: OrderedDict[str, Replay] = OrderedDict()
        # The CIDs of the ops kept of each DID in memory (None: more than KEPT_LISTED, read
        # from the store): every op of a DID comes through its replay, so what the store
        # keeps of it is what its replay was rebuilt from and accepted since.
        self._kept: dict[str, list[str] | None] = {}
        self._max_replays = max_replays
        # The previous page may still be being written (`Replica.apply(pipelined=True)`):
        # its ops count as kept, and its DIDs' replays are not evicted (the store could
        # not rebuild them yet).
        self._previous_pairs: set[tuple[str, str]] = set()
        self._previous_dids: set[str] = set()

    def verify(
        self, lines: Sequence[tuple[int, str | bytes]]
    ) -> tuple[list[Verdict], dict[str, Head], int]:
        """Verdicts on these lines, in order, the new op in force of each DID whose state
        changed, and how many replays were rebuilt from the store (evicted, or after a
        restart) to verify them."""
        verdicts: list[Verdict] = []
        parsed = []
        for index, line in lines:
            entry = export_entry(line)
            if entry is None or not isinstance(entry.get("cid"), str):
                message = "not an export line: a JSON object with a did:plc, an operation and a cid"
                verdicts.append(Verdict(index, "unreadable", rule="§12", message=message))
            else:
                parsed.append((index, entry, line))
        dids = {entry["did"] for _, entry, _ in parsed}
        # What is kept, by the CID the mirror computed for an op it accepted: a refused line
        # is evidence, never a reason to skip the genuine op served later (P-CID-1). A DID
        # not in memory is read whole (its replay is rebuilt from it), and that read says
        # which of its ops are kept: its ops are not read twice.
        in_memory = {did for did in dids if did in self._replays}
        unlisted = {did for did in in_memory if self._kept[did] is None}
        logs = self.store.logs(dids - in_memory)
        known = self.store.known(unlisted) | self._previous_pairs
        known.update((did, op.cid) for did, ops in logs.items() for op in ops)
        known.update((did, cid) for did in in_memory - unlisted for cid in self._kept[did] or ())
        refused: dict[tuple[str, str], str] | None = None  # read once a line is refused
        fresh: set[tuple[str, str]] = set()
        for did, ops in logs.items():
            self._rebuild(did, ops)
        changed: dict[str, Replay] = {}
        for index, entry, line in parsed:
            did, cid = entry["did"], entry["cid"]
            if (did, cid) in known:
                verdicts.append(Verdict(index, "duplicate", did, cid))
                continue
            run = self._replay(did)
            created = str(entry.get("createdAt"))
            record = run.add(
                {"did": did, "operation": entry.get("operation"), "cid": cid, "createdAt": created}
            )
            if record.accepted:
                known.add((did, cid))  # the same op twice in one page counts once
                fresh.add((did, cid))
                self._keep(did, [cid])
                verdicts.append(
                    Verdict(
                        index,
                        "applied",
                        did,
                        cid,
                        created,
                        displaced=tuple(run.displaced),
                        signer=record.signer_index or 0,
                        genesis=record.index == 0,
                        operation=orjson.dumps(entry.get("operation")),
                    )
                )
                changed[did] = run
            else:
                if refused is None:  # read once, and only for a page that has a refusal
                    refused = self.store.refusals(dids)
                if refused.get((did, cid)) == _as_text(line)[:ENTRY_CAP]:  # refused as it is
                    verdicts.append(Verdict(index, "duplicate", did, cid))
                else:
                    finding = record.findings[0]
                    verdicts.append(
                        Verdict(index, "refused", did, cid, created, finding.rule, finding.message)
                    )
            run.findings.clear()
            run.prune()
        heads = {}
        for did, run in changed.items():
            head = run.head
            if head is not None:
                heads[did] = Head(run.chain[-1], head.state is None)
        self._evict(dids | self._previous_dids)
        self._previous_pairs, self._previous_dids = fresh, dids
        return verdicts, heads, len(logs)

    def _evict(self, protected: set[str]) -> None:
        """Down to `max_replays`, the least recently used first, none of `protected`."""
        excess = len(self._replays) - self._max_replays
        if excess <= 0:
            return
        for did in list(itertools.islice(self._replays, excess + len(protected))):
            if excess == 0:
                break
            if did not in protected:
                del self._replays[did], self._kept[did]
                excess -= 1

    def _replay(self, did: str) -> Replay:
        run = self._replays.get(did)
        if run is None:
            run = self._replays[did] = Replay(did, keep_records=False)
            self._kept[did] = []
        else:
            self._replays.move_to_end(did)
        return run

    def _keep(self, did: str, cids: list[str]) -> None:
        """`cids` kept of `did` (in memory), listed while they are few."""
        listed = self._kept[did]
        if listed is not None:
            listed += cids
            if len(listed) > KEPT_LISTED:
                self._kept[did] = None

    def _rebuild(self, did: str, ops: list[StoredOp]) -> None:
        """A replay not in memory, rebuilt from the DID's stored ops: verified when they
        were stored, so restored without hashing or signature checks."""
        run = self._replay(did)
        for op in ops:
            run.restore(op.replay_entry(), op.signer)
        run.findings.clear()
        run.prune()
        self._keep(did, [op.cid for op in ops])


# --- worker processes: one Verifier each, over a read-only connection to the store ---------

_worker: Verifier | None = None


def _start_worker(where: str, max_replays: int) -> None:
    global _worker
    # A worker's heap is its replays, long-lived and without cycles, and each op allocates
    # a few dozen short-lived objects: at Python's default thresholds the collector walked
    # the replays again and again, a sixth of a worker's time (80,000 ops of the real
    # shape: 128 us an op against 107 with these).
    gc.set_threshold(50_000, 20, 100)
    _worker = Verifier(open_mirror_store(where, writable=False), max_replays)


def _verify_in_worker(
    lines: list[tuple[int, bytes | str]],
) -> tuple[list[Verdict], dict[str, Head], int]:
    assert _worker is not None
    return _worker.verify(lines)


class Replica:
    """Verifies pages (in this process, or in `workers` processes) and writes the verdicts."""

    def __init__(
        self,
        store: SqlMirrorStore,
        *,
        workers: int = 0,
        max_replays: int = MAX_REPLAYS,
        clock: Callable[[], str] = now_iso,
    ) -> None:
        self.store = store
        self._clock = clock
        self._workers, self._max_replays = workers, max_replays
        self._local: Verifier | None = None
        self._pool: RoutedPool | None = None
        self._start_verifiers()
        self.rebuilt = 0  # replays rebuilt from the store (evicted, or after a restart)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="plc-mirror-write")
        self._writing: Future[None] | None = None

    def _start_verifiers(self) -> None:
        if self._workers == 0:
            self._local = Verifier(self.store, self._max_replays)
            return
        self._pool = RoutedPool(
            self._workers, _start_worker, (self.store.location, self._max_replays)
        )

    def reset(self) -> None:
        """After a failure mid-page: the page being written is given up (its write may have
        failed: that is the failure being recovered from), and the verifiers start afresh,
        for they saw pages that may never be stored (also when a worker died)."""
        writing, self._writing = self._writing, None
        if writing is not None:
            with contextlib.suppress(Exception):
                writing.result()
        if self._pool is not None:
            self._pool.shutdown()
        self._start_verifiers()

    def flush(self) -> None:
        """Waits for the page being written; raises what writing it raised."""
        if self._writing is not None:
            writing, self._writing = self._writing, None
            writing.result()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._writer.shutdown()
            if self._pool is not None:
                self._pool.shutdown()

    def apply(self, lines: Sequence[str | bytes], meta: dict[str, str] | None = None) -> PageResult:
        """Verify and store one page of export lines, in order, in one transaction (with
        `meta`: the cursor the page moves to)."""
        return self.commit(self.submit(lines), meta)

    def submit(self, lines: Sequence[str | bytes], evidence: Sequence[BadLine] = ()) -> Page:
        """Starts verifying a page (in the workers: this returns at once). Pages are
        committed in the order they are submitted; at most two are in hand at a time.
        `evidence`: what else the page showed of its upstream, kept with its verdicts."""
        numbered = [(i, line) for i, line in enumerate(lines) if line.strip()]
        # The workers may verify this page while the one before it is being written, not
        # while the one before that is: their memory of unwritten ops covers one page.
        self.flush()
        if self._local is not None:
            done: Future[tuple[list[Verdict], dict[str, Head], int]] = Future()
            done.set_result(self._local.verify(numbered))
            page = Page(lines, [done], tuple(evidence))
        else:
            pool = self._pool
            assert pool is not None  # workers, not this process
            shares: list[list[tuple[int, str | bytes]]] = [[] for _ in range(len(pool))]
            for index, line in numbered:
                shares[pool.worker_for(route(line))].append((index, line))
            futures = [
                pool.submit(worker, _verify_in_worker, share) for worker, share in enumerate(shares)
            ]
            page = Page(lines, futures, tuple(evidence))
        return page

    def commit(
        self, page: Page, meta: dict[str, str] | None = None, *, pipelined: bool = False
    ) -> PageResult:
        """The verdicts on a submitted page, written in one transaction with `meta`.
        `pipelined`: returns as soon as the write is under way (a backfill: the next page
        is verified meanwhile; `flush` waits for it)."""
        verdicts: list[Verdict] = []
        heads: dict[str, Head] = {}
        result = PageResult()
        for future in page.futures:
            some, changed, rebuilt = future.result()
            verdicts += some
            heads.update(changed)
            result.rebuilt += rebuilt
        self.rebuilt += result.rebuilt
        batch = Batch(meta=dict(meta or {}), bad_lines=list(page.evidence))
        seen_at = self._clock()
        for verdict in sorted(verdicts, key=lambda v: v.position):
            _count(verdict, page.lines[verdict.position], result, batch, seen_at)
        batch.heads = heads
        result.touched.extend(heads)
        self.flush()  # one page in writing at a time, in order
        self._writing = self._writer.submit(self.store.write, batch)
        if not pipelined:
            self.flush()
        return result


@dataclass(frozen=True, slots=True)
class Page:
    """A page submitted for verification."""

    lines: Sequence[str | bytes]
    futures: list[Future[Any]]
    evidence: tuple[BadLine, ...] = ()


def _as_text(line: str | bytes) -> str:
    return line.decode(errors="replace") if isinstance(line, bytes) else storable(line)


def _count(verdict: Verdict, line: str | bytes, result: PageResult, batch: Batch, at: str) -> None:
    """One verdict into the page's result and its batch of writes."""
    if verdict.kind == "unreadable":
        result.bad_lines += 1
        result.by_rule[verdict.rule] += 1
        batch.bad_lines.append(BadLine.of(line, verdict.message, at))
    elif verdict.kind == "duplicate":
        result.duplicates += 1
    elif verdict.kind == "applied":
        batch.ops.append(
            (verdict.did, verdict.cid, verdict.created_at, verdict.operation, verdict.signer)
        )
        batch.nullified.extend((verdict.did, gone) for gone in verdict.displaced)
        result.applied += 1
        result.created += verdict.genesis
        result.nullified += len(verdict.displaced)
    else:  # what the line claims may hold anything JSON can escape
        rule, cid = verdict.rule, storable(verdict.cid)
        created, message = storable(verdict.created_at), storable(verdict.message)
        text = _as_text(line)
        batch.rejected.append(Rejection(verdict.did, cid, created, rule, message, text, at))
        batch.flags.setdefault(
            verdict.did, (f"the upstream serves op {cid}, which breaks {rule}", at)
        )
        result.rejected += 1
        result.by_rule[rule] += 1
