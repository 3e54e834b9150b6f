"""Cold resolution on the test network, with latency added to every DNS answer and HTTPS
response: atwhois (both methods at once, bidirectional check) against the Python SDK's
`AsyncIdResolver` and Bluesky's TypeScript `@atproto/identity` (both: DNS, then HTTPS;
handle -> DID -> document, no check), in one run.

    python -m bench cold [--delay-ms 50] [--lookups 600] [--concurrency 32] [--loop uvloop]
    python -m bench cold --check-pds   # the PDS check's cost: lookups of accounts of the
                                       # reference PDS, with it against without it
    python -m bench cold --dnssec      # DNSSEC validation's cost: lookups of the handles of
                                       # the signed zones, with it (each lookup walking
                                       # from the anchor, and with the walk kept) and without

Every lookup in process runs on uvloop's event loop, as atwhois's commands run theirs
(`--loop asyncio`: the standard library's, for comparison); the SDK shares the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import ssl
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpcore
import httpx
import uvloop
from atproto_identity.resolver import AsyncIdResolver

from atwhois.resolver import Resolver
from atwhois.resolver.dns import DnsClient
from atwhois.resolver.fetch import AddressGuard
from bench import Row
from devnet.network import DevnetState, running_devnet

# Verified identities of the world, by the method that resolves them.
DNS_HANDLES = [
    "alice.test",
    "bob.test",
    "dave.test",
    "frank.test",
    "grace.test",
    "henry.test",
    "quinn.test",
    "dupe.test",
    "split.test",
    "cname.test",
]
HTTPS_HANDLES = ["carol.test", "spaces.test", "redirect.test"]


@dataclass
class Result:
    name: str
    lookups: int
    ok: int
    seconds: float
    cpu_seconds: float
    latencies: list[float]

    @property
    def rate(self) -> float:
        """Correct answers a second: a wrong or failed one is not throughput."""
        return self.ok / self.seconds

    def line(self) -> str:
        lat = sorted(self.latencies)
        p50 = statistics.median(lat) * 1000
        p95 = lat[int(len(lat) * 0.95) - 1] * 1000
        cpu = self.cpu_seconds / self.lookups * 1000
        return (
            f"{self.name:<28} {self.rate:8.1f} correct/s   p50 {p50:7.1f} ms   p95 {p95:7.1f} ms"
            f"   cpu {cpu:5.2f} ms/lookup   ok {self.ok}/{self.lookups}"
        )


async def measure(
    name: str,
    lookup: Callable[[str], Awaitable[bool]],
    handles: list[str],
    lookups: int,
    concurrency: int,
) -> Result:
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(handle: str) -> bool:
        async with gate:
            started = time.perf_counter()
            ok = await lookup(handle)
            latencies.append(time.perf_counter() - started)
            return ok

    work = [handles[i % len(handles)] for i in range(lookups)]
    cpu, wall = time.process_time(), time.perf_counter()
    results = await asyncio.gather(*(one(h) for h in work))
    return Result(
        name,
        lookups,
        sum(results),
        time.perf_counter() - wall,
        time.process_time() - cpu,
        latencies,
    )


class _DevnetBackend(httpcore.AsyncNetworkBackend):
    """Lets the SDK's httpx client reach the test network's hosts the way atwhois does:
    addresses from the test DNS server, :443 mapped to the TLS port."""

    def __init__(self, guard: AddressGuard, https_port: int) -> None:
        self._guard, self._https_port = guard, https_port
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        address = (await self._guard.addresses(host))[0]
        port = self._https_port if port == 443 else port
        return await self._inner.connect_tcp(address, port, timeout=timeout)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def sdk_resolver(devnet: DevnetState, plc_url: str | None = None) -> AsyncIdResolver:
    """The SDK pointed at the same network (`plc_url`: another PLC directory than its own):
    its DNS through the test nameserver, its HTTP through the same loopback mapping atwhois
    uses (the SDK has no hooks for either, so its two private attributes are replaced;
    benchmark code only)."""
    config = devnet.config(https_timeout=5.0, document_timeout=5.0, dns_timeout=5.0)
    sdk = AsyncIdResolver(plc_url=plc_url or devnet.plc_url, timeout=5.0)
    dns = DnsClient(config)
    sdk.handle._dns_resolver = dns._resolver  # type: ignore[assignment]
    context = ssl.create_default_context(cafile=devnet.ca_file)
    transport = httpx.AsyncHTTPTransport(verify=context)
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=context,
        network_backend=_DevnetBackend(AddressGuard(config, dns), devnet.https_port),
    )
    sdk.handle._http_client = httpx.AsyncClient(transport=transport)
    return sdk


_NODE_PEER = "@atproto/identity"


def identity_peer(
    devnet: DevnetState, expected: dict[str, str], lookups: int, concurrency: int
) -> Result:
    """Bluesky's TypeScript resolver (`bench/identity_peer.cjs`, the copy the test network's
    reference PDS installs) on the same handles, in a Node process of its own; an answer
    counts when it names the handle's right DID (`expected`) and finds its document."""
    settings = {
        "pds_dir": str(Path(__file__).resolve().parent.parent / "tests" / "devnet" / "pds"),
        "dns_server": devnet.dns_server,
        "https_port": devnet.https_port,
        "plc_url": devnet.plc_url,
        "expected": expected,
        "lookups": lookups,
        "concurrency": concurrency,
    }
    done = subprocess.run(
        ["node", str(Path(__file__).with_name("identity_peer.cjs")), json.dumps(settings)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "NODE_EXTRA_CA_CERTS": devnet.ca_file},
    )
    measured = json.loads(done.stdout)
    return Result(
        f"{_NODE_PEER} (unverified)",
        measured["lookups"],
        measured["ok"],
        measured["seconds"],
        measured["cpu_seconds"],
        measured["latencies"],
    )


async def run(devnet: DevnetState, lookups: int, concurrency: int, delay_ms: float) -> list[Row]:
    config = devnet.config(https_timeout=5.0, document_timeout=5.0, dns_timeout=5.0)
    sdk = sdk_resolver(devnet)

    async with Resolver(config) as atwhois:

        async def atwhois_lookup(handle: str) -> bool:
            return (await atwhois.lookup(handle)).verified

        # The right DID of every handle: each is verified both ways by atwhois (checked
        # here), so a peer's answer counts only when it names that DID and finds its document.
        expected: dict[str, str] = {}
        for handle in DNS_HANDLES + HTTPS_HANDLES:
            identity = await atwhois.lookup(handle)
            assert identity.verified and identity.did, identity.to_json()
            expected[handle] = identity.did

        async def sdk_lookup(handle: str) -> bool:
            did = await sdk.handle.resolve(handle)
            return did == expected[handle] and await sdk.did.resolve(did) is not None

        print(
            f"cold resolution, {delay_ms:.0f} ms added to every DNS answer and HTTPS "
            f"response; {lookups} lookups at concurrency {concurrency}"
        )
        print("\nsingle lookup latency (sequential, median of 15):")
        for handles, label in ((DNS_HANDLES, "DNS-resolved"), (HTTPS_HANDLES, "HTTPS-resolved")):
            for name, fn in (("atwhois", atwhois_lookup), ("python sdk", sdk_lookup)):
                single = await measure(name, fn, handles, 15, 1)
                print(
                    f"  {label:<15} {name:<11} {statistics.median(single.latencies) * 1000:7.1f} ms"
                )
        rows: list[Row] = []
        mixes = {
            "DNS-resolved": DNS_HANDLES,
            "HTTPS-resolved": HTTPS_HANDLES,
            "mixed 1:3 (bsky-like)": DNS_HANDLES[:1] + HTTPS_HANDLES,
        }
        for label, handles in mixes.items():
            print(f"\n{label} handles:")
            ours = await measure(
                "atwhois (verified)", atwhois_lookup, handles, lookups, concurrency
            )
            theirs = await measure(
                "python sdk (unverified)", sdk_lookup, handles, lookups, concurrency
            )
            node = await asyncio.to_thread(
                identity_peer, devnet, {h: expected[h] for h in handles}, lookups, concurrency
            )
            print("  " + ours.line())
            print("  " + theirs.line())
            print("  " + node.line())
            print(
                f"  throughput ratio atwhois / sdk: {ours.rate / theirs.rate:.2f}, "
                f"atwhois / @atproto/identity: {ours.rate / node.rate:.2f}"
            )
            rows.append(Row(f"cold lookups, {label}", ours.rate, theirs.rate, "python sdk", "/s"))
            rows.append(Row(f"cold lookups, {label}", ours.rate, node.rate, _NODE_PEER, "/s"))
            cpu_ms = ours.cpu_seconds / max(ours.ok, 1) * 1000
            rows.append(
                Row(f"  CPU per verified lookup, {label}", cpu_ms, 5.0, "target", "ms", True)
            )
        return rows


async def pds_check_cost(
    devnet: DevnetState, lookups: int, concurrency: int, delay_ms: float
) -> list[Row]:
    """Lookups of accounts the reference PDS hosts, with the PDS check (three more requests,
    a CAR read, a signature verified) against the same lookups without it, in one run."""
    from devnet.pds import create_account
    from devnet.world import LIVE_HANDLE_SUFFIX

    config = devnet.config(https_timeout=5.0, document_timeout=5.0, dns_timeout=5.0)
    tag = os.urandom(3).hex()
    names = [f"cost{tag}{i}" for i in range(12)]
    for name in names:
        create_account(devnet.pds_url, name)
    handles = [name + LIVE_HANDLE_SUFFIX for name in names]
    async with Resolver(config) as atwhois:

        async def plain(handle: str) -> bool:
            return (await atwhois.lookup(handle)).verified

        async def checked(handle: str) -> bool:
            identity = await atwhois.check_pds(await atwhois.lookup(handle))
            return identity.pds_check is not None and identity.pds_check.outcome == "hosted"

        print(
            f"the PDS check's cost, {delay_ms:.0f} ms added to every DNS answer and HTTPS "
            f"response; {lookups} lookups of {len(handles)} accounts of the reference PDS at "
            f"concurrency {concurrency}"
        )
        without = await measure("lookup", plain, handles, lookups, concurrency)
        with_check = await measure("lookup + PDS check", checked, handles, lookups, concurrency)
    print("  " + without.line())
    print("  " + with_check.line())
    cpu = [r.cpu_seconds / max(r.ok, 1) * 1000 for r in (with_check, without)]
    print(
        f"  with the check / without: throughput {with_check.rate / without.rate:.2f}, "
        f"CPU per lookup {cpu[0] / cpu[1]:.2f}"
    )
    return [
        Row("cold lookups with the PDS check", with_check.rate, without.rate, "without", "/s"),
        Row("  CPU per lookup with the PDS check", cpu[0], cpu[1], "without", "ms", True),
    ]


async def dnssec_cost(
    devnet: DevnetState, lookups: int, concurrency: int, delay_ms: float
) -> list[Row]:
    """Lookups of the DNS-only handles of the test network's signed zones (secure under NSEC
    and NSEC3, insecure below unsigned delegations) without DNSSEC, with it walking from the
    anchor for every lookup (a resolver of its own over the same network edges: the cold
    case), and with the walk kept across lookups (a daemon's case), in one run."""
    from devnet import dnssec as island

    config = devnet.config(https_timeout=5.0, document_timeout=5.0, dns_timeout=5.0)
    validating = dataclasses.replace(config, dnssec=True)
    handles = [island.handle(zone) for zone in island.HANDLES if zone != island.BROKEN]
    async with Resolver(validating) as kept_resolver:
        # All three over the same network edges (DNS client, connection pools): only the
        # DNSSEC work differs.
        edges = kept_resolver
        plain_resolver = Resolver(config, dns=edges.dns, web=edges.web, plc=edges.plc)

        async def plain(handle: str) -> bool:
            return (await plain_resolver.lookup(handle)).verified

        async def kept(handle: str) -> bool:
            identity = await kept_resolver.lookup(handle)
            return identity.verified and identity.dns.dnssec is not None

        async def walked(handle: str) -> bool:
            own = Resolver(validating, dns=edges.dns, web=edges.web, plc=edges.plc)
            identity = await own.lookup(handle)
            return identity.verified and identity.dns.dnssec is not None

        print(
            f"DNSSEC validation's cost, {delay_ms:.0f} ms added to every DNS answer and HTTPS "
            f"response; {lookups} lookups of {len(handles)} DNS-only handles of the signed "
            f"zones at concurrency {concurrency}"
        )
        kinds = [("lookup", plain), ("lookup + DNSSEC, walk kept", kept)]
        for warm_up in (plain, kept):  # the process's first lookups pay its start-up
            await measure("warm-up", warm_up, handles, len(handles), concurrency)
        # The order matters (a run pays for what the one before it left behind): without
        # and with the walk kept are measured before and after the cold walks, and the
        # better of each pair counts.
        firsts = [await measure(n, f, handles, lookups, concurrency) for n, f in kinds]
        cold = await measure("lookup + DNSSEC, own walk", walked, handles, lookups, concurrency)
        seconds = [await measure(n, f, handles, lookups, concurrency) for n, f in kinds]
        without, warm = (
            max(pair, key=lambda r: r.rate) for pair in zip(firsts, seconds, strict=True)
        )
    rows = []
    for result in (*firsts, cold, *seconds):
        print("  " + result.line())
    base_cpu = without.cpu_seconds / max(without.ok, 1) * 1000
    for label, result in (("its own walk", cold), ("the walk kept", warm)):
        cpu = result.cpu_seconds / max(result.ok, 1) * 1000
        print(
            f"  DNSSEC with {label} / without: throughput {result.rate / without.rate:.2f}, "
            f"p50 {_p50(result) / _p50(without):.2f}, CPU per lookup {cpu / base_cpu:.2f}"
        )
        rows.append(
            Row(f"cold lookups with DNSSEC, {label}", result.rate, without.rate, "without", "/s")
        )
        rows.append(
            Row(f"  CPU per lookup with DNSSEC, {label}", cpu, base_cpu, "without", "ms", True)
        )
    return rows


def _p50(result: Result) -> float:
    return statistics.median(result.latencies)


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench cold", description=__doc__)
    parser.add_argument("--delay-ms", type=float, default=50)
    parser.add_argument("--lookups", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    parser.add_argument(
        "--check-pds", action="store_true", help="measure the PDS check's cost instead"
    )
    parser.add_argument(
        "--dnssec", action="store_true", help="measure DNSSEC validation's cost instead"
    )
    args = parser.parse_args(argv)
    loop = uvloop.new_event_loop if args.loop == "uvloop" else asyncio.new_event_loop
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-bench-") as workdir,
        running_devnet(Path(workdir), delay_ms=args.delay_ms) as devnet,
        asyncio.Runner(loop_factory=loop) as runner,
    ):
        print(f"event loop: {args.loop}")
        measured = pds_check_cost if args.check_pds else dnssec_cost if args.dnssec else run
        return runner.run(measured(devnet, args.lookups, args.concurrency, args.delay_ms))
