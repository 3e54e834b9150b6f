"""In-process cached lookups per store, rotating over `--identities` distinct identities of
the test network's bulk world (no memo of a few keys answers them), against uncached
resolution in the same run (what an identity costs in each store is `bench store`'s).

    python -m bench cache [--lookups 20000] [--identities 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from atwhois.cache import CachedResolver, MemoryStore, SqliteStore, Store, TieredStore
from atwhois.cache.stores.redis import RedisStore
from atwhois.resolver import Resolver
from devnet import world
from devnet.network import DevnetState, running_devnet
from devnet.redis_server import REDIS_URL


async def rate(
    lookup: Callable[[str], object], handles: list[str], count: int, concurrency: int
) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one(handle: str) -> None:
        async with gate:
            await lookup(handle)  # type: ignore[misc]

    started = time.perf_counter()
    await asyncio.gather(*(one(handles[i % len(handles)]) for i in range(count)))
    return count / (time.perf_counter() - started)


async def run(devnet: DevnetState, handles: list[str], lookups: int, tmp: Path) -> None:
    async with Resolver(devnet.config()) as plain:
        await rate(plain.lookup, handles, 100, 32)  # warm connections
        uncached = await rate(plain.lookup, handles[100:], 1000, 32)
    print(f"uncached resolution (test network, no added delay)  {uncached:10,.0f} lookups/s")
    stores: dict[str, Callable[[], Store]] = {
        "memory": MemoryStore,
        "sqlite": lambda: SqliteStore(tmp / "bench.db"),
        "memory+sqlite": lambda: TieredStore(MemoryStore(), SqliteStore(tmp / "tiered.db")),
        "redis": lambda: RedisStore(REDIS_URL, prefix=f"atwhois-bench-{uuid.uuid4().hex}:"),
    }
    for name, make in stores.items():
        store = make()
        async with CachedResolver(Resolver(devnet.config()), store) as cached:
            await rate(cached.lookup, handles, len(handles), 32)
            hits = await rate(cached.lookup, handles, lookups, 64)
            stats = await cached.stats()
            assert stats.get("miss", 0) == len(handles), stats
            for handle in handles:
                await cached.purge(handle)
        print(
            f"cached lookups, {name:<14} over {len(handles):,} identities {hits:10,.0f} "
            f"lookups/s   x{hits / uncached:,.0f} uncached"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench cache", description=__doc__)
    parser.add_argument("--lookups", type=int, default=20000)
    parser.add_argument("--identities", type=int, default=2000)
    args = parser.parse_args(argv)
    handles = [world.bulk_host(i) for i in range(args.identities)]
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-cache-bench-") as tmp,
        running_devnet(Path(tmp), bulk=args.identities) as devnet,
    ):
        asyncio.run(run(devnet, handles, args.lookups, Path(tmp)))
