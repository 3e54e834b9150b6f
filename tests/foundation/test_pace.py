"""The pace of requests per host (`foundation.pace`), over a clock the test moves: a burst,
then one turn every 1/rate seconds; a host's Retry-After parks it, for the cap at most,
and a probe ends the park (POL-PARK-1); a kind of work keeps to its share (POL-BUDGET-1);
idle hosts are forgotten, so memory follows the hosts asked lately, not every host ever
asked. And what the pace reads: `Retry-After` (POL-RA-1), a URL's host (POL-PACE-1)."""

from __future__ import annotations

import email.utils

import pytest

from atwhois.foundation import pace as pace_module
from atwhois.foundation.pace import REVERIFY, SERVICE_AUTH, HostPace, charged_to
from atwhois.resolver.fetch import host_of
from atwhois.resolver.untrusted import retry_after

CAP = 300.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_one_turn_every_1_over_rate_seconds() -> None:
    clock = Clock()
    pace = HostPace(lambda _: 100.0, max_park=CAP, burst_seconds=0.1, clock=clock)
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
    assert pace.counts["plc.example"] == {
        "requests": 21,
        "background": 0,
        "throttled": 3,
        "parked": 0,
        "over_budget": 0,
    }


def test_a_parked_host_gets_no_turn_until_its_pause_ends() -> None:
    clock = Clock()
    pace = HostPace(lambda _: 10.0, max_park=CAP, clock=clock, kind_of=lambda host: "web")
    pace.park("a.example", 3)
    assert pace.admit("a.example") is None and pace.parked_for("a.example") == 3
    assert "wait 3.0 s more (Retry-After)" in pace.refusal("a.example")
    clock.now += 2.9
    assert pace.admit("a.example") is None and pace.parked_for("a.example") == pytest.approx(0.1)
    assert pace.admit("b.example") == 0.0  # other hosts are not parked
    assert pace.parked() == {"a.example": pytest.approx(0.1)}
    clock.now += 0.1
    assert pace.admit("a.example") == 0.0 and pace.parked_for("a.example") == 0
    assert pace.parked() == {}
    assert pace.counts["web"] == {
        "requests": 2,
        "background": 0,
        "throttled": 0,
        "parked": 2,
        "over_budget": 0,
    }


def test_a_pause_lasts_the_cap_at_most_then_one_probe_asks_whether_it_is_over() -> None:
    """POL-PARK-1: an hour asked is the cap (here 300 s); then one request goes, the others
    wait for its answer, refused as parked; a 429 to the probe parks the host again (as
    long as the last pause when it says none), an answer ends the park."""
    clock = Clock()
    pace = HostPace(lambda _: 10.0, max_park=CAP, burst_seconds=1.0, clock=clock)
    pace.answered("plc.example", refused=True, pause=3600)
    assert pace.parked_for("plc.example") == CAP
    clock.now += CAP
    assert pace.admit("plc.example") == 0.0  # the probe
    assert pace.admit("plc.example") is None and pace.admit("plc.example") is None
    assert "one request asks whether it is over" in pace.refusal("plc.example")
    assert pace.parked() == {}  # the pause is over: only its probe is awaited
    pace.answered("plc.example", refused=True)  # a 429 with no Retry-After it can read
    assert pace.parked_for("plc.example") == CAP  # again, as long as the last pause
    clock.now += CAP
    assert pace.admit("plc.example") == 0.0  # the next probe
    pace.unanswered("plc.example")  # no answer (a deadline): the next request probes
    assert pace.admit("plc.example") == 0.0
    pace.answered("plc.example", refused=False)  # answered: the park is over
    assert [pace.admit("plc.example") for _ in range(2)] == [0.0, 0.0]  # all may go
    assert pace.counts["plc.example"]["parked"] == 2
    # answers to requests sent before a pause neither end it nor park the host again
    pace.park("plc.example", 5)
    pace.answered("plc.example", refused=False)
    pace.answered("plc.example", refused=True)
    assert pace.parked_for("plc.example") == 5


def test_a_kind_of_work_keeps_to_its_share_and_is_refused_at_once_past_it() -> None:
    """POL-BUDGET-1: the work charged to service-auth tokens takes a tenth of the host's
    rate, from a bucket of its own besides the host's; past it, or while the host has no
    turn, it is refused (never told to wait); the lookups keep the rest."""
    clock = Clock()
    pace = HostPace(lambda _: 100.0, max_park=CAP, shares={SERVICE_AUTH: 0.1}, clock=clock)
    with charged_to(SERVICE_AUTH):
        assert pace.admit("plc.example") == 0.0  # its burst: one request
        assert pace.admit("plc.example") is None
        assert "for service_auth is spent" in pace.refusal("plc.example")
    assert [pace.admit("plc.example") for _ in range(9)] == [0.0] * 9  # the lookups' turns
    clock.now += 0.1  # a tenth of a second: the token's bucket has one turn again...
    assert [pace.admit("plc.example") for _ in range(10)] == [0.0] * 10
    with charged_to(SERVICE_AUTH):
        assert pace.admit("plc.example") is None  # ...but the host has none: refused
        clock.now += 0.01
        assert pace.admit("plc.example") == 0.0
    assert pace.admit("plc.example") == pytest.approx(0.01)  # a lookup waits its turn
    assert pace.counts["plc.example"]["over_budget"] == 2
    assert pace.counts["plc.example"]["requests"] == 21


def test_a_patient_kind_of_work_waits_for_its_share_and_lookups_keep_the_rest() -> None:
    """F-CUR-6: at 100 requests/s and a share of 0.25, the pass after a stream's gap that
    asks every millisecond goes at 25/s (and its own small burst), waiting for its share,
    never refused; lookups at 62.5/s beside it never wait; lookups that take the whole rate
    leave it nothing, and it waits for the host's turn and its own."""
    clock = Clock()
    pace = HostPace(
        lambda _: 100.0,
        max_park=CAP,
        shares={REVERIFY: 0.25},
        patient=frozenset({REVERIFY}),
        burst_seconds=0.1,
        clock=clock,
    )
    background = lookups = 0
    for ms in range(2000):
        with charged_to(REVERIFY):
            turn = pace.admit("plc.example")
        assert turn is not None  # waits, never refused
        background += turn == 0.0
        if ms % 16 == 0:
            assert pace.admit("plc.example") == 0.0  # never kept waiting by the pass
            lookups += 1
        clock.now += 0.001
    assert 50 <= background <= 50 + 3
    assert pace.counts["plc.example"] == {
        "requests": background + lookups,
        "background": background,
        "throttled": 0,
        "parked": 0,
        "over_budget": 0,
    }
    for _ in range(20):  # lookups take every turn there is
        pace.admit("plc.example")
    with charged_to(REVERIFY):
        assert (pace.admit("plc.example") or 0.0) > 0
        clock.now += 60  # idle: both buckets full again
        assert [pace.admit("plc.example") for _ in range(2)] == [0.0, 0.0]
        assert (pace.admit("plc.example") or 0.0) == pytest.approx(0.02)  # its burst is 2.5


def test_idle_hosts_are_forgotten_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pace_module, "MAX_BUCKETS", 100)
    clock = Clock()
    pace = HostPace(lambda _: 1.0, max_park=CAP, burst_seconds=1.0, clock=clock)
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


def test_the_directory_is_one_host_whatever_its_url_says() -> None:
    """POL-PACE-1: case, the scheme's own port and the path are not part of the host."""
    hosts = {
        host_of(url)
        for url in (
            "https://plc.directory",
            "https://PLC.Directory:443/",
            "https://user@plc.directory/did:plc:abc",
            "HTTPS://plc.directory:443",
        )
    }
    assert hosts == {"plc.directory"}
    assert host_of("http://127.0.0.1:8080/x") == "127.0.0.1:8080"
    assert host_of("http://127.0.0.1:80/") == "127.0.0.1"
    assert host_of("https://plc.directory:80") == "plc.directory:80"
    assert host_of("https://[::1]:443/") == "[::1]" and host_of("http://[::1]:9/") == "[::1]:9"
    assert host_of("https://plc.directory:99999/") == "plc.directory:99999"  # not a port
