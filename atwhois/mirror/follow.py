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

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable

from atwhois.foundation import Backoff, defaults
from atwhois.resolver.errors import ResponseTooLarge, UpstreamFailure
from atwhois.resolver.identity import now_iso
from atwhois.resolver.plc.document import compare_state

from .records import BadLine, Batch
from .replica import Page, PageResult, Replica
from .state import STALL_AFTER, MirrorState
from .upstream import PAGE_SIZE, Upstream, UpstreamFault, newest_seq, order_page
from .upstream_stream import FUTURE, OUTDATED, StreamClosed, StreamUnavailable, UpstreamStream
from .waits import Waits

STOP_WAIT = 3.0  # seconds `stop` waits for the follower's thread, whatever the upstream does
# A poke (a reader asked about a DID the mirror does not know) starts a poll (following a
# stream: a look at the export past the cursor) early, but reads of the export start at
# least this many seconds apart: 404s asked in a flood cost the upstream at most one more
# request a second.
POKE_GAP = 1.0
NOTIFY_CHUNK = 10_000  # DIDs told to `on_applied` at once, at most, while catching up
DOCUMENT_CHECKS = 16  # upstream documents compared per poll, once caught up
STREAM_FLUSH = 0.05  # seconds a stream's messages gather before they are verified and stored
# how long the stream may take to send what the upstream's export already shows (an atwhois
# upstream sends a stored operation within a tick, 0.05 s): past it, the stream is stalled
STREAM_MARGIN = 0.25
# how long after a clean look a proven stream says `current=yes`, in intervals: a look comes
# every interval, and one may be late or slow without the header going back and forth
PROVEN_FOR = 2
STREAM_RECHECK = 600.0  # seconds before an upstream without a stream is asked again
NO_STREAM, STOPPED = "no_stream", "stopped"  # how a stream ended, besides its close reasons


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
        stream: UpstreamStream | None = None,
    ) -> None:
        """`on_applied`: told, on the follower's thread, of the DIDs whose state changed,
        once written, while following live (not while backfilling): what the daemon's
        cache re-verifies. `stream`: once caught up, follow the upstream's /export/stream
        (when it has one) rather than polling."""
        self.replica = replica
        self.upstream = upstream
        self.interval = interval
        self.page_size = page_size
        self.state = MirrorState.of(upstream.url, replica.store)
        # a poll waits out its interval and may take a whole answer's deadline: not a stall
        self.state.stall_after = max(stall_after, 2 * interval + upstream.deadline)
        self.state.proven_for = PROVEN_FOR * interval
        self._progress = progress
        self._check_documents = check_documents
        self._suspects: list[str] = []  # disagreed once: checked again after the next poll
        self.on_applied = on_applied
        self.stream = stream
        self._no_stream_since: float | None = None  # when the upstream last had none
        self._read_began = 0.0  # when the last read of the export began (polls' spacing)
        self._stop = threading.Event()
        self._wake = threading.Event()  # set: poll now (a poke, or stopping)
        self._thread: threading.Thread | None = None
        # questions about DIDs the mirror does not know, told of what each read brings
        self.waits = Waits(self.state, self.poke)

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
        began = self._read_began = time.time()
        live = state.caught_up_at is not None  # following, not backfilling: tell of changes
        cursor = state.cursor or "0"
        result = PageResult()
        fault = None
        changed: list[str] = []
        while not self._stop.is_set():
            asked = time.time()
            lines = self.upstream.page(cursor, self.page_size)
            state.saw(newest_seq(lines))
            full = len(lines) >= self.page_size
            order = order_page(lines, cursor)
            fault = f"went back: {order.fault}" if order.fault else None
            source = f"{self.upstream.url}/export?after={cursor}"
            evidence = [_fault_evidence(source, lines[order.usable], fault)] if fault else []
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
        done = fault is None and not self._stop.is_set()
        if done:
            # complete as of when the read began, once what it read is written; an upstream
            # that is itself a mirror, only as of its own view when it answered the last
            # page (P-API-2). Said before the DIDs are told: one asked about is then
            # answered as current
            self.replica.flush()
            age = self.upstream.view_age
            self._caught_up(None if age is None else min(began, asked - age))
        self._tell_applied(changed)
        if fault is not None:  # what the page had is judged and kept; then the fault
            state.faults += 1
            raise UpstreamFault(f"{self.upstream.url}/export {fault}")
        if done:
            # after the DIDs: a question its DID's operation ended does not poke again
            self.waits.read_ended()
            self._compare_documents(result.touched)
        return state

    def _caught_up(self, complete: float | None, at: float | None = None) -> None:
        """The upstream read to its end (at `at`, or now): the mirror holds what the
        directory had at `complete` (None: not known; the mirror's view stays as of its
        last complete read), stored for the processes that read this store."""
        state = self.state
        state.progress_at = time.time()
        state.caught_up_at = at or state.progress_at
        if complete is not None and complete > (state.complete_as_of or 0.0):
            state.complete_as_of = complete
        meta = {"caught_up_at": repr(state.caught_up_at)}
        if state.complete_as_of is not None:
            meta["complete_as_of"] = repr(state.complete_as_of)
        self.replica.store.write(Batch(meta=meta))

    def _tell_applied(self, dids: list[str]) -> None:
        """The DIDs whose state changed, once their pages are written (readers see them)."""
        self.replica.flush()
        if dids:
            self.waits.applied(dids)
            if self.on_applied is not None:
                self.on_applied(dids)

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
        state = self.state
        meta = {"cursor": moved[0], "cursor_time": moved[1]} if moved else {}
        if state.upstream_seq is not None:  # readers of the store say it too
            meta["upstream_seq"] = str(state.upstream_seq)
        result = self.replica.commit(page, meta, pipelined=pipelined)
        if moved is not None:
            state.cursor, state.cursor_time = moved
        state.progress_at = time.time()
        state.bad_lines += result.bad_lines
        state.pages += 1
        state.ops += result.applied
        state.dids += result.created
        state.duplicates += result.duplicates
        state.nullified += result.nullified
        state.rebuilt += result.rebuilt
        state.rejected.update(result.by_rule)
        if self._progress:
            self._progress(state)
        return result

    def run(self) -> None:
        """Follow until stopped: catch up, then follow the upstream's stream, or wait a
        polling interval and catch up again. Trouble (the upstream's, the database's, a
        worker's) is logged, counted and retried with back-off, never fatal and never
        silent."""
        backoff = Backoff(base=min(1.0, self.interval), cap=60.0)
        while not self._stop.is_set() and not self.replica.store.writable:
            self.state.reload(self.replica.store)  # a reader: the writer's progress
            self._stop.wait(min(1.0, self.interval))
        while not self._stop.is_set():
            try:
                if self._streaming():
                    ended = self._follow_stream()
                    if ended == OUTDATED:  # too far behind for the stream: page, come back
                        self.catch_up()
                    if ended != NO_STREAM:
                        backoff.reset()
                        continue
                self.catch_up()
            except Exception as err:  # an upstream's, a database's, a worker's trouble
                self.state.errors += 1
                self.state.last_error = f"{type(err).__name__}: {err}"[:500]
                logging.getLogger("atwhois.mirror").warning(
                    json.dumps({"event": "mirror_error", "error": self.state.last_error})
                )
                self.waits.read_ended()  # no read comes before the back-off
                self._stop.wait(backoff.next())
                continue
            backoff.reset()
            self.state.last_error = None
            self._rest()

    # --- following the upstream's /export/stream (P-API-3) ----------------------------

    def _streaming(self) -> bool:
        """Whether to follow the stream now: there is one to follow (or it is time to ask
        again), and the cursor is a seq (an upstream paged by time has no stream)."""
        if self.stream is None or not (self.state.cursor or "").isdigit():
            return False
        since = self._no_stream_since
        return since is None or time.time() - since > STREAM_RECHECK

    def _follow_stream(self) -> str:
        """Reads the stream from the stored cursor (the upstream sends what came after it,
        then each new operation) until it ends: `OUTDATED` when the cursor is too old for
        the upstream's stream (the caller pages through /export, then comes back),
        `NO_STREAM` when it has none (polling it is), `STOPPED`. A cursor in the upstream's
        future is its fault, said loudly: the cursor is never moved back to suit it. Any
        other end is a failure, retried with back-off from the stored cursor."""
        assert self.stream is not None
        try:
            self.stream.open(self.state.cursor or "0")
        except StreamUnavailable:
            self._no_stream_since = time.time()
            return NO_STREAM
        self._no_stream_since = None
        self.state.source = "stream"
        try:
            unproven = True  # current only once a look proves it: at once, a poke gap on
            while not self._stop.is_set():
                if lines := self.stream.receive(self.page_size, STREAM_FLUSH):
                    self._apply_streamed(lines)
                # the upstream's export proves the stream once an interval, busy or quiet,
                # and a poke gap after the last read for a question waiting on a DID the
                # mirror does not know (a poke): whatever the stream is sending meanwhile
                since = time.time() - self._read_began
                asked = unproven or self._wake.is_set()
                if since >= self.interval or (asked and since >= min(POKE_GAP, self.interval)):
                    self._wake.clear()
                    unproven = False
                    self._look()
                    self.state.last_error = None
            return STOPPED
        except StreamClosed as closed:
            if closed.reason == OUTDATED:
                return OUTDATED
            self.state.stream_errors += 1
            if closed.reason == FUTURE:
                raise UpstreamFault(
                    f"{closed}: the upstream has no operation at this mirror's cursor "
                    f"{self.state.cursor} (it lost operations, or is another directory); "
                    "the cursor stays"
                ) from None
            raise
        except UpstreamFailure:
            self.state.stream_errors += 1
            raise
        finally:
            self.stream.close()
            self.state.source, self.state.stream_proven = "poll", False

    def _apply_streamed(self, lines: list[bytes]) -> None:
        """Messages as a page's lines: in order after the cursor, verified, stored with the
        cursor they move to; the DIDs they changed told. A message that goes back is the
        upstream's fault: what came before it is kept, then the stream is given up."""
        cursor = self.state.cursor or "0"
        self.state.saw(newest_seq(lines))
        order = order_page(lines, cursor, seqs_only=True)  # P-API-3: every message has one
        fault = f"went back: {order.fault}" if order.fault else None
        assert self.stream is not None
        evidence = [_fault_evidence(self.stream.url, lines[order.usable], fault)] if fault else []
        page = self.replica.submit(lines[: order.usable], evidence)
        result = self._commit(page, order.moved, pipelined=False)
        # while backfilling through the stream, nothing was known before: nothing to tell
        self._tell_applied(result.touched if self.state.caught_up_at is not None else [])
        if fault is not None:
            self.state.faults += 1
            raise UpstreamFault(f"{self.stream.url} {fault}")

    def _look(self) -> None:
        """P-API-4: a quiet stream proves nothing by itself: a ping answered proves the
        connection, not that the upstream stored nothing since. The upstream's export,
        asked for one operation after the cursor, does. When it has none (a clean look),
        the mirror held, when the upstream answered, everything the upstream had when the
        look was sent: complete as of then (an upstream that is itself a mirror: as of its
        own view, P-API-2), and current while the stream stays open (`stream_proven`).
        When it has one, the stream must send it within a margin: then the stream is
        alive, but the mirror proves no more than it did (it may be far behind); if not,
        the stream is stalled: given up (and opened again with back-off), the mirror not
        current meanwhile, its health saying why."""
        assert self.stream is not None
        if not self.stream.alive():
            raise UpstreamFailure(f"{self.stream.url}: no answer to a ping")
        asked = self._read_began = time.time()
        newer = self.upstream.page(self.state.cursor or "0", 1)
        self.state.saw(newest_seq(newer))
        if not newer:
            age = self.upstream.view_age
            self._caught_up(None if age is None else asked - age, at=asked)
            self.state.stream_proven = True
            self.waits.read_ended()
            return
        self.state.stream_proven = False
        give_up = time.monotonic() + STREAM_MARGIN
        while not self._holds(newer[0]) and (left := give_up - time.monotonic()) > 0:
            if lines := self.stream.receive(self.page_size, min(left, STREAM_FLUSH)):
                self._apply_streamed(lines)
        if not self._holds(newer[0]):
            self.state.stream_stalls += 1
            raise UpstreamFailure(
                f"{self.stream.url} is stalled: the upstream's export holds an operation "
                f"after the cursor {self.state.cursor} that its stream did not send"
            )
        self.waits.read_ended()  # the questions still waiting poke again

    def _holds(self, line: bytes) -> bool:
        """Whether the cursor is at or past the export line's seq (one that does not parse
        is the page reader's to refuse, when it is read as a page)."""
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            seq = json.loads(line).get("seq")
            return isinstance(seq, int) and int(self.state.cursor or 0) >= seq
        return True

    def _rest(self) -> None:
        """Between polls: the interval, or less when poked; but polls start at least
        `POKE_GAP` (or the interval, if shorter) apart."""
        self._wake.wait(self.interval)
        self._wake.clear()
        gap = min(POKE_GAP, self.interval) - (time.time() - self._read_began)
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
            current = self.replica.store.in_force(did)
            if current is None:
                continue
            try:
                served = self.upstream.document(did)
            except (UpstreamFailure, ResponseTooLarge, ValueError):
                continue  # says nothing about the DID
            self.state.documents_checked += 1
            findings = compare_state(did, current.state(did), served)
            if not findings:
                continue
            if did not in suspects:
                self._suspects.append(did)
                continue
            self.state.disagreements += 1
            reason = f"the upstream's document disagrees with the verified log: {findings[0]}"
            self.replica.store.flag(did, reason, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def _fault_evidence(source: str, line: bytes, fault: str) -> BadLine:
    """The line where an upstream's answer went wrong, kept with where it came from."""
    return BadLine.of(line, f"{source}, {fault}", now_iso())  # stamped as verdicts are
