"""Model-based test of what a cached answer means (issue: the cache must never say
"verified" for a binding that no longer holds).

Hypothesis draws sequences of steps: the world changes (DNS TXT records through zone
reloads, well-known files, did:plc documents through signed operations, a did:web
document), upstreams fail (DNS SERVFAIL, HTTPS 503/reset/HTML/hang, the PLC directory in
every way `PlcStandIn` knows, Redis stopped), the fake clock jumps, and two daemons sharing
one store (Redis or a SQLite file) are asked through their XRPC API, or told to refresh.
After every step:

(a) an answer with a fresh Cache-Control (max-age > 0) that binds a handle and a DID (or
    says what a DID's document declares) was true in the world within its fresh window;
(b) during a total outage (DNS, HTTPS and the PLC directory all failing), every answer is
    the one given when the outage began, while that answer's maximum age lasts; a good
    copy is never replaced by absence or by another answer, and never claims more
    freshness than it had; refreshes fail with the upstream error and change nothing;
(c) what one daemon serves after a completed refresh, the other serves as soon as the
    store's notices of it have arrived (a fence written after them has been heard);
(d) each daemon's memory tier and answer cache stay within their byte bounds, and the
    process's RSS within those bounds plus a fixed allowance.

`make test` runs a short, fixed sequence for each store; `make soak` runs a long random
one (ATWHOIS_SOAK_STEPS, at least 20,000 steps) and prints what it ran.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from devnet.forwarder import PlcStandIn
from devnet.network import DevnetState
from devnet.redis_server import RedisServer
from tests.support.cache_model import (
    ANSWER_BYTES,
    TIER_BYTES,
    TOKEN,
    LoopThread,
    ModelWorld,
    claims_of,
    falsified,
    servable_for,
    stop_daemons,
    two_daemons,
    wait_idle,
)
from tests.support.clock import Clock
from tests.support.http import XRPC, max_age

SOAK_STEPS = int(os.environ.get("ATWHOIS_SOAK_STEPS", "0"))
STEPS_PER_EXAMPLE = 40
# A sequence runs about 35 of its at most 40 steps: ask for enough to reach SOAK_STEPS.
EXAMPLES = max(1, SOAK_STEPS // 30) if SOAK_STEPS else 6
RSS_ALLOWANCE = 80 * 1024 * 1024

PLC_FAULTS = [None, "status:403", "status:500", "html", "truncated", "cut", "reset", "hang", "down"]
METHODS = ["resolveHandle", "resolveIdentity:handle", "resolveIdentity:did", "resolveDid"]


@dataclass
class Environment:
    devnet: DevnetState
    loop: LoopThread
    stand_in: PlcStandIn
    redis: RedisServer | None
    tmp: Path
    rss_start: int
    steps: int = 0
    examples: int = 0
    answers: int = 0
    fresh_claims: int = 0
    outages: int = 0
    refreshes_compared: int = 0
    statuses: Counter[int] = field(default_factory=Counter)


@dataclass(frozen=True)
class Seen:
    status: int
    body: Any
    fresh_end: float  # the moment its freshness ends
    servable_end: float  # the moment its maximum age ends


def _rss() -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]


class CacheModel(RuleBasedStateMachine):
    env: ClassVar[Environment]

    def __init__(self) -> None:
        super().__init__()
        env = self.env
        env.examples += 1
        self.clock = Clock()
        env.stand_in.set_fault(None)
        where = env.redis.url if env.redis else str(env.tmp / f"{uuid.uuid4().hex}.db")
        self.world = ModelWorld(env.devnet, env.stand_in, self.clock)
        self.shared = two_daemons(
            env.loop,
            env.devnet,
            env.stand_in,
            self.clock,
            "redis" if env.redis is not None else "sqlite",
            where,
        )
        self.daemons = self.shared.daemons
        self.http = httpx.Client(timeout=30)
        self.outage: dict[tuple[int, str, str], Seen] | None = None
        self.store_lost = False  # Redis went away during the outage: memory is all there is
        self.redis_down = False
        self.outages = 0
        self.rss_start = _rss()  # this sequence's daemons, started: what they may add to it

    def teardown(self) -> None:
        self.world.clear_faults()
        if self.env.redis is not None and self.redis_down:
            self.env.redis.start()
        stop_daemons(self.env.loop, self.daemons)
        self.env.loop.run(self.shared.writer.close())
        self.http.close()

    # --- asking the daemons -----------------------------------------------------------

    def _drain(self) -> None:
        self.env.loop.run(wait_idle(self.daemons))

    def _ask(self, daemon: int, method: str, identifier: str) -> httpx.Response:
        name = method.split(":")[0]
        param = {"resolveHandle": "handle", "resolveDid": "did"}.get(name, "identifier")
        response = self.http.get(self.daemons[daemon].url + XRPC + name, params={param: identifier})
        self._drain()
        self.env.answers += 1
        self.env.statuses[response.status_code] += 1
        assert response.status_code in (200, 400, 404, 502), (response.status_code, response.text)
        if response.status_code != 200:
            assert "error" in response.json(), response.text
        return response

    def _targets(self, method: str) -> list[str]:
        by_handle = method in ("resolveHandle", "resolveIdentity:handle")
        return self.world.all_handles if by_handle else self.world.all_dids

    def _check_claims(self, method: str, identifier: str, response: httpx.Response) -> None:
        for claim in claims_of(method.split(":")[0], identifier, response, self.clock()):
            self.env.fresh_claims += 1
            why = falsified(claim, self.world.timeline)
            assert why is None, f"(a) {method}({identifier}) claimed {claim}: {why}"

    def _check_outage(self, daemon: int, method: str, identifier: str, r: httpx.Response) -> None:
        assert self.outage is not None
        seen = self.outage[(daemon, method, identifier)]
        now = self.clock()
        if r.status_code == 502:
            assert seen.status == 502 or now >= seen.servable_end or self.store_lost, (
                f"(b) {method}({identifier}) on daemon {daemon}: a copy servable until "
                f"{seen.servable_end - now:.0f}s from now was not served"
            )
            return
        assert (r.status_code, r.json()) == (seen.status, seen.body), (
            f"(b) {method}({identifier}) on daemon {daemon} changed during an outage: "
            f"{seen.status} {seen.body} -> {r.status_code} {r.text}"
        )
        assert max_age(r) == 0 or now + max_age(r) <= seen.fresh_end + 1, (
            f"(b) {method}({identifier}) became fresher during an outage: fresh until "
            f"{seen.fresh_end - now:.1f}s from now when it began, now {r.headers['Cache-Control']}"
        )

    # --- the world changes ------------------------------------------------------------

    @rule(h=st.integers(0, 2), to=st.sampled_from([(), (0,), (1,), (2,), (3,), (0, 1)]))
    def point_dns(self, h: int, to: tuple[int, ...]) -> None:
        """No record, one DID, or two different ones (H-DNS-3: ambiguous)."""
        dids = tuple(self.world.dids[i] for i in to)
        self.world.point_dns(self.world.handles[h], dids)

    @rule(h=st.integers(0, 2), to=st.sampled_from([None, 0, 1, 2, 3]))
    def point_well_known(self, h: int, to: int | None) -> None:
        did = None if to is None else self.world.dids[to]
        self.world.point_well_known(self.world.handles[h], did)

    @rule(d=st.integers(0, 3), h=st.sampled_from([None, 0, 1, 2]))
    def declare(self, d: int, h: int | None) -> None:
        handle = None if h is None else self.world.handles[h]
        self.world.declare(self.world.dids[d], handle)

    @rule(h=st.integers(0, 2), to=st.integers(0, 3))
    def move_handle(self, h: int, to: int) -> None:
        """A handle moves the way people move it: DNS points at the new DID, which declares
        it, and whichever DID declared it before now declares nothing."""
        handle, did = self.world.handles[h], self.world.dids[to]
        for old, declared in list(self.world.state.declares.items()):
            if declared == handle and old != did:
                self.world.declare(old, None)
        self.world.point_dns(handle, (did,))
        self.world.declare(did, handle)

    @precondition(lambda self: self.outage is None)
    @rule(d=st.integers(0, 3), daemon=st.integers(0, 1))
    def lookup_during_a_dns_blip(self, d: int, daemon: int) -> None:
        """A DID is looked up while its handle's DNS fails: its document is cached alone."""
        did = self.world.dids[d]
        handle = self.world.state.declares.get(did)
        if handle is not None:
            self.world.dns_faults(frozenset({handle}))
        for method in ("resolveDid", "resolveIdentity:did"):
            self._check_claims(method, did, self._ask(daemon, method, did))
        self.world.dns_faults(frozenset())

    @rule(seconds=st.sampled_from([0.5, 2, 4, 6, 21, 61, 125]))
    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    # --- upstreams fail ---------------------------------------------------------------

    @precondition(lambda self: self.outage is None)
    @rule()
    def heal(self) -> None:
        """Every upstream answers again (faults come and go; most of the time they are gone)."""
        self.world.dns_faults(frozenset())
        self.world.https_faults(frozenset(), "503")
        self.world.plc_fault(None)

    @precondition(lambda self: self.outage is None)
    @rule(scope=st.sampled_from([None, 0, 1, 2, "*"]))
    def dns_fault(self, scope: int | str | None) -> None:
        self.heal()  # one upstream fails at a time, outside a total outage
        self.world.dns_faults(frozenset() if scope is None else frozenset({self._name(scope)}))

    @precondition(lambda self: self.outage is None)
    @rule(
        scope=st.sampled_from([None, 0, 1, 2, "*"]),
        kind=st.sampled_from(["503", "reset", "html", "hang"]),
    )
    def https_fault(self, scope: int | str | None, kind: str) -> None:
        self.heal()
        down = frozenset() if scope is None else frozenset({self._name(scope)})
        self.world.https_faults(down, kind)

    def _name(self, scope: int | str) -> str:
        return "*" if scope == "*" else self.world.handles[int(scope)]

    @precondition(lambda self: self.outage is None)
    @rule(fault=st.sampled_from(PLC_FAULTS))
    def plc_fault(self, fault: str | None) -> None:
        self.heal()
        self.world.plc_fault(fault)

    @precondition(lambda self: self.env.redis is not None and not self.redis_down)
    @rule()
    def redis_stop(self) -> None:
        assert self.env.redis is not None
        self.env.redis.stop()
        self.redis_down = True
        self.store_lost = self.outage is not None

    @precondition(lambda self: self.env.redis is not None and self.redis_down)
    @rule()
    def redis_start(self) -> None:
        assert self.env.redis is not None
        self.env.redis.start()  # empty: it keeps nothing on disk
        self.redis_down = False
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        """Until both daemons follow the store again (each says so in its health)."""
        deadline = time.monotonic() + 10
        while not all(self._healthy(d) for d in (0, 1)):
            assert time.monotonic() < deadline, "a daemon never recovered from the outage"
            time.sleep(0.05)

    def _healthy(self, daemon: int) -> bool:
        health = self.http.get(self.daemons[daemon].url + "/_health").json()
        return bool(health["status"] == "ok")

    @precondition(lambda self: self.outage is None and self.outages < 2)
    @rule()
    def begin_total_outage(self) -> None:
        self.world.dns_faults(frozenset({"*"}))
        self.world.https_faults(frozenset({"*"}), "503")
        self.world.plc_fault("status:503")
        self._drain()
        if not self.redis_down:
            # What one daemon wrote just before reaches the other's memory tier after its
            # store's notice delay: wait until it has, then take stock.
            self.env.loop.run(self.shared.settle())
        now = self.clock()
        self.outage = {}
        for daemon in (0, 1):
            for method in METHODS:
                for identifier in self._targets(method):
                    r = self._ask(daemon, method, identifier)
                    self._check_claims(method, identifier, r)
                    body = r.json()
                    seen = Seen(r.status_code, body, now + max_age(r), now + servable_for(r))
                    self.outage[(daemon, method, identifier)] = seen
        self.store_lost = self.redis_down
        self.outages += 1
        self.env.outages += 1

    @precondition(lambda self: self.outage is not None)
    @rule()
    def end_total_outage(self) -> None:
        self.sweep(0)  # every answer once more, against what the outage began with
        self.sweep(1)
        self.world.dns_faults(frozenset())
        self.world.https_faults(frozenset(), "503")
        self.world.plc_fault(None)
        self.outage = None

    # --- the daemons are asked --------------------------------------------------------

    @rule(
        asked=st.lists(
            st.tuples(st.integers(0, 1), st.sampled_from(METHODS), st.integers(0, 5)),
            min_size=1,
            max_size=4,
        )
    )
    def query(self, asked: list[tuple[int, str, int]]) -> None:
        for daemon, method, which in asked:
            targets = self._targets(method)
            self._query(daemon, method, targets[which % len(targets)])

    def _query(self, daemon: int, method: str, identifier: str) -> None:
        response = self._ask(daemon, method, identifier)
        self._check_claims(method, identifier, response)
        if self.outage is not None:
            self._check_outage(daemon, method, identifier, response)

    @rule(daemon=st.integers(0, 1))
    def sweep(self, daemon: int) -> None:
        """Every identifier, by every method, on one daemon."""
        for method in METHODS:
            for identifier in self._targets(method):
                self._query(daemon, method, identifier)

    @rule(daemon=st.integers(0, 1), which=st.integers(0, 9))
    def refresh(self, daemon: int, which: int) -> None:
        targets = self.world.all_handles + self.world.all_dids
        identifier = targets[which % len(targets)]
        refreshed = self.http.post(
            self.daemons[daemon].url + XRPC + "refreshIdentity",
            json={"identifier": identifier},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        self._drain()
        assert refreshed.status_code in (200, 400, 404, 502), refreshed.text
        if self.outage is not None:
            assert refreshed.status_code == 502, f"(b) a refresh during an outage: {refreshed.text}"
            return
        if self.redis_down or not (self._healthy(0) and self._healthy(1)):
            return  # the store did not take the change: the daemons may disagree
        method = (
            "resolveIdentity:did" if identifier.startswith("did:") else "resolveIdentity:handle"
        )
        mine = self._ask(daemon, method, identifier)
        self._check_claims(method, identifier, mine)
        self.env.loop.run(self.shared.settle())
        theirs = self._ask(1 - daemon, method, identifier)
        assert (theirs.status_code, theirs.json()) == (mine.status_code, mine.json()), (
            f"(c) after a refresh of {identifier} on daemon {daemon}, the other still "
            f"answered {theirs.status_code} {theirs.text} instead of {mine.text}"
        )
        self.env.refreshes_compared += 1

    # --- after every step -------------------------------------------------------------

    @invariant()
    def memory_stays_bounded(self) -> None:
        self.env.steps += 1
        for daemon in self.daemons:
            assert daemon.cached.store.used_bytes <= TIER_BYTES
            assert daemon.service.answers.used_bytes <= ANSWER_BYTES
        allowed = self.rss_start + RSS_ALLOWANCE + 2 * (TIER_BYTES + ANSWER_BYTES)
        assert _rss() <= allowed, f"(d) RSS {_rss() >> 20} MiB over {allowed >> 20} MiB"


@pytest.fixture(scope="module")
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.stop()


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_cached_answers_stay_true_as_the_world_changes(
    devnet: DevnetState, loop: LoopThread, tmp_path: Path, store: str
) -> None:
    redis = RedisServer(tmp_path) if store == "redis" else None
    with PlcStandIn(devnet.plc_url) as stand_in:
        if redis is not None:
            redis.start()
        try:
            env = Environment(devnet, loop, stand_in, redis, tmp_path, _rss())
            CacheModel.env = env
            run_state_machine_as_test(
                CacheModel,
                settings=settings(
                    max_examples=EXAMPLES,
                    stateful_step_count=STEPS_PER_EXAMPLE,
                    derandomize=not SOAK_STEPS,  # make test: the same sequence every run
                    database=None,
                    deadline=None,
                    suppress_health_check=list(HealthCheck),
                ),
            )
        finally:
            if redis is not None:
                redis.stop()
            devnet.set_dns_faults({})
            devnet.set_https_faults({})
    print(
        f"\nmodel ({store}): {env.examples} sequences, {env.steps - env.examples} steps, "
        f"{env.answers} answers ({dict(sorted(env.statuses.items()))} by status), "
        f"{env.fresh_claims} fresh claims checked against the world, "
        f"{env.outages} total outages, {env.refreshes_compared} refreshes compared across "
        f"daemons; test process RSS {env.rss_start >> 20} -> {_rss() >> 20} MiB; "
        "no invariant broken"
    )
    assert env.steps > env.examples and env.fresh_claims > 0
