"""Whose place a new connection takes at a full bound (issue 65), the rules one by one, on
connections whose answers and requests the test sets: the bytes waiting for a client (what
it takes makes them fewer) and whether aiohttp waits for its next request. The daemon under
slow readers is tests/server/test_slow_clients.py's."""

from __future__ import annotations

import logging
from typing import Any, cast

from aiohttp import web

from atwhois.server.connections import STUCK_GRACE, SWEEP_EVERY, ConnectionLimit, _Counted


class _Waiter:
    def done(self) -> bool:
        return False


class _Handler:
    """aiohttp's handler as the bound reads it: waiting for a request, or not."""

    def __init__(self) -> None:
        self._waiter: _Waiter | None = None


class _Transport:
    """A connection's transport with no socket to read: what waits for the client is what
    this process holds (`waiting`)."""

    def __init__(self, peer: str) -> None:
        self.peer, self.waiting, self.aborted = peer, 0, False

    def get_write_buffer_size(self) -> int:
        return self.waiting

    def get_extra_info(self, name: str) -> Any:
        return (self.peer, 1234) if name == "peername" else None

    def abort(self) -> None:
        self.aborted = True


def _limit(per_client: int) -> ConnectionLimit:
    server = cast(web.Server, None)  # no connection is made through it here
    return ConnectionLimit(server, 100, logging.getLogger("test"), per_client=per_client)


def _open(
    limit: ConnectionLimit, peer: str, *, waiting: int = 0, seen: float = 0.0, idle: bool = False
) -> _Counted:
    """A connection of `peer` let in: `waiting` answer bytes for its client (looked at when
    `seen`: watched from then), or `idle` (aiohttp waits for its next request)."""
    handler = _Handler()
    counted = _Counted(cast(web.RequestHandler, handler), limit)
    transport = _Transport(peer)
    counted.transport, counted.peer = cast(Any, transport), peer
    limit.all.open[counted] = None
    assert limit.arrived(counted)
    counted.admitted = True
    if idle:
        handler._waiter = _Waiter()
    transport.waiting = waiting
    if waiting:
        limit.look(counted, seen)
    return counted


def _arrival(limit: ConnectionLimit, peer: str, now: float) -> _Counted | None:
    """Whose place a new connection of `peer` would take at its share, `now`."""
    return limit.by_peer[peer].victim(now)


def test_the_connection_stuck_longest_makes_room_not_one_within_the_grace() -> None:
    limit = _limit(per_client=3)
    first = _open(limit, "127.0.0.1", waiting=50_000)
    second = _open(limit, "127.0.0.1", waiting=50_000, seen=0.3)
    _open(limit, "127.0.0.1", idle=True)
    assert _arrival(limit, "127.0.0.1", STUCK_GRACE) is None  # none past the grace yet
    assert _arrival(limit, "127.0.0.1", STUCK_GRACE + 0.1) is first
    first.close()
    assert cast(_Transport, first.transport).aborted
    assert _arrival(limit, "127.0.0.1", STUCK_GRACE + 0.1) is None
    assert _arrival(limit, "127.0.0.1", STUCK_GRACE + 0.4) is second


def test_a_client_that_takes_some_of_its_answer_is_not_stuck() -> None:
    limit = _limit(per_client=2)
    reader = _open(limit, "127.0.0.1", waiting=50_000)
    cast(_Transport, reader.transport).waiting = 49_000  # it read a little: room was made
    assert _arrival(limit, "127.0.0.1", 5.0) is None
    assert reader.stuck_since == 5.0  # its clock restarted when it was seen to have read
    assert _arrival(limit, "127.0.0.1", 5.0 + STUCK_GRACE + 0.1) is reader  # then nothing


def test_an_idle_client_keeps_its_place_while_a_stuck_one_may_come() -> None:
    limit = _limit(per_client=3)
    idle = _open(limit, "127.0.0.1", idle=True)
    reader = _open(limit, "127.0.0.1", waiting=50_000)
    quiet = _open(limit, "127.0.0.1", waiting=50_000)
    cast(_Transport, reader.transport).waiting = 40_000  # it reads: no stuck one to come
    # the quiet one's client has taken nothing for longer than a look's interval: the new
    # connection is refused, the idle one kept
    assert _arrival(limit, "127.0.0.1", SWEEP_EVERY + 0.01) is None
    assert _arrival(limit, "127.0.0.1", STUCK_GRACE + 0.01) is quiet
    quiet.close()
    cast(_Transport, reader.transport).waiting = 30_000  # still reading
    assert _arrival(limit, "127.0.0.1", STUCK_GRACE + 0.01) is idle  # none may be stuck soon


def test_an_idle_connection_whose_answer_is_on_its_way_is_not_idle() -> None:
    limit = _limit(per_client=1)
    answering = _open(limit, "127.0.0.1", idle=True)
    cast(_Transport, answering.transport).waiting = 30_000  # aiohttp wrote its last answer
    assert _arrival(limit, "127.0.0.1", 0.0) is None
    assert answering.stuck_since == 0.0  # and now it is watched


def test_at_its_share_an_address_makes_room_among_its_own_only() -> None:
    limit = _limit(per_client=1)
    theirs = _open(limit, "127.0.0.2", waiting=50_000)
    mine = _open(limit, "127.0.0.1", waiting=50_000, seen=1.0)
    assert _arrival(limit, "127.0.0.1", 10.0) is mine
    assert limit.all.victim(10.0) is theirs  # at the bound: the one stuck longest, any address


def test_a_sweep_finds_answers_waiting_and_looks_again_at_the_newly_watched_only() -> None:
    limit = _limit(per_client=3)
    old = _open(limit, "127.0.0.1", waiting=50_000)  # watched since 0.0
    young = _open(limit, "127.0.0.1", waiting=50_000, seen=0.4)
    busy = _open(limit, "127.0.0.1")  # a request in hand, nothing written yet
    for counted in (old, young):
        cast(_Transport, counted.transport).waiting -= 1_000  # both clients took some
    cast(_Transport, busy.transport).waiting = 20_000
    limit.sweep(0.6)
    assert busy.stuck_since == 0.6  # found waiting: watched from now
    assert young.stuck_since == 0.6  # what it took counts now: its clock restarted
    assert old.stuck_since == 0.0  # left for when its clock matters
    assert _arrival(limit, "127.0.0.1", 0.6) is None
    assert old.stuck_since == 0.6  # then seen to have read
