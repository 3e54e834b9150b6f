"""How each kind of event stream is asked for and read (`Wire`): a relay's or PDS's
firehose (`FIREHOSE`), Jetstream v1's `/subscribe` (`JETSTREAM`) and Jetstream v2's
`subscribeEvents` (`JETSTREAM2`, which falls back to v1 on an instance without it): the
path, the parameters, the subprotocol, the decoder, how a cursor resumes and which cursors
a source can have sent (F-CUR-1)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from .frames import Event, decode, decode_jetstream, decode_jetstream_v2

PATH = "/xrpc/com.atproto.sync.subscribeRepos"
FUTURE_MARGIN = 600.0  # seconds a Jetstream event's time may be ahead of this clock
RELAY_SEQ_BOUND = 2**53  # past any relay's numbering (and JSON's exact integers)


class Wire(NamedTuple):
    """How a kind of stream is asked for and read."""

    path: str
    decode: Callable[[bytes], Event]
    params: tuple[tuple[str, str], ...]  # asked of every connection
    resume: Callable[[int], str]  # the `cursor` parameter that resumes after the last applied
    plausible: Callable[[int], bool]  # a seq (or time) the source can have sent
    protocols: tuple[str, ...] = ()  # WebSocket subprotocols offered
    inclusive: bool = False  # a resumed stream sends the event at the cursor again
    fallback: Wire | None = None  # where an instance without this path is followed


def _relay_seq(seq: int) -> bool:
    return 0 <= seq < RELAY_SEQ_BOUND


def _jetstream_time(time_us: int) -> bool:
    return 0 <= time_us <= (time.time() + FUTURE_MARGIN) * 1_000_000


FIREHOSE = Wire(PATH, decode, (), str, _relay_seq)  # a relay sends what comes after `cursor`
# Jetstream replays from a time, inclusive: from the microsecond after the last applied. It
# sends identity and account messages whatever collections are asked for: asking for one
# nobody writes leaves out the commits (the bulk of the stream), which say nothing here.
JETSTREAM = Wire(
    "/subscribe",
    decode_jetstream,
    (("wantedCollections", "blue.atwhois.none"),),
    lambda cursor: str(cursor + 1),
    _jetstream_time,
)
# Jetstream v2 asks for the kinds it wants (no commits at all), numbers its events with the
# instance's own seq and replays from the cursor inclusive. A cursor of 1e15 or more is a
# time in microseconds to it (what a v1 run stored); a seq is never sent to another
# instance (the cursor is stored by URL). An instance without v2 is followed on v1.
V2_TIME = 10**15
JETSTREAM2 = Wire(
    "/xrpc/network.bsky.jetstream.subscribeEvents",
    decode_jetstream_v2,
    (("kinds", "identity"), ("kinds", "account")),
    str,
    _relay_seq,
    protocols=("xrpc.v1.json",),
    inclusive=True,
    fallback=JETSTREAM,
)
