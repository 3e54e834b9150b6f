"""The model behind `tests/cache/test_cache_model.py`: a small world that changes on command, two
daemons sharing one store, and what each answer is allowed to claim.

The daemons are the real `Service` applications on loopback ports, run on a thread of their
own, with one fake clock (so an hour passes in a step) shared by both. The world is the test
network's: handles are DNS TXT records (zone reloads) and well-known files, did:plc
identities change through signed operations on the reference PLC directory (reached through
a stand-in that fails on command), a did:web document is a file. Every change is recorded in
a timeline, so the oracle can say what was true at any moment.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import httpx
from aiohttp import web

from atwhois.cache import CachedResolver, Lifetime, Policy
from atwhois.cache.stores import MemoryStore, SqliteStore, TieredStore
from atwhois.cache.stores.redis import RedisStore
from atwhois.resolver import Resolver
from atwhois.server import Service, Settings
from devnet import world
from devnet.forwarder import PlcStandIn
from devnet.network import DevnetState
from devnet.plc_ops import PlcAccount
from tests.support.clock import Clock
from tests.support.http import max_age
from tests.support.waiting import eventually

T = TypeVar("T")
TOKEN = "model-token"
POLICY = Policy(
    verified=Lifetime(20, 300),
    unverified=Lifetime(5, 120),
    absent=Lifetime(3, 60),
    retry_after=2,
)
FRESH_MAX = max(POLICY.verified.fresh, POLICY.unverified.fresh, POLICY.absent.fresh)
TIER_BYTES = 1024 * 1024  # small, so large documents push entries out
ANSWER_BYTES = 128 * 1024


class LoopThread:
    """An event loop on a thread of its own: the daemons run there, the model calls them
    over HTTP from the test's thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, work: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


FENCE = "fence:"  # keys only `Shared.settle` writes, to learn that notices arrived


@dataclass
class Daemon:
    url: str
    service: Service
    runner: web.AppRunner
    fences: set[str] = field(default_factory=set)  # fence keys whose notice reached it

    @property
    def cached(self) -> CachedResolver:
        return self.service.cached


async def start_daemon(resolver: Resolver, store: TieredStore, clock: Clock) -> Daemon:
    cached = CachedResolver(resolver, store, POLICY, clock=clock)
    settings = Settings(refresh_token=TOKEN, request_log=False, answer_cache_bytes=ANSWER_BYTES)
    service = Service(cached, settings)
    # A step may leave a request waiting on an upstream it made hang: stopping must not wait
    # aiohttp's default minute for it (the model's teardown would time out first).
    runner = await service.runner(service.app(), access_log=None, shutdown_timeout=5)
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    daemon = Daemon(f"http://{host}:{port}", service, runner)
    store.listeners.append(
        lambda keys: daemon.fences.update(k for k in keys or () if k.startswith(FENCE))
    )
    return daemon


async def wait_idle(daemons: list[Daemon]) -> None:
    """Until no daemon has a resolution in flight: 30 s at most, past which a resolution
    that never ends fails the step rather than hanging the run."""
    await eventually(
        lambda: not any(d.cached.inflight for d in daemons), 30, "resolutions still in flight"
    )


# --- the world, and what was true when -----------------------------------------------


@dataclass(frozen=True)
class State:
    txt: dict[str, tuple[str, ...]]  # handle -> the DIDs of its TXT records
    well_known: dict[str, str | None]  # handle -> the DID its well-known file says
    declares: dict[str, str | None]  # DID -> the handle its document declares
    dns_down: frozenset[str] = frozenset()  # handles whose TXT fails; "*": all DNS
    https_down: frozenset[str] = frozenset()  # hosts that fail; "*": all
    plc_fault: str | None = None

    def handle_dids(self, handle: str) -> set[str]:
        """The DIDs a resolution of `handle` may settle on now (H-RES-2, H-DNS-3)."""
        all_dns_down = "*" in self.dns_down
        if not (all_dns_down or handle in self.dns_down):
            dids = set(self.txt.get(handle, ()))
            if len(dids) == 1:
                return dids
            if len(dids) > 1:
                return set()  # ambiguous: fails whatever HTTPS says
        https_down = all_dns_down or "*" in self.https_down or handle in self.https_down
        served = self.well_known.get(handle)
        return {served} if served and not https_down else set()


@dataclass
class Timeline:
    """Every state of the world, with the (fake) time it began."""

    states: list[tuple[float, State]] = field(default_factory=list)

    def add(self, at: float, state: State) -> None:
        self.states.append((at, state))

    @property
    def now(self) -> State:
        return self.states[-1][1]

    def during(self, start: float, end: float) -> list[State]:
        """The states that held at some moment of [start, end]."""
        held = []
        for i, (began, state) in enumerate(self.states):
            ended = self.states[i + 1][0] if i + 1 < len(self.states) else end
            if began <= end and ended >= start:
                held.append(state)
        return held


@dataclass(frozen=True)
class Claim:
    """A fresh answer saying `handle` and `did` are bound (or, with `handle` None, that
    `did`'s document declares `declared`), at `at`, fresh for `max_age` more seconds."""

    at: float
    max_age: int
    did: str
    handle: str | None = None
    declared: str | None = None


def falsified(claim: Claim, timeline: Timeline) -> str | None:
    """Why a fresh claim is not backed by the world, or None. Each part of an answer was
    true at the start of its resolution, which lies within the freshest window any part
    can have before the claim's fresh end: [at + max_age - FRESH_MAX, at]."""
    states = timeline.during(claim.at + claim.max_age - FRESH_MAX, claim.at)
    if claim.handle is None:
        if not any(s.declares.get(claim.did) == claim.declared for s in states):
            return f"{claim.did} did not declare {claim.declared} within the window"
        return None
    if not any(claim.did in s.handle_dids(claim.handle) for s in states):
        return f"{claim.handle} did not resolve to {claim.did} within the window"
    if not any(s.declares.get(claim.did) == claim.handle for s in states):
        return f"{claim.did} did not declare {claim.handle} within the window"
    return None


def servable_for(response: httpx.Response) -> int:
    cache = response.headers.get("Cache-Control", "")
    extra = re.search(r"stale-if-error=(\d+)", cache)
    return max_age(response) + (int(extra.group(1)) if extra else 0)


def claims_of(method: str, identifier: str, response: httpx.Response, at: float) -> list[Claim]:
    """What a 200 answer with a fresh Cache-Control asserts."""
    fresh = max_age(response)
    if response.status_code != 200 or fresh <= 0:
        return []
    body = response.json()
    if method == "resolveHandle":
        return [Claim(at, fresh, body["did"], handle=identifier)]
    if method == "resolveDid":
        aliases = [a for a in body["didDoc"].get("alsoKnownAs", []) if a.startswith("at://")]
        declared = aliases[0].removeprefix("at://") if aliases else None
        return [Claim(at, fresh, identifier, declared=declared)]
    if body["handle"] == "handle.invalid":
        return []
    return [Claim(at, fresh, body["did"], handle=body["handle"])]


# --- building and changing the world ---------------------------------------------------


class ModelWorld:
    """One example's identities on the test network, fresh names each time."""

    def __init__(self, devnet: DevnetState, stand_in: PlcStandIn, clock: Clock) -> None:
        self.devnet, self.stand_in, self.clock = devnet, stand_in, clock
        run = uuid.uuid4().hex[:8]
        self.handles = [f"m{run}x{i}{world.BULK_SUFFIX}" for i in range(3)]
        self.accounts = [PlcAccount(devnet.plc_url, None) for _ in range(3)]
        self.web_host = f"w{run}{world.BULK_SUFFIX}"
        # Generated did:web identities with 60 KB documents: memory pressure.
        self.big = [f"pad60-{run}-{i}{world.BULK_SUFFIX}" for i in range(2)]
        self.dids = [a.did for a in self.accounts] + [f"did:web:{self.web_host}"]
        self.all_dids = self.dids + [f"did:web:{host}" for host in self.big]
        self.all_handles = self.handles + self.big
        # It starts healthy: h0 by DNS to the first DID, h1 by HTTPS to the second, h2 by
        # DNS to the did:web; each declares its handle; the third did:plc declares none.
        h0, h1, h2 = self.handles
        d0, d1, _, web = self.dids
        txt = {h0: (d0,), h1: (), h2: (web,)}
        well_known = {h0: None, h1: d1, h2: None, **{b: f"did:web:{b}" for b in self.big}}
        declares = {d0: h0, d1: h1, self.dids[2]: None, web: h2}
        for account, handle in zip(self.accounts, (h0, h1, None), strict=True):
            if handle:
                account.set_handle(handle)
        devnet.set_txts({h: [f"did={d}" for d in dids] for h, dids in txt.items()})
        for handle in self.handles:
            devnet.set_file(handle, world.WELL_KNOWN, well_known[handle])
        self._write_web_document(h2)
        self.timeline = Timeline()
        declares.update({f"did:web:{b}": b for b in self.big})
        self.timeline.add(clock(), State(txt, well_known, declares))

    @property
    def state(self) -> State:
        return self.timeline.now

    def _change(self, **changes: Any) -> None:
        self.timeline.add(self.clock(), replace(self.state, **changes))

    def point_dns(self, handle: str, dids: tuple[str, ...]) -> None:
        self.devnet.set_txt(handle, [f"did={d}" for d in dids])
        self._change(txt={**self.state.txt, handle: dids})

    def point_well_known(self, handle: str, did: str | None) -> None:
        self.devnet.set_file(handle, world.WELL_KNOWN, did)
        self._change(well_known={**self.state.well_known, handle: did})

    def declare(self, did: str, handle: str | None) -> None:
        if did.startswith("did:web:"):
            self._write_web_document(handle)
        else:
            self.accounts[self.dids.index(did)].set_handle(handle)
        self._change(declares={**self.state.declares, did: handle})

    def _write_web_document(self, handle: str | None) -> None:
        document = world.did_web_document(self.web_host)
        document["alsoKnownAs"] = [f"at://{handle}"] if handle else []
        self.devnet.set_file(self.web_host, world.DID_JSON, json.dumps(document))

    def dns_faults(self, down: frozenset[str]) -> None:
        self.devnet.set_dns_faults(
            {("*" if n == "*" else f"_atproto.{n}."): "servfail" for n in down}
        )
        self._change(dns_down=down)

    def https_faults(self, down: frozenset[str], kind: str) -> None:
        self.devnet.set_https_faults({n: kind for n in down})
        self._change(https_down=down)

    def plc_fault(self, fault: str | None) -> None:
        self.stand_in.set_fault(fault)
        self._change(plc_fault=fault)

    def clear_faults(self) -> None:
        self.devnet.set_dns_faults({})
        self.devnet.set_https_faults({})
        self.stand_in.set_fault(None)


@dataclass
class Shared:
    """Two daemons sharing one store, and a third writer to that store (`settle`)."""

    daemons: list[Daemon]
    writer: RedisStore | SqliteStore
    clock: Clock

    async def settle(self, timeout: float = 10) -> None:
        """Until every change written to the store so far has been announced to both
        daemons: a fence key written now is heard after them (notices arrive in order, by
        Redis pub/sub on one channel, or by sequence in SQLite's change log)."""
        deadline = time.monotonic() + timeout
        tiers = [daemon.cached.store for daemon in self.daemons]
        for tier in tiers:
            await tier.get(FENCE)  # a tier starts following changes at its first read
        await eventually(
            lambda: all(tier.following for tier in tiers),
            timeout,
            "a daemon did not follow the store's changes",
        )
        key = f"{FENCE}{uuid.uuid4().hex}"
        await self.writer.put(key, b"", self.clock() + 600)
        await eventually(
            lambda: all(key in daemon.fences for daemon in self.daemons),
            deadline - time.monotonic(),  # what is left of the one bound for both waits
            f"a daemon did not hear of {key} in {timeout}s",
        )


def two_daemons(
    loop: LoopThread,
    devnet: DevnetState,
    stand_in: PlcStandIn,
    clock: Clock,
    store_kind: str,
    where: str,
) -> Shared:
    """Two daemons sharing one store: `where` is a Redis URL or a SQLite file path."""
    config = devnet.config(
        plc_url=stand_in.url, dns_timeout=0.3, https_timeout=0.5, document_timeout=0.5
    )
    prefix = f"model-{uuid.uuid4().hex}:"

    def store() -> RedisStore | SqliteStore:
        if store_kind == "redis":
            return RedisStore(where, prefix=prefix)
        return SqliteStore(Path(where), clock=clock)

    async def start() -> Shared:
        daemons = []
        for _ in range(2):
            tier = TieredStore(MemoryStore(TIER_BYTES, clock), store())
            daemons.append(await start_daemon(Resolver(config), tier, clock))
        return Shared(daemons, store(), clock)

    return loop.run(start())


def stop_daemons(loop: LoopThread, daemons: list[Daemon]) -> None:
    async def stop() -> None:
        for daemon in daemons:
            await daemon.runner.cleanup()

    loop.run(stop(), timeout=120)
