"""F-CUR-4: a cursor's kind is known, never guessed from its size in use: a `Seq` (a
relay's, a PDS's, a Jetstream v2 instance's own number) or a `Time` (a Jetstream v1
message's `time_us`). What
each wire sends for each (a v1 time never goes to v2 as a seq, a v2 seq never to v1), which
it takes as plausible (F-CUR-1), and how the stored digits, as earlier versions wrote them,
are read: by the reference Jetstream's own rule for a Jetstream, as a seq for a relay."""

from __future__ import annotations

import json
import time
from typing import Any

from atwhois.cache.stores import MemoryStore
from atwhois.stream.cursors import TIME_FROM, MemoryCursor, Seq, StoreCursor, Time
from atwhois.stream.frames import AccountEvent, IdentityEvent
from atwhois.stream.subscriber import Subscriber
from atwhois.stream.wires import FIREHOSE, JETSTREAM, JETSTREAM2

DID = "did:plc:" + "a" * 24
NOW_US = int(time.time() * 1_000_000)


def test_what_each_wire_asks_from_each_kind_of_cursor() -> None:
    # v2: its own seq as it is (replayed inclusive); a time a v1 run stored, in the
    # lexicon's timestamp form (10^15 and more), the microsecond after: never as a seq
    assert JETSTREAM2.resume(Seq(42)) == "42"
    assert JETSTREAM2.resume(Time(NOW_US)) == str(NOW_US + 1)
    assert int(JETSTREAM2.resume(Time(TIME_FROM)) or 0) >= TIME_FROM
    # v1: a time, the microsecond after; a v2 seq is not one it can be asked from
    assert JETSTREAM.resume(Time(NOW_US)) == str(NOW_US + 1)
    assert JETSTREAM.resume(Seq(42)) is None
    # a relay: its seq; never a time
    assert FIREHOSE.resume(Seq(42)) == "42" and FIREHOSE.resume(Time(NOW_US)) is None


def test_which_cursors_each_wire_takes_as_plausible() -> None:
    """F-CUR-1: the lexicon reserves 10^15 and more for times, so a v2 seq there is not one an
    instance sends; a v1 time below 10^15 (before 2001) is not one either (the reference
    would read it as a seq); a relay's seq may run to 2^53, as before."""
    assert JETSTREAM2.plausible(Seq(TIME_FROM - 1)) and not JETSTREAM2.plausible(Seq(TIME_FROM))
    assert JETSTREAM2.plausible(Time(NOW_US)) and not JETSTREAM2.plausible(Time(2**63 - 1))
    assert JETSTREAM.plausible(Time(NOW_US)) and not JETSTREAM.plausible(Time(TIME_FROM - 1))
    assert not JETSTREAM.plausible(Seq(42))
    assert FIREHOSE.plausible(Seq(TIME_FROM + 5)) and not FIREHOSE.plausible(Seq(2**53))
    assert not FIREHOSE.plausible(Time(NOW_US))


async def test_a_stored_cursor_is_digits_read_by_the_sources_rule() -> None:
    """What earlier versions wrote (plain digits) reads the same: for a Jetstream, below 10^15
    a seq, from it a time (the reference's own rule, on both its endpoints); for a relay, a
    seq whatever its size. What is written is the same digits."""
    store = MemoryStore()
    jetstream = StoreCursor(store, "wss://jetstream.test", JETSTREAM2.stored)
    relay = StoreCursor(store, "wss://relay.test", FIREHOSE.stored)
    digits = (("7", Seq(7)), (str(NOW_US), Time(NOW_US)), (str(TIME_FROM), Time(TIME_FROM)))
    for text, read in digits:
        await store.put(jetstream.key, text.encode(), time.time() + 60)
        assert await jetstream.load() == read
    await store.put(relay.key, str(TIME_FROM + 5).encode(), time.time() + 60)
    assert await relay.load() == Seq(TIME_FROM + 5)
    await jetstream.save(Time(NOW_US))
    written = await store.get(jetstream.key)
    assert written is not None and written.value == str(NOW_US).encode()


def v2_identity(seq: int) -> bytes:
    payload = {
        "$type": "network.bsky.jetstream.subscribeEvents#identity",
        "did": DID,
        "identity": {"did": DID, "seq": seq, "time": "2026-05-25T00:00:00Z"},
        "seq": seq,
        "time": "2026-05-25T00:00:00.000000Z",
    }
    return json.dumps({"$type": "message", "payload": payload}).encode()


async def _fed(subscriber: Subscriber, seqs: list[int]) -> list[bool]:
    return [await subscriber.feed(v2_identity(seq)) for seq in seqs]


async def test_a_v2_seq_past_the_time_line_is_not_applied_nor_lets_lower_ones_in() -> None:
    """F-CUR-1: a v2 seq of 10^15 or more is counted, not applied, and the cursor does not
    move. Before, it became the cursor, was taken for a time, and every lower seq after it
    was applied until a reconnection (and a time was asked of the instance)."""
    applied: list[int] = []

    async def on_event(event: IdentityEvent | AccountEvent) -> None:
        applied.append(event.seq)

    subscriber = Subscriber("ws://jetstream.test", on_event, MemoryCursor(), wire=JETSTREAM2)
    kept_going = await _fed(subscriber, [5, TIME_FROM + 3, 4, 6])
    assert applied == [5, 6] and subscriber.state.cursor == Seq(6)
    assert subscriber.state.implausible == 1 and subscriber.state.backwards == 1
    assert kept_going == [True, True, False, True]  # the one that went back closes


async def test_v2_events_after_a_v1_time_are_applied_and_the_cursor_becomes_a_seq() -> None:
    """An instance upgraded from v1: the stored time is asked in timestamp form, and the seqs
    that come are applied (no order between a time and a seq), the first becoming the
    cursor; from then on the order of seqs is kept."""
    applied: list[Any] = []

    async def on_event(event: IdentityEvent | AccountEvent) -> None:
        applied.append(event.seq)

    cursor = MemoryCursor(Time(NOW_US))
    subscriber = Subscriber("ws://jetstream.test", on_event, cursor, wire=JETSTREAM2)
    subscriber.state.cursor = await cursor.load()
    await _fed(subscriber, [3, 4, 4, 2])
    assert applied == [3, 4] and subscriber.state.cursor == Seq(4)
    assert subscriber.state.backwards == 1  # 4 again is the cursor's own (inclusive); 2 is not


async def test_v1_messages_sharing_a_time_are_all_applied() -> None:
    """The reference stamps a whole batch of events with one witnessed time, so v1 messages
    may share a `time_us`: the second is in order, not "backwards" (which closed the
    connection and asked again from the microsecond after, losing it); a lower one is not."""
    applied: list[int] = []

    async def on_event(event: IdentityEvent | AccountEvent) -> None:
        applied.append(event.seq)

    def v1(time_us: int, kind: str) -> bytes:
        body = {"did": DID, "seq": 1, "time": "2026-05-25T00:00:00Z"}
        body |= {"active": True} if kind == "account" else {}
        return json.dumps({"did": DID, "time_us": time_us, "kind": kind, kind: body}).encode()

    subscriber = Subscriber("ws://jetstream.test", on_event, MemoryCursor(), wire=JETSTREAM)
    frames = [v1(NOW_US, "identity"), v1(NOW_US, "account"), v1(NOW_US - 1, "identity")]
    assert [await subscriber.feed(frame) for frame in frames] == [True, True, False]
    assert applied == [NOW_US, NOW_US] and subscriber.state.cursor == Time(NOW_US)
    assert JETSTREAM.resume(Time(NOW_US)) == str(NOW_US + 1)  # nothing applied twice
