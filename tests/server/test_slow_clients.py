"""Clients that ask and never read against the daemon's connection bound (issue 55, item 1;
issue 65). Before issue 55, a connection with a request in hand was never evicted and an
answer had no write deadline, so enough of them locked everyone out; before issue 65, the
share per address kept them from locking out only the clients of other addresses, and every
local client of a daemon shares 127.0.0.1 (as every client behind a reverse proxy shares
its address). Here the slow readers and the clients they must not lock out come from one
address; a client that reads, however slowly, is not taken for one of them. The latency and
memory figures are `python -m bench slow`'s."""

from __future__ import annotations

import http.client
import threading
from pathlib import Path

import httpx
import pytest

from devnet.atwhois import Daemon, running_daemon
from devnet.network import DevnetState
from devnet.slow_readers import ReadingSlowly, SlowReaders
from tests.support.waiting import until

RESOLVE = "/xrpc/com.atproto.identity.resolveHandle?handle=alice.test"
# 100 sockets: 68 admitted (two accept batches of 16 held back), 17 of them per address;
# 25 slow readers hold an address's share, and those past it come back as it closes theirs
BOUND = ("--cache", "memory:", "--max-connections", "100")
READERS = 25


def _connection_counts(daemon: Daemon) -> dict[str, int]:
    """What the daemon logged about its connection bound, summed."""
    counts: dict[str, int] = {}
    for line in daemon.log_lines():
        if line.get("event") == "connection_limit":
            for what in ("evicted", "refused", "stuck", "over_share"):
                counts[what] = counts.get(what, 0) + int(line.get(what, 0))  # type: ignore[call-overload]
    return counts


def _closed(daemon: Daemon) -> dict[str, int]:
    """The connections the daemon closed by why, as its /_health says now, asked from
    127.0.0.2: an onlooker, not one of the clients under test (nothing, when this very
    question came at the bound with no connection to take the place of)."""
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    try:
        with httpx.Client(transport=transport, timeout=10) as client:
            health = client.get(daemon.url + "/_health").json()
    except httpx.TransportError:
        return {}
    return dict(health["connections"]["closed"])


def _turned_away(daemon: Daemon) -> int:
    """The connections closed for new ones, and the new ones refused over their share."""
    closed = _closed(daemon)
    return closed.get("evicted", 0) + closed.get("over_share", 0)


def _places_taken(daemon: Daemon) -> None:
    """Until the daemon has closed one more connection for a new one."""
    evicted = _closed(daemon).get("evicted", 0)
    until(lambda: _closed(daemon).get("evicted", 0) > evicted, 30)


def _connection(daemon: Daemon) -> http.client.HTTPConnection:
    """One connection from 127.0.0.1, the slow readers' address, kept as it is: a request
    on it after the daemon closed it fails (httpx would open another)."""
    host, port = daemon.url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=10, source_address=(host, 0))


def _ask(conn: http.client.HTTPConnection, path: str) -> int:
    conn.request("GET", path)
    answer = conn.getresponse()
    answer.read()
    return answer.status


@pytest.mark.alone
def test_a_client_of_the_slow_readers_address_gets_in_and_keeps_its_place(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """The slow readers hold 127.0.0.1's share and keep coming back as their stuck
    connections are closed. A client of 127.0.0.1 is answered every time, each time on a
    new connection (which takes the place of a stuck one: before issue 65 it was refused
    until the write timeout, 30 s here) and on one it keeps (idle between two questions
    while the slow readers' new connections take places: it is not one of the places
    taken)."""
    args = (*BOUND, "--write-timeout", "30")
    with (
        running_daemon(devnet.env(), tmp_path / "serve.log", *args) as daemon,
        SlowReaders(daemon.url, READERS),
    ):
        # the share full, and the readers past it turned away and back, time and again
        until(lambda: _turned_away(daemon) > READERS, 30)
        kept = _connection(daemon)
        try:
            for _ in range(10):
                fresh = _connection(daemon)
                try:
                    assert _ask(fresh, "/_health") in (200, 503)
                finally:
                    fresh.close()
                assert _ask(kept, RESOLVE) == 200
                _places_taken(daemon)  # meanwhile, its connection idle
        finally:
            kept.close()
    assert _connection_counts(daemon).get("evicted", 0) > 0


@pytest.mark.alone
def test_a_client_reading_slowly_is_not_taken_for_a_slow_reader(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """A client of 127.0.0.1 asks 500 times at once and reads the answers (150 KB) at 16 KiB
    a second: the daemon waits on it for seconds at a time, over and over, while the slow
    readers fill 127.0.0.1's share around it and their stuck connections are closed (evicted
    for new ones, or past the write timeout: 1 s here). It gets every answer: it reads, so
    it is neither evicted nor closed as stuck (before issue 65, a connection whose writes
    had stayed paused for the write timeout was closed, reading or not)."""
    args = (*BOUND, "--write-timeout", "1")
    with running_daemon(devnet.env(), tmp_path / "serve.log", *args) as daemon:
        reader = ReadingSlowly(daemon.url, 500, 16 * 1024)
        answers: list[int] = []
        reading = threading.Thread(target=lambda: answers.append(reader.run()))
        reading.start()  # first: its place is its own before the share is full
        with SlowReaders(daemon.url, READERS):
            reading.join()
            closed = _closed(daemon)
    assert answers == [500]
    assert closed.get("evicted", 0) + closed.get("stuck", 0) > 0, closed


# the other client asks from 127.0.0.2: not the slow readers' address
def _answered_throughout(daemon: Daemon, rounds: int) -> None:
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=daemon.url, transport=transport, timeout=10) as client:
        for _ in range(rounds):
            assert client.get("/_health").status_code in (200, 503)
            resolved = client.get(RESOLVE)
            assert resolved.status_code == 200, resolved.text


@pytest.mark.alone
def test_readers_that_never_read_hold_only_their_share(devnet: DevnetState, tmp_path: Path) -> None:
    """Twice the bound of slow readers from one address: it holds a quarter of the bound,
    its extra connections take the place of its own stuck ones; another address is
    answered throughout."""
    args = (*BOUND, "--write-timeout", "30")
    with running_daemon(devnet.env(), tmp_path / "serve.log", *args) as daemon:
        listening = next(x for x in daemon.log_lines() if x.get("event") == "listening")
        share = int(listening["connections_per_client"])  # type: ignore[call-overload]
        with SlowReaders(daemon.url, 200):
            until(lambda: _connection_counts(daemon).get("evicted", 0) > 0, 20)
            _answered_throughout(daemon, 20)
        assert share == int(listening["connections_admitted"]) // 4  # type: ignore[call-overload]
    assert _connection_counts(daemon).get("evicted", 0) > 0


@pytest.mark.alone
def test_stuck_writers_are_closed_past_the_write_timeout_and_evicted_at_the_bound(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """With no share per address (as behind a proxy): slow readers under the bound are
    closed once their client has taken nothing for the write timeout (2 s here; counted as
    stuck); slow readers over the bound, who keep opening more, have their stuck connections
    replaced by new ones well before (counted as evicted)."""
    args = (  # 50 sockets: 18 admitted (two accept batches of 16 are held back)
        "--cache", "memory:", "--max-connections", "50",
        "--max-connections-per-client", "50", "--write-timeout", "2",
    )  # fmt: skip
    with running_daemon(devnet.env(), tmp_path / "serve.log", *args) as daemon:
        with SlowReaders(daemon.url, 10) as readers:
            until(lambda: _closed(daemon).get("stuck", 0) > 0, 30)
            # closed with a reset, they learn it (a plain close waits behind the answers they
            # never read, and the socket lingers in the kernel with its buffers) and come back
            until(lambda: readers.closed > 0, 30)
        assert _closed(daemon).get("evicted", 0) == 0  # under the bound, none replaced
        with SlowReaders(daemon.url, 60):
            until(lambda: _closed(daemon).get("evicted", 0) > 0, 30)
    counts = _connection_counts(daemon)  # the log says it too, the last interval at the stop
    assert counts.get("evicted", 0) > 0 and counts.get("stuck", 0) > 0, counts
