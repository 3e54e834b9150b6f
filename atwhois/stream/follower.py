"""The daemon following event streams (`atwhois serve --firehose URL`): one `Subscriber` per
URL, cursors in the cache store, and on each `#identity` event a re-verification of the DID
and of its handles in the background (`cache.Revalidator`, which the PLC mirror in the
process tells of its changes too). An `#account` event makes every answer about its DID say
what its status means at once (`cache.accounts.STATUSES`: not active is `did_deactivated`
with the status as the reason; `desynchronized` or `throttled` while active is a warning),
kept in the store across restarts (`CachedResolver.mark_account`); plainly active again
lifts it. Watchers (the audits) hear of both.

Authority per source: an `#account` event is taken from a relay as the relay asserts it, and
from a PDS's own stream only about DIDs whose document names that PDS (a PDS speaks for the
accounts it hosts). It is kept only for DIDs this daemon holds or watches (the network's
other accounts are nobody's question here), a row per DID, bounded in number. An `#identity`
event asserts nothing that is believed: it only makes the daemon verify the DID afresh from
the sources themselves, so it is taken from any stream.

A gap in a stream (events may have been missed) owes a pass re-verifying every identity held
(`cache.sweep`: a few at a time, at a share of the upstreams' pace; a gap during a pass
owes one more, F-CUR-6). A stream with more than 3 gaps in 10 minutes is a fault
(`problems`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from atwhois.cache import CachedResolver
from atwhois.cache.accounts import mark_of
from atwhois.cache.revalidate import Revalidator, Watcher
from atwhois.cache.sweep import Sweep

from .cursors import StoreCursor
from .frames import AccountEvent, IdentityEvent
from .process import WIRES, StreamProcess
from .state import GAP_FAULT, GAP_WINDOW, RecentGaps, StreamState
from .subscriber import Subscriber

if TYPE_CHECKING:
    from prometheus_client.core import Metric


class Follower:
    def __init__(
        self,
        cached: CachedResolver,
        urls: list[str],
        *,
        watchers: list[Watcher] | None = None,
        watched: Callable[[str], bool] = lambda did: False,
        quiet_after: float = 30.0,
        revalidator: Revalidator | None = None,
        jetstreams: list[str] | None = None,
        processes: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`urls`: relays' or PDSes' event streams; `jetstreams`: Jetstreams, followed the
        same way. `revalidator`: shared with the other sources of changes (the PLC mirror);
        by default one of its own, telling `watchers`. `processes`: each stream is read and
        decoded in a process of its own (`stream.process`: the daemon's, so that a relay's
        commits never take its event loop), else on this loop. `clock`: what the streams'
        gaps of late are counted by."""
        self.cached = cached
        self.revalidator = revalidator or Revalidator(cached, watchers=watchers)
        self._owns_revalidator = revalidator is None  # a shared one is stopped by its owner
        self.sweep = Sweep(self.revalidator)
        self.watched = watched  # whether a DID is on the audits' watch-list
        self.subscribers: list[Subscriber | StreamProcess] = []
        self.recent: list[RecentGaps] = []  # each stream's gaps of late, as `subscribers`
        wired = [(url, "firehose") for url in urls] + [
            (url, "jetstream2")
            for url in jetstreams or []  # v1 where an instance has no v2
        ]
        for url, wire in wired:
            cursor = StoreCursor(cached.store, url, WIRES[wire].stored)
            recent = RecentGaps(clock)
            on_gap = self._gap(recent)
            subscriber: Subscriber | StreamProcess
            if processes:
                subscriber = StreamProcess(
                    url, self.on_event, cursor, wire=wire, quiet_after=quiet_after, on_gap=on_gap
                )
            else:
                subscriber = Subscriber(
                    url,
                    self.on_event,
                    cursor,
                    quiet_after=quiet_after,
                    wire=WIRES[wire],
                    on_gap=on_gap,
                )
            subscriber.on_event = self._from(subscriber)
            self.subscribers.append(subscriber)
            self.recent.append(recent)
        self.ignored: dict[str, int] = {"not_held": 0, "not_its_account": 0, "over_bound": 0}
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.cached.restore_accounts()
        for subscriber in self.subscribers:
            self._spawn(subscriber.run())

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.sweep.stop()
        if self._owns_revalidator:
            await self.revalidator.stop()

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _gap(self, recent: RecentGaps) -> Callable[[], Awaitable[None]]:
        """What a stream's gap does (events may have been missed): counted in its window,
        and a pass over every identity held owed (`Sweep`: one, or one more after the one
        under way; never a burst of them all into the revalidator)."""

        async def gap() -> None:
            recent.add()
            self.sweep.gap()

        return gap

    def _from(
        self, subscriber: Subscriber | StreamProcess
    ) -> Callable[[IdentityEvent | AccountEvent], Any]:
        async def heard(event: IdentityEvent | AccountEvent) -> None:
            await self.on_event(event, subscriber.state)

        return heard

    async def on_event(
        self, event: IdentityEvent | AccountEvent, source: StreamState | None = None
    ) -> None:
        """One event; `source`: the stream it came from (None: one that speaks for all)."""
        if isinstance(event, AccountEvent):
            await self._account(event, source)
            return
        # The event may be ahead of the document's source (a directory's replica, a mirror
        # between polls): a claim, re-checked until the change shows (`cache.claims`).
        where = source.url if source is not None else "a stream"
        claim = f"#identity seq {event.seq} from {where} ({event.time})"
        await self.revalidator.claimed(event.did, event.handle, claim)

    async def _account(self, event: AccountEvent, source: StreamState | None) -> None:
        mark = mark_of(event.active, event.status)  # what it means: `cache.accounts`
        did = event.did
        marked = self.cached.accounts.get(did) is not None
        if not marked and mark is not None:
            held, _ = await self.cached.held(did)
            if not (held or self.watched(did)):
                self.ignored["not_held"] += 1
                return
        if source is not None and not await self._speaks_for(source, did):
            self.ignored["not_its_account"] += 1
            return
        refused = self.cached.accounts.refused
        if await self.cached.mark_account(did, mark):
            self.revalidator.tell({did})
        elif self.cached.accounts.refused > refused:
            self.ignored["over_bound"] += 1

    async def _speaks_for(self, source: StreamState, did: str) -> bool:
        """A relay speaks for every account; a PDS for those whose document names it; a
        stream whose role is not known yet, for none."""
        if source.role == "relay":
            return True
        if source.role != "pds" or source.pds_host is None:
            return False
        pds = await self.cached.hosted_at(did)
        if pds is None:  # not held: resolved, for a watched DID
            pds = (await self.cached.lookup(did)).pds
        return pds is not None and urlsplit(pds).hostname == source.pds_host

    def health(self) -> list[dict[str, Any]]:
        return [
            {**s.state.to_json(), "gaps_recent": recent.count()}
            for s, recent in zip(self.subscribers, self.recent, strict=True)
        ]

    def problems(self) -> list[str]:
        """Why a stream is not followed, or keeps losing events (more than 3 gaps in 10
        minutes, F-CUR-6), one line each (none: all are well)."""
        stalled = [p for s in self.subscribers if (p := s.state.problem()) is not None]
        pairs = zip(self.subscribers, self.recent, strict=True)
        return stalled + [p for s, recent in pairs if (p := recent.fault(s.url)) is not None]

    def metrics(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        events = CounterMetricFamily(
            "atwhois_stream_events",
            "Event-stream frames, by stream and type.",
            labels=["url", "type"],
        )
        reconnects = CounterMetricFamily(
            "atwhois_stream_reconnects", "Reconnections to an event stream.", labels=["url"]
        )
        malformed = CounterMetricFamily(
            "atwhois_stream_malformed_frames", "Frames refused as malformed.", labels=["url"]
        )
        lag = GaugeMetricFamily(
            "atwhois_stream_lag_seconds",
            "Now minus the time of the last identity or account event.",
            labels=["url"],
        )
        connected = GaugeMetricFamily(
            "atwhois_stream_connected", "1 while connected to the stream.", labels=["url"]
        )
        gaps = CounterMetricFamily(
            "atwhois_stream_gaps",
            "Gaps in an event stream (events may have been missed: each owes a pass "
            "re-verifying every identity held), as its reader counted them.",
            labels=["url"],
        )
        recent_gaps = GaugeMetricFamily(
            "atwhois_stream_gaps_recent",
            f"Gaps in an event stream in the last {GAP_WINDOW / 60:g} minutes (more than "
            f"{GAP_FAULT}: a fault in /_health).",
            labels=["url"],
        )
        for subscriber, recent in zip(self.subscribers, self.recent, strict=True):
            state = subscriber.state
            for kind, n in sorted(state.events.items()):
                events.add_metric([state.url, kind], n)
            reconnects.add_metric([state.url], state.reconnects)
            malformed.add_metric([state.url], state.malformed)
            connected.add_metric([state.url], int(state.connected))
            gaps.add_metric([state.url], state.gaps)
            recent_gaps.add_metric([state.url], recent.count())
            if state.lag_s is not None:
                lag.add_metric([state.url], state.lag_s)
        yield from (events, reconnects, malformed, lag, connected, gaps, recent_gaps)
        yield from self.sweep.metrics()
