"""Fuzz targets for hostile sources (issue 36): the mirror's follower over a scripted upstream
whose pages go back, repeat, end in a line that does not parse or carry seqs no directory
sends; the stream subscriber over frame sequences whose seqs go back or jump; the mirror's
read API over any `after`, `count` and `limit`; the follower of an upstream's /export/stream
over message batches that go back, repeat or do not parse, closed for any reason. Each run
asserts what must hold whatever the input: cursors never move back, a follower makes a
bounded number of requests (no loop, no hang), every answer is a 200 or a classified 400."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from atwhois.mirror import Follower, MirrorApi, MirrorState, Replica
from atwhois.mirror.backends import SqliteMirrorStore
from atwhois.mirror.records import Batch
from atwhois.mirror.upstream_stream import FUTURE, OUTDATED, TOO_SLOW, StreamClosed
from atwhois.resolver.errors import UpstreamFailure
from atwhois.resolver.untrusted import BadNumber, parse_count
from atwhois.stream.cursors import MemoryCursor
from atwhois.stream.subscriber import Subscriber
from devnet import relay_frames
from devnet.synthetic_plc import export_lines

EXPORT = [json.loads(line) for line in export_lines(4, 3)]
PAGE = 4  # the follower's page size here: pages are full often, so it asks again

# What a hostile directory puts where a seq goes: in order, backwards, repeated, huge,
# negative, not a number, a digit that is not ASCII.
seqs = st.one_of(
    st.integers(0, 40),
    st.integers(-3, 2**70),
    st.booleans(),
    st.sampled_from(["٣", "12", 1.5, None]),
)
lines = st.one_of(
    st.tuples(st.sampled_from(range(len(EXPORT))), seqs).map(
        lambda case: json.dumps({"type": "sequenced_op", "seq": case[1], **EXPORT[case[0]]})
    ),
    st.sampled_from(range(len(EXPORT))).map(lambda i: json.dumps(EXPORT[i])),  # legacy
    st.text(max_size=30),
)
export_scripts = st.lists(st.lists(lines, max_size=PAGE + 1), max_size=5)


class ScriptedUpstream:
    """Serves the scripted pages in turn, whatever `after` asks, then empty pages."""

    url = "https://upstream.test"
    deadline = 1.0
    view_age = 0.0  # a directory's own pages

    def __init__(self, pages: list[list[str]]) -> None:
        self.pages = [[line.encode() for line in page] for page in pages]
        self.requests = 0
        self.closing = threading.Event()

    def page(self, after: str, count: int) -> list[bytes]:
        self.requests += 1
        return self.pages.pop(0) if self.pages else []

    def document(self, did: str) -> dict[str, Any] | None:
        return None

    def close(self) -> None:
        return None


_STORE: list[SqliteMirrorStore] = []


def follow_script(pages: list[list[str]]) -> None:
    """A follower catching up over the script, from a cursor of 0, until it has read it
    all: each catch-up ends (a bounded number of requests), a failure is classified, and the
    cursor never moves back."""
    if not _STORE:
        _STORE.append(SqliteMirrorStore(Path(tempfile.mkdtemp(prefix="atwhois-fuzz-")) / "m.db"))
    store = _STORE[0]
    store.write(Batch(meta={"cursor": "0", "cursor_time": ""}))
    upstream = ScriptedUpstream(pages)
    follower = Follower(
        Replica(store),
        upstream,  # type: ignore[arg-type]
        page_size=PAGE,
        check_documents=0,
    )
    cursors = [0]
    try:
        _catch_up_over(follower, upstream, store, len(pages), cursors)
    finally:
        follower.stop()


def _catch_up_over(
    follower: Follower,
    upstream: ScriptedUpstream,
    store: SqliteMirrorStore,
    pages: int,
    cursors: list[int],
) -> None:
    for _ in range(pages + 1):
        before = upstream.requests
        with contextlib.suppress(UpstreamFailure):  # the upstream's fault, classified
            follower.catch_up()
        assert upstream.requests - before <= pages + 1, "a catch-up that does not end"
        cursor = follower.state.cursor or "0"
        assert cursor == (store.meta().get("cursor") or "0")
        if cursor.isdigit():
            assert int(cursor) >= cursors[-1], f"the cursor went back: {cursors} -> {cursor}"
            cursors.append(int(cursor))


frame_scripts = st.lists(
    st.tuples(st.sampled_from(["identity", "account", "commit"]), st.integers(-2, 2**63)),
    max_size=12,
)
_LOOP = asyncio.new_event_loop()


def feed_frames(script: list[tuple[str, int]]) -> None:
    """A subscriber fed frames whose seqs go anywhere: what it hands on comes in strictly
    increasing order, and its cursor never moves back."""
    delivered: list[int] = []

    async def on_event(event: Any) -> None:
        delivered.append(event.seq)

    subscriber = Subscriber("ws://relay.test", on_event, MemoryCursor())

    async def run() -> None:
        for kind, seq in script:
            frame = {
                "identity": lambda s: relay_frames.identity(s),
                "account": lambda s: relay_frames.account(s, False, "takendown"),
                "commit": lambda s: relay_frames.commit(s, blocks=8),
            }[kind](seq)
            before = subscriber.state.cursor
            await subscriber.feed(frame)
            after = subscriber.state.cursor
            assert before is None or (after is not None and after.value >= before.value), (
                before,
                after,
            )

    _LOOP.run_until_complete(run())
    assert delivered == sorted(set(delivered)), delivered


_API: list[MirrorApi] = []
queries = st.dictionaries(
    st.sampled_from(["after", "count"]),
    st.one_of(
        st.text(max_size=30),
        st.integers(-(2**70), 2**70).map(str),
        st.sampled_from(["9999-12-31T23:59:59.999-12:00", "0001-01-01T00:00:00.000+14:00"]),
    ),
)


def read_api(case: tuple[dict[str, str], str]) -> None:
    """Any `after` and `count` of `/export` (GET or HEAD) is a 200 of JSON Lines or a 400
    with a message; any `limit` is a number in its range or a classified refusal."""
    query, limit = case
    if not _API:
        store = SqliteMirrorStore(Path(tempfile.mkdtemp(prefix="atwhois-fuzz-")) / "api.db")
        Replica(store).apply([json.dumps(entry) for entry in EXPORT])
        _API.append(
            MirrorApi(store, MirrorState("https://upstream.test", caught_up_at=time.time()))
        )
    for method in ("GET", "HEAD"):
        reply = _API[0].answer(method, "/export", query)
        assert reply.status in (200, 400), (query, reply.status)
        for text in reply.body.splitlines():
            json.loads(text)
    try:
        number = parse_count(limit, name="limit", high=10_000)
    except BadNumber:
        return
    assert 0 <= number <= 10_000 and limit.isascii()


# What a hostile upstream's /export/stream sends: batches of messages (a message is a line
# as above), then a close with any reason.
stream_scripts = st.tuples(
    st.lists(st.lists(lines, max_size=PAGE + 1), max_size=5),
    st.sampled_from([FUTURE, OUTDATED, TOO_SLOW, "", "bye", "x" * 200]),
)


class ScriptedStream:
    """Hands out the scripted batches, whatever the cursor, then closes with the reason."""

    url = "wss://upstream.test/export/stream"

    def __init__(self, batches: list[list[str]], reason: str) -> None:
        self.batches = [[line.encode() for line in batch] for batch in batches]
        self.reason = reason

    def open(self, cursor: str) -> None:
        return None

    def receive(self, most: int, wait: float) -> list[bytes]:
        if self.batches:
            return self.batches.pop(0)
        raise StreamClosed(f"{self.url} closed the stream {self.reason}", self.reason)

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        return None


def follow_stream(script: tuple[list[list[str]], str]) -> None:
    """A follower reading the script as its upstream's stream, from a cursor of 0: it
    ends (OutdatedCursor: handed back to paging) or fails in a classified way, and its
    cursor, the store's, never moves back."""
    batches, reason = script
    if not _STORE:
        _STORE.append(SqliteMirrorStore(Path(tempfile.mkdtemp(prefix="atwhois-fuzz-")) / "m.db"))
    store = _STORE[0]
    store.write(Batch(meta={"cursor": "0", "cursor_time": ""}))
    follower = Follower(
        Replica(store),
        ScriptedUpstream([]),  # type: ignore[arg-type]
        page_size=PAGE,
        check_documents=0,
        stream=ScriptedStream(batches, reason),  # type: ignore[arg-type]
    )
    try:
        try:
            assert follower._follow_stream() == OUTDATED == reason
        except UpstreamFailure:  # the upstream's fault or its close, classified
            assert reason != OUTDATED or follower.state.faults
        cursor = follower.state.cursor or "0"
        assert cursor == (store.meta().get("cursor") or "0")
        assert cursor.isdigit(), cursor  # a stream cursor is a seq
    finally:
        follower.stop()


HOSTILE = [
    ("export page sequences", export_scripts, follow_script),
    ("stream message sequences", stream_scripts, follow_stream),
    ("stream frame sequences", frame_scripts, feed_frames),
    ("mirror read API queries", st.tuples(queries, st.text(max_size=24)), read_api),
]
