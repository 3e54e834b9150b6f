"""The pace shared by a daemon's processes (POL-PACE-2, issue 69): paces over one set of
`SharedBuckets` keep together to each host's rate and each kind's share, and a host one of
them parks is parked for all; across processes too (the re-verifying workers, the serving
processes of `--workers`). A fleet's daemons split the rate (`fleet_daemons`)."""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.sharedctypes import Synchronized
from typing import Any

import pytest

from atwhois.foundation.pace import REVERIFY, HostPace, SharedBuckets, charged_to
from atwhois.resolver import Config
from atwhois.resolver.fetch import shared_pace

RATE = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def paces(buckets: SharedBuckets | None, clock: Clock, count: int = 2) -> list[HostPace]:
    return [
        HostPace(
            lambda host: RATE,
            max_park=300,
            shares={REVERIFY: 0.5},
            patient=frozenset({REVERIFY}),
            clock=clock,
            shared=buckets,
        )
        for _ in range(count)
    ]


def turns(pace: HostPace, seconds: float, clock: Clock, step: float = 0.01) -> int:
    taken, end = 0, clock.now + seconds
    while clock.now < end:
        taken += pace.admit("plc.example") == 0.0
        clock.now += step
    return taken


def test_paces_over_shared_buckets_keep_to_one_rate_together() -> None:
    clock = Clock()
    first, second = paces(SharedBuckets(), clock)
    together = 0
    for _ in range(100):  # 10 s, the two asking in turn
        together += turns(first, 0.05, clock) + turns(second, 0.05, clock)
    assert 100 <= together <= 100 + 2  # the rate's 10 s and one burst, not twice that
    apart_clock = Clock()
    alone = [turns(p, 10, apart_clock) for p in paces(None, apart_clock)]
    assert alone[0] > 100  # each process its own pace: what the shared buckets prevent


def test_a_host_parked_by_one_is_parked_for_all_and_the_shares_are_shared() -> None:
    clock = Clock()
    first, second = paces(SharedBuckets(), clock)
    first.park("plc.example", 60)
    assert second.admit("plc.example") is None and second.parked_for("plc.example") == 60
    assert second.parked() == {"plc.example": 60}
    clock.now += 61
    with charged_to(REVERIFY):  # the share: half the rate, for both together
        taken = 0
        for _ in range(1000):  # 10 s
            taken += first.admit("other.example") == 0.0
            taken += second.admit("other.example") == 0.0
            clock.now += 0.01
    assert 50 <= taken <= 50 + 2


def test_a_fleet_splits_the_rates() -> None:
    config = Config(plc_url="https://plc.example", fleet_daemons=3, plc_rate=300, host_rate=30)
    pace = shared_pace(config)
    assert pace.rate_of("plc.example") == 100 and pace.rate_of("web.example") == 10


def _hammer(buckets: SharedBuckets, ready: Any, seconds: float, taken: Synchronized[int]) -> None:
    pace = HostPace(lambda host: RATE, max_park=300, shared=buckets)
    ready.wait()  # all at once, once every child has started
    end = time.monotonic() + seconds
    count = 0
    while time.monotonic() < end:
        count += pace.admit("plc.example") == 0.0
        time.sleep(0.001)
    with taken.get_lock():
        taken.value += count


@pytest.mark.alone
def test_processes_sharing_the_buckets_keep_to_one_rate() -> None:
    spawn = multiprocessing.get_context("spawn")
    buckets, taken, ready = SharedBuckets(), spawn.Value("i", 0), spawn.Barrier(3)
    seconds = 1.5  # three times the rate would be 45, the bound is 17
    args = (buckets, ready, seconds, taken)
    children = [spawn.Process(target=_hammer, args=args) for _ in range(3)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
    # three processes asking all the time: the rate over their run and one burst, not three
    # times it
    assert RATE * seconds * 0.8 <= taken.value <= RATE * seconds + 2
