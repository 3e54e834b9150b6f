"""The pace of requests per host (`foundation.pace`), over a clock the test moves: a burst,
then one turn every 1/rate seconds; a host's Retry-After parks it; idle hosts are
forgotten, so memory follows the hosts asked lately, not every host ever asked. And what
the pace is told: `Retry-After` (POL-RA-1)."""

from __future__ import annotations

import email.utils

import pytest

from atwhois.foundation import pace as pace_module
from atwhois.foundation.pace import HostPace
from atwhois.resolver.untrusted import retry_after

CAP = 300.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_one_turn_every_1_over_rate_seconds() -> None:
    clock = Clock()
    pace = HostPace(lambda _: 100.0, burst_seconds=0.1, clock=clock)
    assert [pace.admit("plc.example") for _ in range(10)] == [0.0] * 10  # the burst
    assert pace.admit("plc.example") == pytest.approx(0.01)  # nothing taken: a turn is free
    assert pace.admit("plc.example", again=True) == pytest.approx(0.01)  # in 0.01 s
    clock.now += 0.004
    assert pace.admit("plc.example", again=True) == pytest.approx(0.006)
    clock.now += 0.006
    assert pace.admit("plc.example", again=True) == 0.0  # taken when it goes
    assert pace.admit("plc.example") == pytest.approx(0.01)
    clock.now += 5.0  # a late waker finds the bucket full, not fuller: a burst at most
    assert [pace.admit("plc.example") for _ in range(10)] == [0.0] * 10
    assert pace.admit("plc.example") > 0
    assert pace.admit("other.example") == 0.0  # every host has its own
    assert pace.counts["plc.example"] == {"requests": 21, "throttled": 3, "parked": 0}


def test_a_parked_host_gets_no_turn_until_its_pause_ends() -> None:
    clock = Clock()
    pace = HostPace(lambda _: 10.0, clock=clock, kind_of=lambda host: "web")
    pace.park("a.example", 3)
    assert pace.admit("a.example") is None and pace.parked_for("a.example") == 3
    clock.now += 2.9
    assert pace.admit("a.example") is None and pace.parked_for("a.example") == pytest.approx(0.1)
    assert pace.admit("b.example") == 0.0  # other hosts are not parked
    clock.now += 0.1
    assert pace.admit("a.example") == 0.0 and pace.parked_for("a.example") == 0
    pace.park("a.example", 10**9)  # a pause past the bound is the bound
    assert pace.parked_for("a.example") == pace_module.MAX_PARK
    assert pace.counts["web"] == {"requests": 2, "throttled": 0, "parked": 2}


def test_idle_hosts_are_forgotten_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pace_module, "MAX_BUCKETS", 100)
    clock = Clock()
    pace = HostPace(lambda _: 1.0, burst_seconds=1.0, clock=clock)
    for n in range(100):
        pace.admit(f"h{n}.example")
    pace.park("h0.example", 60)
    clock.now += 5  # all refilled; h0 still parked
    pace.admit("new.example")
    assert len(pace._buckets) == 2 and pace.parked_for("h0.example") == pytest.approx(55)


def test_retry_after_reads_seconds_and_dates_bounded_to_the_cap() -> None:
    """POL-RA-1."""
    read = lambda text: retry_after(text, cap=CAP, now=1_000_000)  # noqa: E731
    assert read("3") == 3.0 and read(" 120 ") == 120.0 and read("3600") == CAP
    assert read(email.utils.formatdate(1_000_060, usegmt=True)) == pytest.approx(60)
    assert read(email.utils.formatdate(1_000_000 - 100, usegmt=True)) == 0.0  # past: none
    assert read("Fri, 31 Dec 9999 23:59:59 GMT") == CAP
    assert read("9" * 5000) == CAP  # past what int() reads: over any cap all the same


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "soon",
        "-1",
        "3.5",
        "1 2",
        "²",  # a digit to str.isdigit(), not to float()
        "٣",  # an Arabic-Indic three
        "Mon, 01 Jan 99999999999 00:00:00 GMT",  # a year that overflows
        "Mon, 32 Jan 2020 00:00:00 GMT",
        "Mon, 01 Jan 2020 24:61:61 GMT",
    ],
)
def test_a_retry_after_that_is_not_one_is_none_never_an_exception(text: str | None) -> None:
    """POL-RA-1: read as no Retry-After at all."""
    assert retry_after(text, cap=CAP) is None
