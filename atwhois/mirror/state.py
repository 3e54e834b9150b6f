"""What a mirror knows of its own following: `/_health`, `/metrics`, the progress line and
the lookups' evidence say it (`MirrorState`)."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .store import SqlMirrorStore

if TYPE_CHECKING:
    from prometheus_client.core import Metric

STALL_AFTER = 300.0  # seconds without progress before /_health says the follower is stalled


@dataclass
class MirrorState:
    """What `/_health`, `/metrics`, the progress line and the lookups' evidence say."""

    upstream: str
    ops: int = 0  # applied since start
    dids: int = 0  # created since start
    duplicates: int = 0
    rejected: Counter[str] = field(default_factory=Counter)  # by rule
    nullified: int = 0
    rebuilt: int = 0  # replays rebuilt from the store (near `ops`: PLC_MIRROR_REPLAYS too small)
    pages: int = 0
    cursor: str | None = None
    cursor_time: str | None = None  # createdAt of the last op applied
    upstream_seq: int | None = None  # the newest seq the upstream was seen to serve
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
    # how it follows (`stream`: the upstream's /export/stream, `poll`: paged /export)
    source: str = "poll"
    # following a stream: its last look at the upstream's export past the cursor was clean
    # (P-API-4), and the stream is still open; `caught_up_at` is then when that look was sent
    stream_proven: bool = False
    # how long after the view a proven stream still says `current=yes` (the follower makes
    # it twice its interval: a look comes every interval; one may be late or slow)
    proven_for: float = 0.0
    stream_errors: int = 0  # streams that ended in a failure (reconnected with back-off)
    stream_stalls: int = 0  # streams given up because the export held what they did not send
    # what this mirror's own /export/stream serves (`mirror.stream`)
    stream_consumers: int = 0
    stream_sent: int = 0
    stream_closed: Counter[str] = field(default_factory=Counter)  # by reason

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
        self.saw(int(meta["upstream_seq"]) if meta.get("upstream_seq") else None)
        caught_up, complete = meta.get("caught_up_at"), meta.get("complete_as_of")
        self.caught_up_at = float(caught_up) if caught_up else None
        self.complete_as_of = float(complete) if complete else None

    def saw(self, seq: int | None) -> None:
        """The upstream served an op numbered `seq` (a page, a stream message, a probe)."""
        if seq is not None and seq > (self.upstream_seq or 0):
            self.upstream_seq = seq

    def current_for(self, asked_at: float) -> bool:
        """Whether the mirror's view is complete as of `asked_at` (a request's arrival): a
        read of the upstream began after it (P-API-2); its 404 then confirms absence."""
        return self.complete_as_of is not None and self.complete_as_of >= asked_at

    def said_current(self, asked_at: float) -> bool:
        """What the header's `current` says of an answer to a question that came at
        `asked_at`: complete as of it, or following a stream whose last look was clean,
        at most `proven_for` before (P-API-4): what it sent since is held, but for what it
        has in flight (`follow.STREAM_MARGIN`) and a stall since that look (the next look
        finds it). Never for a 404 of a DID it does not know (`unconfirmed`)."""
        view = self.complete_as_of
        if view is None:
            return False
        return view + (self.proven_for if self.stream_proven else 0.0) >= asked_at

    def behind_seconds(self, now: float | None = None) -> float | None:
        """At most how far behind the upstream: the time since the export was last read
        to its end; following a stream, since the last clean look at the export past the
        cursor was sent (P-API-4). None while backfilling."""
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
        `asked_at`: what a lookup through the mirror cites, whether the mirror had read its
        upstream since, or follows a stream proven recently (`current`, `said_current`; a
        404 says yes only on such a read, `unconfirmed`: it is then a confirmed absence),
        how long ago it last read its upstream to the end (`behind`), and how long ago
        the view it answers from was complete (`complete`, rounded up; `none` before its
        first complete read): what a mirror following this one counts itself complete
        from (P-API-2)."""
        now = time.time()
        behind = self.behind_seconds(now)
        lag = f"behind={behind:.1f}s" if behind is not None else "behind=backfilling"
        current = "yes" if self.said_current(asked_at) else "no"
        view = self.complete_as_of
        complete = "none" if view is None else f"{math.ceil(max(0.0, now - view) * 10) / 10}s"
        return (
            f"verified; upstream={self.upstream}; {lag}; cursor={self.cursor_time or '-'}; "
            f"current={current}; complete={complete}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "upstream": self.upstream,
            "ops_applied": self.ops,
            "dids_created": self.dids,
            "duplicates": self.duplicates,
            "rejected": dict(self.rejected),
            "nullified": self.nullified,
            "replays_rebuilt": self.rebuilt,
            "pages": self.pages,
            "cursor": self.cursor,
            "cursor_time": self.cursor_time,
            "upstream_seq": self.upstream_seq,
            "behind_s": self.behind_seconds(),
            "documents_checked": self.documents_checked,
            "disagreements": self.disagreements,
            "errors": self.errors,
            "faults": self.faults,
            "bad_lines": self.bad_lines,
            "last_error": self.last_error,
            "problem": self.problem(),
            "role": self.role,
            "source": self.source,
            "stream_errors": self.stream_errors,
            "stream_stalls": self.stream_stalls,
            "stream": {
                "consumers": self.stream_consumers,
                "sent": self.stream_sent,
                "closed": dict(self.stream_closed),
            },
        }

    def metrics(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

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
            (
                "replays_rebuilt",
                self.rebuilt,
                "DIDs whose replay was not in a verifier's memory, rebuilt from the store.",
            ),
            ("upstream_errors", self.errors, "Failed polls of the upstream (retried)."),
            ("upstream_faults", self.faults, "Pages that went back (not followed)."),
            (
                "stream_stalls",
                self.stream_stalls,
                "Upstream streams given up: its export held an operation it did not send.",
            ),
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
        consumers = GaugeMetricFamily(
            "atwhois_plc_stream_consumers", "Consumers of this mirror's /export/stream now."
        )
        consumers.add_metric([], self.stream_consumers)
        yield consumers
        sent = CounterMetricFamily(
            "atwhois_plc_stream_sent_ops", "Operations sent to consumers of /export/stream."
        )
        sent.add_metric([], self.stream_sent)
        yield sent
        closed = CounterMetricFamily(
            "atwhois_plc_stream_closed",
            "Consumers of /export/stream gone, by reason (the close reason, or by_consumer).",
            labels=["reason"],
        )
        for reason, n in sorted(self.stream_closed.items()):
            closed.add_metric([reason], n)
        yield closed


def unconfirmed(provenance: str) -> str:
    """The header of a 404 for a DID the mirror does not know, read from a view that was not
    complete as of the question (`current_for`, taken before the read): `current=no`, even
    while its stream is proven (P-API-2: an absence is confirmed only by a read of the
    upstream that began after the question; the stream may have the DID in flight)."""
    return provenance.replace("; current=yes;", "; current=no;")
