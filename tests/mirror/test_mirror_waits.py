"""A question about a DID the mirror does not know (`mirror.waits`), P-API-2 and P-API-4:
held until the follower can answer it (an operation for the DID applied, or a read of the
upstream that began after the question), woken by the follower's word rather than by looking
again and again, the store read again after; one poke for any number of questions, a bound
on how many are held. First with the follower played by hand, then with a real one polling
a list of lines, then with a real one following a stream the test feeds."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from atwhois.mirror import Follower, MirrorApi, MirrorState, Replica, Upstream
from atwhois.mirror.api import Reply
from atwhois.mirror.backends import SqliteMirrorStore
from atwhois.mirror.follow import POKE_GAP
from atwhois.mirror.records import InForce
from atwhois.mirror.upstream_stream import UpstreamStream
from atwhois.mirror.waits import Waits
from atwhois.resolver.errors import UpstreamFailure
from atwhois.resolver.response import MIRROR_HEADER
from devnet.synthetic_plc import export_lines
from tests.mirror.test_plc_mirror import ExportFile
from tests.support.waiting import eventually, until

LINES = list(export_lines(4, 1))  # four DIDs, a genesis operation each
DIDS = [json.loads(line)["did"] for line in LINES]
STRANGER = "did:plc:" + "q" * 24


class ByHand:
    """A follower played by the test: it applies operations and ends reads when told."""

    def __init__(self, store: SqliteMirrorStore, limit: int = 100) -> None:
        self.store = store
        self.state = MirrorState("https://upstream.test", caught_up_at=time.time())
        self.state.complete_as_of = time.time() - 10  # its last read, ten seconds ago
        self.pokes = 0
        self.waits = Waits(self.state, self.poke, limit=limit)
        self.api = MirrorApi(store, self.state, waits=self.waits)
        self.replica = Replica(store)

    def poke(self) -> None:
        self.pokes += 1

    def apply(self, line: str) -> None:
        """On another thread, as the follower's: written, then told."""
        self.replica.apply([line])
        self.waits.applied([json.loads(line)["did"]])

    def read_ended(self, complete: float) -> None:
        self.state.complete_as_of = max(complete, self.state.complete_as_of or 0.0)
        self.waits.read_ended()

    def ask(self, did: str) -> asyncio.Task[Reply]:
        return asyncio.ensure_future(self.api.run("GET", f"/{did}", {}, wait=60))


@pytest.fixture
def by_hand(tmp_path: Path) -> Iterator[ByHand]:
    store = SqliteMirrorStore(tmp_path / "mirror.db")
    follower = ByHand(store)
    yield follower
    follower.replica.close()
    store.close()


def header(reply: Reply) -> str:
    return reply.headers[MIRROR_HEADER]


async def test_a_question_ends_when_its_dids_operation_is_applied(by_hand: ByHand) -> None:
    """P-API-2: the operation of the DID asked about, applied, ends its question at once
    (not another DID's); a read that began before the question does not end it (the
    follower is poked again); one that began after it does, and the 404 is then current."""
    newcomer, other = by_hand.ask(DIDS[0]), by_hand.ask(DIDS[1])
    await eventually(lambda: by_hand.waits.waiting == 2)
    assert by_hand.pokes == 2  # one each; the follower's wake coalesces them
    await asyncio.to_thread(by_hand.apply, LINES[0])
    found = await newcomer
    assert found.status == 200
    assert not other.done()
    await asyncio.to_thread(by_hand.read_ended, time.time() - 5)  # began before the question
    await eventually(lambda: by_hand.pokes == 3)
    assert not other.done()
    await asyncio.to_thread(by_hand.read_ended, time.time())
    absent = await other
    assert absent.status == 404 and "current=yes" in header(absent)
    assert by_hand.waits.waiting == 0


async def test_a_failed_read_ends_the_questions_as_not_current(by_hand: ByHand) -> None:
    """The follower's read failed: none comes before its back-off, so the 404 is answered
    then, not current; a question while it is failing is answered at once, unpoked."""
    waiting = by_hand.ask(DIDS[2])
    await eventually(lambda: by_hand.waits.waiting == 1)
    by_hand.state.last_error = "UpstreamFailure: 503"
    await asyncio.to_thread(by_hand.waits.read_ended)
    failed = await waiting
    assert failed.status == 404 and "current=no" in header(failed)
    pokes = by_hand.pokes
    at_once = await by_hand.ask(DIDS[3])
    assert at_once.status == 404 and by_hand.pokes == pokes


async def test_questions_past_the_bound_are_answered_at_once(tmp_path: Path) -> None:
    """Two questions held at most: a third is answered at once, as not current, and the
    waits hold no more than two; the two end with the read."""
    store = SqliteMirrorStore(tmp_path / "mirror.db")
    by_hand = ByHand(store, limit=2)
    try:
        held = [by_hand.ask(DIDS[0]), by_hand.ask(DIDS[1])]
        await eventually(lambda: by_hand.waits.waiting == 2)
        third = await by_hand.ask(STRANGER)
        assert third.status == 404 and "current=no" in header(third)
        assert by_hand.waits.waiting == 2 and not any(task.done() for task in held)
        await asyncio.to_thread(by_hand.read_ended, time.time())
        for answer in await asyncio.gather(*held):
            assert answer.status == 404 and "current=yes" in header(answer)
    finally:
        by_hand.replica.close()
        store.close()


class AppliedDuringTheRead(SqliteMirrorStore):
    """A store read off the event loop (as a network database is), during whose first read
    of a DID's row the follower applies that DID's operation."""

    name = "sqlite, read off the loop"
    follower: ByHand
    line: str

    def in_force(self, did: str) -> InForce | None:
        found = super().in_force(did)
        if found is None and self.line:
            line, self.line = self.line, ""
            self.follower.apply(line)
        return found


async def test_an_operation_applied_while_the_question_is_read_is_not_missed(
    tmp_path: Path,
) -> None:
    """The question's read missed the operation, and the follower's word about it came
    before the question waited: the store is read again at once, not waited out."""
    store = AppliedDuringTheRead(tmp_path / "mirror.db")
    by_hand = ByHand(store)
    store.follower, store.line = by_hand, LINES[0]
    try:
        found = await by_hand.api.run("GET", f"/{DIDS[0]}", {}, wait=60)
        assert found.status == 200
        assert by_hand.pokes == 0  # never waited
    finally:
        by_hand.replica.close()
        store.close()


async def test_a_flood_of_unknown_dids_costs_the_upstream_a_read_a_poke_gap(
    tmp_path: Path,
) -> None:
    """P-API-2, poll mode: 50 questions about DIDs nobody registered, at once, of a follower
    resting a minute between polls: one poke for all (a read or two of the upstream, a poke
    gap apart), every 404 current; nothing is left held."""
    store = SqliteMirrorStore(tmp_path / "mirror.db")
    export = ExportFile(LINES)
    follower = Follower(Replica(store), export, interval=60)
    api = MirrorApi(store, follower.state, waits=follower.waits)
    follower.start()
    try:
        until(lambda: follower.state.caught_up_at is not None, 10)
        before = export.requests
        strangers = [f"did:plc:{'a' * 22}{chr(97 + n // 26)}{chr(97 + n % 26)}" for n in range(50)]
        started = time.monotonic()
        answers = await asyncio.gather(*(api.run("GET", f"/{did}", {}) for did in strangers))
        assert all(a.status == 404 and "current=yes" in header(a) for a in answers)
        reads = export.requests - before
        assert 1 <= reads <= 2, reads
        if reads == 2:  # the second a poke gap after the first
            assert time.monotonic() - started >= POKE_GAP
        assert follower.waits.waiting == 0
    finally:
        follower.stop()
        store.close()


def sequenced(lines: list[str]) -> list[str]:
    """Export lines in the `seq` format (`sequenced_op`), numbered from 1."""
    return [
        json.dumps({"type": "sequenced_op", **json.loads(line), "seq": n})
        for n, line in enumerate(lines, 1)
    ]


class SeqExport(Upstream):
    """An upstream's `/export?after=<seq>`, counting the requests."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("https://upstream.test")
        self.lines, self.requests = [line.encode() for line in lines], 0

    def page(self, after: str, count: int = 1000) -> list[bytes]:
        self.requests += 1
        return [line for line in self.lines if json.loads(line)["seq"] > int(after)][:count]

    def document(self, did: str) -> dict[str, object] | None:
        raise UpstreamFailure("not served here")


class FedStream(UpstreamStream):
    """The upstream's stream as the test feeds it; pings answered while `pong` is set."""

    def __init__(self) -> None:
        super().__init__("https://upstream.test")
        self.messages: queue.Queue[bytes] = queue.Queue()
        self.pong = threading.Event()
        self.pong.set()

    def open(self, cursor: str) -> None:
        return None

    def receive(self, most: int, wait: float) -> list[bytes]:
        lines: list[bytes] = []
        try:
            lines.append(self.messages.get(timeout=wait))
            while len(lines) < most:
                lines.append(self.messages.get_nowait())
        except queue.Empty:
            pass
        return lines

    def alive(self) -> bool:
        return self.pong.wait(30)

    def close(self) -> None:
        return None


async def test_a_stream_follower_answers_an_op_in_flight_and_proves_an_absence(
    tmp_path: Path,
) -> None:
    """P-API-4, stream mode. A clean look proves the view complete as of when it was sent
    (no margin taken off) and the header current while the stream is proven. A question
    about a DID whose operation is in the upstream's export but not yet sent by the stream
    waits for it and is answered 200 (it waited out its bound before); one about a DID
    nobody registered is answered after the next look, 404 current=yes. An operation the
    export shows and the stream never sends is a stall: the question waiting is answered
    not current, and so is every answer after."""
    lines = sequenced(LINES)
    export, stream = SeqExport(lines[:2]), FedStream()
    store = SqliteMirrorStore(tmp_path / "mirror.db")
    follower = Follower(Replica(store), export, interval=60, stream=stream)
    api = MirrorApi(store, follower.state, waits=follower.waits)
    state = follower.state
    follower.start()
    try:
        until(lambda: state.caught_up_at is not None, 10)
        follower.poke()  # past the rest after the backfill: the stream, and its first look
        until(lambda: state.stream_proven, 10)
        assert state.complete_as_of == state.caught_up_at  # the look's own time
        known = await api.run("GET", f"/{DIDS[0]}", {})
        assert known.status == 200 and "current=yes" in header(known)

        stream.pong.clear()  # the next look waits for its ping until the test lets it
        export.lines.append(lines[2].encode())  # in the upstream, in flight on the stream
        in_flight = asyncio.ensure_future(api.run("GET", f"/{DIDS[2]}", {}, wait=60))
        await eventually(lambda: follower.waits.waiting == 1)
        stream.messages.put(lines[2].encode())
        stream.pong.set()
        found = await in_flight
        assert found.status == 200

        asked = time.time()
        absent = await api.run("GET", f"/{STRANGER}", {}, wait=60)
        assert absent.status == 404 and "current=yes" in header(absent)
        assert state.complete_as_of is not None and state.complete_as_of >= asked

        export.lines.append(lines[3].encode())  # never sent: the stream stalls
        stalled = await api.run("GET", f"/{DIDS[3]}", {}, wait=60)
        assert stalled.status == 404 and "current=no" in header(stalled)
        assert state.stream_stalls >= 1 and not state.stream_proven
        later = await api.run("GET", f"/{DIDS[0]}", {})
        assert later.status == 200 and "current=no" in header(later)
    finally:
        stream.pong.set()
        follower.stop()
        store.close()
