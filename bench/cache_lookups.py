"""In-process cached lookups per store, against uncached resolution in the same run, and the
bytes a binding costs in the memory tier.

    python -m bench cache [--lookups 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.cold_resolution import DNS_HANDLES
from cache import CachedResolver, MemoryStore, SqliteStore, Store, TieredStore
from cache.stores.redis import RedisStore
from resolver import Resolver
from tests.devnet.network import DevnetState, running_devnet

HANDLES = DNS_HANDLES  # verified identities of the test network
REDIS_URL = "redis://127.0.0.1:6379/0"


async def rate(lookup: Callable[[str], object], count: int, concurrency: int) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one(handle: str) -> None:
        async with gate:
            await lookup(handle)  # type: ignore[misc]

    started = time.perf_counter()
    await asyncio.gather(*(one(HANDLES[i % len(HANDLES)]) for i in range(count)))
    return count / (time.perf_counter() - started)


async def memory_tier_bytes(devnet: DevnetState) -> tuple[float, float, float]:
    """Serialized bytes per handle binding and per document, and what one binding costs the
    process in the memory tier (tracemalloc, 10,000 copies of a real entry)."""
    store = MemoryStore()
    async with CachedResolver(Resolver(devnet.config()), store) as cached:
        for handle in HANDLES:
            await cached.lookup(handle)
        sizes = {key: len(value) for key, (value, _) in store._entries.items()}
        sample = await store.get("h:alice.test")
    handles = [n for k, n in sizes.items() if k.startswith("h:")]
    documents = [n for k, n in sizes.items() if k.startswith("d:")]
    assert sample is not None
    tier = MemoryStore(max_entries=20_000, max_bytes=1 << 30)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(10_000):
        await tier.put(f"h:user{i:05d}.example.com", bytearray(sample)[:], time.time() + 3600)
    per_binding = (tracemalloc.get_traced_memory()[0] - before) / 10_000
    tracemalloc.stop()
    return sum(handles) / len(handles), sum(documents) / len(documents), per_binding


async def run(devnet: DevnetState, lookups: int, tmp: Path) -> None:
    async with Resolver(devnet.config()) as plain:
        await rate(plain.lookup, 100, 32)  # warm connections
        uncached = await rate(plain.lookup, 1000, 32)
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
            for handle in HANDLES:
                await cached.lookup(handle)
            hits = await rate(cached.lookup, lookups, 64)
            stats = await cached.stats()
            assert stats.get("miss", 0) == len(HANDLES), stats
            for handle in HANDLES:
                await cached.purge(handle)
        print(
            f"cached lookups, {name:<14}                       {hits:10,.0f} lookups/s   "
            f"x{hits / uncached:,.0f} uncached"
        )
    handle_bytes, document_bytes, per_binding = await memory_tier_bytes(devnet)
    print(
        f"memory tier: {handle_bytes:.0f} B per handle binding and {document_bytes:.0f} B per "
        f"DID document serialized; {per_binding:.0f} B per binding in the process"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench cache", description=__doc__)
    parser.add_argument("--lookups", type=int, default=20000)
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-cache-bench-") as tmp,
        running_devnet(Path(tmp)) as devnet,
    ):
        asyncio.run(run(devnet, args.lookups, Path(tmp)))
