"""A fleet's cold start with no storm (issue 69, F-CUR-6, POL-PACE-1): three daemons
restarted on one warm shared store, each told by its relay that it may have missed events
(a gap: each owes a pass over everything held), re-verify each held identity once in the
fleet, not once each, and together never ask the PLC directory past its rate, which the
fleet splits (`fleet_daemons`). The first answer after the restart is the store's."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from bench.cold_start import (
    Served,
    busiest_second,
    counting_directory,
    fleet,
    gap_pass,
    outdated_relay,
    passes_done,
)
from devnet.atwhois import running_daemon
from devnet.network import DevnetState

pytestmark = pytest.mark.alone  # the directory's rate is measured in time
NAMES = ("alice", "ivan", "judy", "kate", "leo", "nina", "olivia", "wendy", "xavier", "yvonne")
RATE = 4.0  # requests/s the directory allows the fleet
DAEMONS = 3


def test_a_fleet_restarted_on_a_warm_store_re_verifies_each_identity_once_at_the_rate(
    devnet: DevnetState, tmp_path: Path
) -> None:
    proxy, asked = counting_directory(devnet.plc_url)
    with Served(proxy) as directory, Served(outdated_relay()) as relay:
        env = {**devnet.env(), "ATWHOIS_PLC_URL": directory.url}
        cache = f"sqlite://{tmp_path}/c.db"
        dids = [devnet.did(name) for name in NAMES]
        with running_daemon(env, tmp_path / "fill.log", "--cache", cache) as daemon:
            for did in dids:
                answer = httpx.get(f"{daemon.url}/v1/identity/{did}", timeout=30).json()
                assert answer["did"] == did
        before = len(asked)
        settings = ("--fleet-daemons", str(DAEMONS), "--plc-rate", str(RATE))
        settings += ("--reverify-share", "1")
        ws = relay.url.replace("http", "ws")
        with fleet(env, tmp_path, DAEMONS, cache, ws, *settings) as daemons:
            # answered from the store at once (the pass has not reached it, or has)
            first = httpx.get(f"{daemons[0].url}/v1/identity/{dids[0]}", timeout=30).json()
            assert first["did"] == dids[0] and first["cache"]["cached"]
            deadline = time.monotonic() + 120
            while not (finished := all(map(passes_done, daemons))):
                assert time.monotonic() < deadline, [gap_pass(d) for d in daemons]
                time.sleep(0.5)
            shares = [gap_pass(d) for d in daemons]
        requests = asked[before:]
    assert finished  # every daemon's pass ran to its end
    assert sum(s["done"] for s in shares) == len(dids)  # once in the fleet
    assert sum(s["done"] + s["left_to_others"] for s in shares) == DAEMONS * len(dids)
    per_did = Counter(path.lstrip("/") for _, path in requests)
    assert per_did == Counter(dids)  # each held identity's document asked once
    # Each daemon keeps to RATE / DAEMONS, with a burst of one request: in any second the
    # directory is asked at most its rate and the daemons' bursts.
    assert busiest_second([at for at, _ in requests]) <= RATE + DAEMONS
    spent = requests[-1][0] - requests[0][0]
    assert len(requests) <= RATE * spent + DAEMONS
