"""How each kind of event stream is asked for and read (`Wire`): a relay's or PDS's
firehose (`FIREHOSE`), Jetstream v1's `/subscribe` (`JETSTREAM`) and Jetstream v2's
`subscribeEvents` (`JETSTREAM2`, which falls back to v1 on an instance without it): the
path, the parameters, the subprotocol, the decoder, what kind of cursor its events carry,
which cursors a source can have sent (F-CUR-1) and how a cursor resumes it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from .cursors import TIME_FROM, Position, Seq, Time, jetstream_cursor
from .frames import Event, decode, decode_jetstream, decode_jetstream_v2

PATH = "/xrpc/com.atproto.sync.subscribeRepos"
FUTURE_MARGIN = 600.0  # seconds a Jetstream event's time may be ahead of this clock
RELAY_SEQ_BOUND = 2**53  # past any relay's numbering (and JSON's exact integers)


class Wire(NamedTuple):
    """How a kind of stream is asked for and read."""

    path: str
    decode: Callable[[bytes], Event]
    params: tuple[tuple[str, str], ...]  # asked of every connection
    position: Callable[[int], Position]  # what an event's number is: a Seq or a Time
    plausible: Callable[[Position], bool]  # a cursor the source can have sent (F-CUR-1)
    # the `cursor` parameter asking for what follows a cursor; None: not one it can take
    resume: Callable[[Position], str | None]
    stored: Callable[[int], Position]  # a cursor's stored digits, read
    protocols: tuple[str, ...] = ()  # WebSocket subprotocols offered
    inclusive: bool = False  # a resumed stream sends the event at the cursor again
    future_cursor_error: bool = False  # its FutureCursor error: our cursor is ahead of it
    fallback: Wire | None = None  # where an instance without this path is followed


def _relay_seq(position: Position) -> bool:
    return isinstance(position, Seq) and 0 <= position.value < RELAY_SEQ_BOUND


def _seq_only(position: Position) -> str | None:
    return str(position.value) if isinstance(position, Seq) else None


def _jetstream_time(position: Position) -> bool:
    """A v1 time: not ahead of this clock (past a margin), nor before 10^15 µs (2001), which
    the reference would read as a seq."""
    limit = (time.time() + FUTURE_MARGIN) * 1_000_000
    return isinstance(position, Time) and TIME_FROM <= position.value <= limit


def _after_time(position: Position) -> str | None:
    """Jetstream replays from a time, inclusive: from the microsecond after the last applied
    (nothing applied twice; as the reference gives a batch of events one time, a connection
    lost inside a batch misses the batch's rest: v1 has no finer cursor, v2's seq has). A
    seq is never sent to a v1 instance (it would read it as one of its own seqs)."""
    return str(position.value + 1) if isinstance(position, Time) else None


def _v2_cursor(position: Position) -> bool:
    """An instance's seq below 10^15 (the lexicon reserves the range above for times), or a
    time a v1 run of this instance stored."""
    if isinstance(position, Seq):
        return 0 <= position.value < TIME_FROM
    return _jetstream_time(position)


def _v2_resume(position: Position) -> str | None:
    """The instance's seq, replayed inclusive. A time stored by a v1 run (the instance was
    upgraded since) is never sent as a seq (F-CUR-4): it goes in the lexicon's own timestamp
    form (10^15 and more), the microsecond after the last applied, which the instance
    translates to the first seq it witnessed then or after, as it does a v1 reconnection's:
    the upgrade loses no more than a reconnection on v1 would."""
    return str(position.value) if isinstance(position, Seq) else _after_time(position)


# a relay sends what comes after `cursor`; it says FutureCursor when it does not have it
FIREHOSE = Wire(PATH, decode, (), Seq, _relay_seq, _seq_only, Seq, future_cursor_error=True)
# Jetstream v1's cursor is the message's time. It sends identity and account messages whatever
# collections are asked for: asking for one nobody writes leaves out the commits (the bulk
# of the stream), which say nothing here.
JETSTREAM = Wire(
    "/subscribe",
    decode_jetstream,
    (("wantedCollections", "blue.atwhois.none"),),
    Time,
    _jetstream_time,
    _after_time,
    jetstream_cursor,
)
# Jetstream v2 asks for the kinds it wants (no commits at all), numbers its events with the
# instance's own seq and replays from the cursor inclusive. A seq is never sent to another
# instance (the cursor is stored by URL). An instance without v2 is followed on v1.
JETSTREAM2 = Wire(
    "/xrpc/network.bsky.jetstream.subscribeEvents",
    decode_jetstream_v2,
    (("kinds", "identity"), ("kinds", "account")),
    Seq,
    _v2_cursor,
    _v2_resume,
    jetstream_cursor,
    protocols=("xrpc.v1.json",),
    inclusive=True,
    fallback=JETSTREAM,
)
