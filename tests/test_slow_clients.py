"""Clients that ask and never read against the daemon's connection bound (issue 55, item 1):
before, a connection with a request in hand was never evicted and an answer had no write
deadline, so enough of them locked everyone out. Here twice the bound of them come from one
address, which holds its share only, and another client (another address) is answered
throughout. With no share per address (as behind a proxy), new connections take the place of
the ones stuck longest, and those stuck past the write timeout are closed anyway. The latency
and memory figures are `python -m bench slow`'s."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from devnet.atwhois import Daemon, running_daemon
from devnet.network import DevnetState
from devnet.slow_readers import SlowReaders
from tests.support.waiting import until


def _connection_counts(daemon: Daemon) -> dict[str, int]:
    """What the daemon logged about its connection bound, summed."""
    counts: dict[str, int] = {}
    for line in daemon.log_lines():
        if line.get("event") == "connection_limit":
            for what in ("evicted", "refused", "stuck", "over_share"):
                counts[what] = counts.get(what, 0) + int(line.get(what, 0))  # type: ignore[call-overload]
    return counts


# the other client asks from 127.0.0.2: not the slow readers' address
def _answered_throughout(daemon: Daemon, rounds: int) -> None:
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=daemon.url, transport=transport, timeout=10) as client:
        for _ in range(rounds):
            assert client.get("/_health").status_code in (200, 503)
            resolved = client.get(
                "/xrpc/com.atproto.identity.resolveHandle", params={"handle": "alice.test"}
            )
            assert resolved.status_code == 200, resolved.text


@pytest.mark.alone
def test_readers_that_never_read_hold_only_their_share(devnet: DevnetState, tmp_path: Path) -> None:
    """Twice the bound of slow readers from one address: it holds a quarter of the bound,
    its extra connections take the place of its own stuck ones; another address is
    answered throughout."""
    args = ("--cache", "memory:", "--max-connections", "100", "--write-timeout", "30")
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
    closed once their answers have waited for the write timeout (2 s here; counted as
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


def _closed(daemon: Daemon) -> dict[str, int]:
    """The connections the daemon closed by why, as its /_health says now (nothing, when
    this very question came at the bound with no connection to take the place of)."""
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    try:
        with httpx.Client(transport=transport, timeout=10) as client:
            health = client.get(daemon.url + "/_health").json()
    except httpx.TransportError:
        return {}
    return dict(health["connections"]["closed"])
