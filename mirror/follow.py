"""Following an upstream directory's `/export`: page after page from the stored cursor, each
page verified and written with the cursor it moves to, so that a restart resumes where the
last commit left off and a page read twice changes nothing.

Both line formats (P-API-1): the first request asks `after=0`, which a
directory with sequence numbers answers in the `seq` format (then `after` is the last seq)
and the TypeScript reference reads as a date (then `after` is the last `createdAt`, minus one
millisecond, so that ops sharing the page boundary's millisecond are served again and
skipped rather than lost; the reference pages with `createdAt > after`).

Runs in a thread of its own (verification is CPU work; `serve` keeps its event loop); the
upstream is a URL the operator configured, fetched with a deadline and a size cap.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from foundation import Backoff, defaults
from resolver.errors import ResponseTooLarge, UpstreamFailure
from resolver.plc.audit import parse_time
from resolver.plc.document import compare_state, state_from_data

from .replica import Page, PageResult, Replica
from .store import Batch, SqlMirrorStore

PAGE_SIZE = 1000  # the reference's most per page
PAGE_MAX_BYTES = 64 * 1024 * 1024
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
    documents_checked: int = 0
    disagreements: int = 0
    errors: int = 0
    last_error: str | None = None
    role: str = "writer"  # or "reader": another process follows, this one reads the store

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
        caught_up = meta.get("caught_up_at")
        self.caught_up_at = float(caught_up) if caught_up else None

    def behind_seconds(self, now: float | None = None) -> float | None:
        """At most how far behind the upstream: the time since the export was last read
        to its end (None while backfilling)."""
        if self.caught_up_at is None:
            return None
        return max(0.0, (now or time.time()) - self.caught_up_at)

    def provenance(self) -> str:
        """The `Atwhois-Plc-Mirror` header: what a lookup through the mirror cites."""
        behind = self.behind_seconds()
        lag = f"behind={behind:.1f}s" if behind is not None else "behind=backfilling"
        return f"verified; upstream={self.upstream}; {lag}; cursor={self.cursor_time or '-'}"

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
            "last_error": self.last_error,
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


class Upstream:
    """GETs to the upstream directory: export pages and documents."""

    def __init__(self, url: str, *, timeout: float = 30.0, user_agent: str = "atwhois") -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(
            timeout=timeout, headers={"User-Agent": user_agent}, follow_redirects=False
        )

    def _get(self, path: str, params: dict[str, str] | None = None) -> tuple[int, bytes]:
        try:
            with self._client.stream("GET", self.url + path, params=params) as response:
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > PAGE_MAX_BYTES:
                        raise ResponseTooLarge(f"{self.url}{path}: over {PAGE_MAX_BYTES} bytes")
                    chunks.append(chunk)
                return response.status_code, b"".join(chunks)
        except httpx.HTTPError as err:
            raise UpstreamFailure(f"{self.url}: {type(err).__name__}: {err}") from None

    def page(self, after: str, count: int = PAGE_SIZE) -> list[bytes]:
        status, body = self._get("/export", {"count": str(count), "after": after})
        if status != 200:
            raise UpstreamFailure(f"{self.url}/export: HTTP {status}")
        return [line for line in body.split(b"\n") if line.strip()]

    def document(self, did: str) -> dict[str, Any] | None:
        """The upstream's document (None: it serves none: 404 or 410)."""
        status, body = self._get(f"/{did}")
        if status in (404, 410):
            return None
        if status != 200:
            raise UpstreamFailure(f"{self.url}/{did}: HTTP {status}")
        document = json.loads(body)
        return document if isinstance(document, dict) else {}

    def close(self) -> None:
        self._client.close()


def next_cursor(lines: list[bytes]) -> tuple[str, str]:
    """(cursor, createdAt) after a page: its last line's `seq`, or its last `createdAt`
    less a millisecond (ops sharing the boundary's millisecond are served again and
    skipped as kept); past it when a whole page shares one millisecond, not to loop."""
    last = json.loads(lines[-1])
    created = str(last.get("createdAt", ""))
    seq = last.get("seq")
    if isinstance(seq, int) and not isinstance(seq, bool):
        return str(seq), created
    try:
        moment = parse_time(created)
    except ValueError:
        return created, created
    if len(lines) > 1 and json.loads(lines[0]).get("createdAt") == created:
        return created, created
    earlier = moment - datetime.timedelta(milliseconds=1)
    stamp = earlier.astimezone(datetime.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z"), created


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
    ) -> None:
        self.replica = replica
        self.upstream = upstream
        self.interval = interval
        self.page_size = page_size
        self.state = MirrorState.of(upstream.url, replica.store)
        self._progress = progress
        self._check_documents = check_documents
        self._suspects: list[str] = []  # disagreed once: checked again after the next poll
        self._stop = threading.Event()
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
        cursor = state.cursor or "0"
        result = PageResult()
        while not self._stop.is_set():
            lines = self.upstream.page(cursor, self.page_size)
            full = len(lines) >= self.page_size
            page = self.replica.submit(lines) if lines else None
            moved = next_cursor(lines) if lines else None
            if in_hand is not None:
                result = self._commit(*in_hand, pipelined=True)
            in_hand = (page, moved) if page is not None and moved is not None else None
            if not full:
                break
            if moved is None or moved[0] == cursor:  # a full page that moves nothing on
                raise UpstreamFailure(f"{self.upstream.url}/export does not advance past {cursor}")
            cursor = moved[0]
        if in_hand is not None:
            result = self._commit(*in_hand, pipelined=False)
        self.replica.flush()
        if not self._stop.is_set():
            state.caught_up_at = time.time()
            # for the processes that read this store: how far behind it is
            self.replica.store.write(Batch(meta={"caught_up_at": repr(state.caught_up_at)}))
            self._compare_documents(result.touched)
        return state

    def _recover(self) -> None:
        """After a failure mid-backfill: the verifiers saw pages that may not be stored,
        and the cursor may name one whose write failed; the store says what is true."""
        self.replica.reset()
        self.state.reload(self.replica.store)

    def _commit(self, page: Page, moved: tuple[str, str], *, pipelined: bool) -> PageResult:
        meta = {"cursor": moved[0], "cursor_time": moved[1]}
        result = self.replica.commit(page, meta, pipelined=pipelined)
        state = self.state
        state.cursor, state.cursor_time = moved
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
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="plc-mirror", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops following (after the page in hand) and lets the verifying workers go."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
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
