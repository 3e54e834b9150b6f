"""What anonymous callers can make atwhois ask its upstreams (issue 66), on the test network:

- upstream requests per refused service-auth token (a bad signature, an existing did:plc as
  `iss`), its issuer not cached (cold) and cached: each HTTP request and each DNS question
  the resolver sends, counted where it leaves (the fetcher's request, the nameserver's
  query); averaged over the test world's did:plc identities, and for an issuer whose handle
  is 114 labels deep in a zone whose negative answers carry no SOA (the forging resolver
  drops it);
- a directory that answers one 429 with `Retry-After: 3600`: a daemon's honest lookups of
  DIDs it has not cached, one every `--every` seconds for `--minutes`, and what `/_health`
  said meanwhile.

    python -m bench refused [--minutes 6] [--every 10]

Run it against another checkout's package (`PYTHONPATH=/that/checkout`) for a before and
after: it uses only what both have.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from atwhois.auth import Expected, ServiceAuthVerifier
from atwhois.cache import CachedResolver
from atwhois.cache.stores import MemoryStore
from atwhois.resolver import Config, Resolver
from atwhois.resolver.config import Nameserver
from atwhois.resolver.dns_wire import BoundedNameserver
from atwhois.resolver.fetch import Fetcher
from devnet.atwhois import running_daemon
from devnet.counting_directory import PlcStandIn
from devnet.network import DevnetState, running_devnet
from devnet.plc_ops import PlcAccount
from devnet.tokens import AUDIENCE, forged_token

DEEP_SUFFIX = "deepbench.test"


@contextmanager
def counting(plc_url: str) -> Iterator[Counter[str]]:
    """Every request the resolver sends while the block runs: `directory` (HTTP to the PLC
    directory), `http` (any other host), `dns` (a question to any nameserver)."""
    sent: Counter[str] = Counter()
    get_once, query = Fetcher._get_once, BoundedNameserver.async_query

    async def counted_get(self: Fetcher, url: str, *args: Any) -> Any:
        sent["directory" if url.startswith(plc_url) else "http"] += 1
        return await get_once(self, url, *args)

    async def counted_query(self: BoundedNameserver, *args: Any, **kwargs: Any) -> Any:
        sent["dns"] += 1
        return await query(self, *args, **kwargs)

    Fetcher._get_once = counted_get  # type: ignore[method-assign]
    BoundedNameserver.async_query = counted_query  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        Fetcher._get_once = get_once  # type: ignore[method-assign]
        BoundedNameserver.async_query = query  # type: ignore[method-assign]


async def per_token(config: Config, did: str, *, cached: bool) -> Counter[str]:
    """The requests one refused token for `did` sends, from a cache of its own (its issuer
    looked up first, uncounted, when `cached`)."""
    async with CachedResolver(Resolver(config), MemoryStore()) as directory:
        if cached:
            await directory.lookup(did)
        with counting(config.plc_url) as sent:
            verification = await ServiceAuthVerifier(directory).verify(
                forged_token(did), Expected(AUDIENCE)
            )
        assert verification.outcome != "valid", verification
        return sent


def _deep_issuer(devnet: DevnetState) -> str:
    """A did:plc whose handle is 114 labels deep, its TXT record in place, in a zone the
    forging resolver answers NS questions about without an SOA."""
    handle = ".".join(["a"] * 114) + "." + DEEP_SUFFIX  # its _atproto name: 251 characters
    did = PlcAccount(devnet.plc_url, handle).did
    devnet.set_txt(handle, [f"did={did}"])
    devnet.set_forgeries({f"*.{DEEP_SUFFIX}. NS": [{"drop_soa": True}]})
    return did


def tokens(devnet: DevnetState) -> None:
    config = devnet.config(dns_servers=(Nameserver.parse(devnet.dns_server_forging),))
    world = [did for did in devnet.dids.values() if did.startswith("did:plc:")]
    deep = _deep_issuer(devnet)
    print("upstream requests per refused token (a bad signature, an existing did:plc):")
    for cached in (False, True):
        totals: Counter[str] = Counter()
        for did in world:
            totals += asyncio.run(per_token(config, did, cached=cached))
        each = {kind: totals[kind] / len(world) for kind in ("directory", "http", "dns")}
        deep_sent = asyncio.run(per_token(config, deep, cached=cached))
        print(
            f"  {'cached' if cached else 'cold':>6}: {sum(each.values()):5.1f} on average over "
            f"{len(world)} issuers (directory {each['directory']:.1f}, other HTTP "
            f"{each['http']:.1f}, DNS {each['dns']:.1f}); the deep handle's issuer "
            f"{sum(deep_sent.values())} (DNS {deep_sent['dns']})"
        )
    devnet.set_forgeries({})


def parked(devnet: DevnetState, tmp: Path, minutes: float, every: float) -> None:
    standin = PlcStandIn(devnet.plc_url, tmp / "standin.log")
    dids = [PlcAccount(devnet.plc_url, None).did for _ in range(int(minutes * 60 / every) + 2)]
    env = {**devnet.env(), "ATWHOIS_PLC_URL": standin.url, "ATWHOIS_PLC_RATE": "300"}
    try:
        with running_daemon(env, tmp / "serve.log", "--cache", "memory:") as daemon:
            standin.refuse(1, retry_after="3600")
            resolve = daemon.url + "/xrpc/com.atproto.identity.resolveDid"
            assert httpx.get(resolve, params={"did": dids[0]}, timeout=30).status_code == 502
            started, outcomes = time.monotonic(), []
            print(f"a 429 with Retry-After: 3600; then an uncached lookup every {every:g} s:")
            for did in dids[1:]:
                at = time.monotonic() - started
                if at > minutes * 60:
                    break
                status = httpx.get(resolve, params={"did": did}, timeout=30).status_code
                health = httpx.get(daemon.url + "/_health", timeout=30).json()
                outcomes.append((at, status, health["ok"], health["reasons"]))
                print(f"  {at:6.1f} s  {status}  /_health ok={health['ok']} {health['reasons']}")
                time.sleep(max(0.0, started + len(outcomes) * every - time.monotonic()))
        reached = len(standin.times)
    finally:
        standin.stop()
    answered = sum(status == 200 for _, status, _, _ in outcomes)
    first = next((at for at, status, _, _ in outcomes if status == 200), None)
    print(
        f"  {answered}/{len(outcomes)} answered 200 ({len(outcomes) - answered} 502); the "
        f"first 200 at {first if first is None else round(first)} s; /_health not ok in "
        f"{sum(not ok for _, _, ok, _ in outcomes)} of them; requests at the directory "
        f"{reached}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench refused", description=__doc__)
    parser.add_argument("--minutes", type=float, default=6.0)
    parser.add_argument("--every", type=float, default=10.0)
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-refused-bench-") as name,
        running_devnet(Path(name)) as devnet,
    ):
        tokens(devnet)
        parked(devnet, Path(name), args.minutes, args.every)
