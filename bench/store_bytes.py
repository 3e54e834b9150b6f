"""What a cached identity costs in each store, and how fast a lookup reads it back: the
compact store (issue 69) against the information it holds, and its lookups against the
store as it was before (each entry packed whole), in the same run.

Each store is filled with `--identities` identities of the network-shaped world
(`devnet.shaped_entries`: did:plc with plc.directory's documents, handles under PDS
domains, a minority on domains of their own, a few did:web), their two entries each, through
its own write path (`put`), in a process of its own:

- sqlite: the file's pages once filled (its WAL checkpointed in);
- memory: the process's RSS growth while the memory tier fills (a library's store);
- redis: `used_memory` growth of a Redis server of the run's own (nothing else writes it),
  set as the deployments set theirs (`devnet.redis_server.LISTPACK`).

The entries are made once, by every core at once (`--entries` keeps them for a later run); a
Redis is filled by `_WRITERS["redis"]` processes at once, each a daemon of a fleet writing its
share (one Python client, 64 writes in flight, keeps a Redis server a third busy).

Then `--lookups` lookups of identities chosen at random (by handle, `CachedResolver.lookup`,
every one a hit; SQLite and Redis behind the daemon's memory tier of its default size),
timed one by one: p50 and p99. The baseline of the bytes is the identity's information
content in binary: its DID (15 bytes for a did:plc), handle, PDS endpoint (an index among
thousands: 2 bytes), signing key (33), status (1) and two times (4 each).

    python -m bench store [--identities 1000000] [--lookups 20000] [--stores sqlite,memory,redis]
                          [--forms compact,present] [--entries DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from atwhois.cache import CachedResolver, MemoryStore, SqliteStore, Store, TieredStore
from atwhois.cache.stores.redis import RedisStore
from atwhois.resolver import Config, Resolver
from bench import Row
from bench.memory_load import rss_mib
from devnet.redis_server import RedisServer
from devnet.shaped_entries import shaped

FORMATS = ("compact", "present")  # compact; each entry packed whole (before issue 69)
STORES = ("sqlite", "memory", "redis")
_RECORD = struct.Struct(">HId")  # key length, value length, expiry
# writes under way at once, as a daemon's requests make them (Redis: each a round trip)
_AT_ONCE = {"sqlite": 1, "memory": 1, "redis": 64}  # within its pool of 100
# processes writing at once: the memory tier's RSS is one process's; SQLite has one writer
_WRITERS = {"sqlite": 1, "memory": 1, "redis": 2}


def information(index: int) -> int:
    """The bytes of what a resolveIdentity answer needs about identity `index`, in binary."""
    identity = shaped(index)
    did = 15 if identity.did.startswith("did:plc:") else len(identity.did)
    return did + len(identity.handle.encode()) + 2 + len(identity.key) + 1 + 2 * 4


def sqlite_bytes(path: Path) -> int:
    """The pages a SQLite file uses (its WAL checkpointed in): what the cache costs on disk."""
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = (
            db.execute("PRAGMA page_count").fetchone()[0]
            - db.execute("PRAGMA freelist_count").fetchone()[0]
        )
        return int(pages * db.execute("PRAGMA page_size").fetchone()[0])


def write_entries(path: Path, identities: int, form: str) -> float:
    """The identities' entries as `form` keeps them, in a file the fills read, made by every
    core at once (a part each, joined in order); their mean size in bytes per identity."""
    cores = os.cpu_count() or 1
    bounds = [identities * part // cores for part in range(cores + 1)]
    parts = [
        (path.with_suffix(f".part{part}"), bounds[part], bounds[part + 1], form)
        for part in range(cores)
    ]
    with multiprocessing.get_context("spawn").Pool(cores) as pool:
        total = sum(pool.map(_write_part, parts))
    with path.open("wb") as out:
        for part_path, *_ in parts:
            with part_path.open("rb") as part_file:
                shutil.copyfileobj(part_file, out, 1 << 20)
            part_path.unlink()
    return total / identities


def _write_part(part: tuple[Path, int, int, str]) -> int:
    path, start, end, form = part
    total = 0
    with path.open("wb") as out:
        for index in range(start, end):
            for key, entry in shaped(index).entries:
                value = entry.encode(key) if form == "compact" else entry.encode_whole()
                name = key.encode()
                out.write(_RECORD.pack(len(name), len(value), entry.stale_until) + name + value)
                total += len(value)
    return total


def read_entries(path: Path) -> Iterator[tuple[str, bytes, float]]:
    with path.open("rb") as source:
        while head := source.read(_RECORD.size):
            key_size, value_size, expires = _RECORD.unpack(head)
            yield source.read(key_size).decode(), source.read(value_size), expires


# --- one store, one form: in a process of its own -----------------------------------------


async def fill_and_look_up(
    store_name: str, entries: Path, identities: int, lookups: int, work: Path, redis_url: str
) -> dict[str, float]:
    gc.collect()
    rss, used = rss_mib(os.getpid()), 0
    store: Store
    if store_name == "memory":
        # the whole world held, and room for the decoded entries the lookups read
        store = MemoryStore(identities * 4096, decoded_share=0.5)
    elif store_name == "sqlite":
        store = SqliteStore(work / "store.db")
    else:
        from redis import Redis

        used = int(Redis.from_url(redis_url).info("memory")["used_memory"])
        store = _redis_store(redis_url)
    started = time.perf_counter()
    writers = _WRITERS[store_name]
    if writers == 1:
        await fill(store, entries, _AT_ONCE[store_name])
    else:  # the others as a fleet's daemons, each with its own client
        await store.close()
        with multiprocessing.get_context("spawn").Pool(writers) as pool:
            pool.map(
                _fill_share, [(entries, redis_url, share, writers) for share in range(writers)]
            )
        store = _redis_store(redis_url)
    filled = time.perf_counter() - started
    gc.collect()
    if store_name == "memory":
        size = (rss_mib(os.getpid()) - rss) * 1024 * 1024
    elif store_name == "sqlite":
        await store.close()
        size = sqlite_bytes(work / "store.db")
        store = SqliteStore(work / "store.db")
    else:
        from redis import Redis

        size = int(Redis.from_url(redis_url).info("memory")["used_memory"]) - used
    tier = store if isinstance(store, MemoryStore) else TieredStore(MemoryStore(), store)
    chosen = random.Random(1).sample(range(identities), min(lookups, identities))
    times: list[float] = []
    async with CachedResolver(Resolver(Config(dev=True)), tier) as cached:  # .test names
        for index in chosen:
            handle = shaped(index).handle
            began = time.perf_counter()
            identity = await cached.lookup(handle)
            times.append(time.perf_counter() - began)
            if identity.cache is None or not identity.cache.cached:
                raise RuntimeError(
                    f"{handle}: not from the store: {identity.status} {identity.error}"
                )
    times.sort()
    return {
        "bytes": size / identities,
        "p50_ms": times[len(times) // 2] * 1000,
        "p99_ms": times[int(len(times) * 0.99)] * 1000,
        "fill_s": filled,
    }


async def fill(store: Store, entries: Path, at_once: int, share: int = 0, shares: int = 1) -> None:
    """Write every `shares`-th entry of the file from the `share`-th through the store's
    `put`, `at_once` writes under way at a time."""
    batch: list[Any] = []
    for number, (key, value, expires) in enumerate(read_entries(entries)):
        if number % shares != share:
            continue
        batch.append(store.put(key, value, expires))
        if len(batch) == at_once:
            await asyncio.gather(*batch)
            batch.clear()
    await asyncio.gather(*batch)


def _redis_store(url: str) -> RedisStore:
    # a fill of millions of keys meets the server's rehashing pauses: a command may wait
    # longer than a daemon's (0.5 s) without being an outage
    return RedisStore(url, prefix="s:", timeout=5.0)


def _fill_share(job: tuple[Path, str, int, int]) -> None:
    """One writer of a fleet filling a Redis: its share of the entries, its own client."""
    entries, url, share, shares = job

    async def run() -> None:
        store = _redis_store(url)
        await fill(store, entries, _AT_ONCE["redis"], share, shares)
        await store.close()

    asyncio.run(run())


def child(argv: list[str]) -> None:
    store_name, entries, identities, lookups, work, redis_url = argv
    result = asyncio.run(
        fill_and_look_up(
            store_name, Path(entries), int(identities), int(lookups), Path(work), redis_url
        )
    )
    print(json.dumps(result))


def measured(
    store_name: str, entries: Path, identities: int, lookups: int, work: Path, redis_url: str
) -> dict[str, float]:
    out = subprocess.run(
        [
            *(sys.executable, "-m", "bench.store_bytes", store_name, str(entries)),
            *(str(identities), str(lookups), str(work), redis_url),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{store_name}: {out.stderr[-3000:]}")
    result: dict[str, float] = json.loads(out.stdout.splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench store", description=__doc__)
    parser.add_argument("--identities", type=int, default=1_000_000)
    parser.add_argument("--lookups", type=int, default=20_000)
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument(
        "--forms",
        default=",".join(FORMATS),
        help="compact (this code's), present (each entry packed whole: the lookups' baseline)",
    )
    parser.add_argument(
        "--entries",
        type=Path,
        help="a folder where the entries made are kept and found again by a later run of the "
        "same count (at 10M they take half an hour to make; made by this checkout's codec: "
        "empty it when the codec changes)",
    )
    args = parser.parse_args(argv)
    stores = [name for name in args.stores.split(",") if name]
    forms = [form for form in args.forms.split(",") if form]
    n = args.identities
    information_bytes = sum(information(i) for i in range(min(n, 100_000))) / min(n, 100_000)
    results: dict[tuple[str, str], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="atwhois-store-bench-") as name:
        tmp = Path(name)
        for form in forms:
            kept = args.entries or tmp
            kept.mkdir(parents=True, exist_ok=True)
            entries = kept / f"{form}-{n}.entries"
            started = time.perf_counter()
            if not entries.exists():
                made = entries.with_suffix(".making")
                mean = write_entries(made, n, form)
                made.rename(entries)  # whole, or not there: a run stopped makes them again
                how = f"made in {time.perf_counter() - started:.0f} s"
            else:
                mean = sum(len(value) for _, value, _ in read_entries(entries)) / n
                how = f"found in {entries}"
            print(f"{form}: {n:,} identities' entries {how}, {mean:,.0f} B of values per identity")
            for store_name in stores:
                work = tmp / f"{form}-{store_name}"
                work.mkdir()
                with RedisServer(work) as redis:
                    result = measured(store_name, entries, n, args.lookups, work, redis.url)
                results[form, store_name] = result
                print(
                    f"  {store_name:<7} {result['bytes']:8,.0f} B per identity   lookups p50 "
                    f"{result['p50_ms']:.3f} ms p99 {result['p99_ms']:.3f} ms   "
                    f"(filled in {result['fill_s']:.0f} s)",
                    flush=True,
                )
            if args.entries is None:
                entries.unlink()
    print(f"information content: {information_bytes:,.1f} B per identity")
    rows = []
    for store_name in stores:
        if ("compact", store_name) not in results:
            continue
        new, old = results["compact", store_name], results.get(("present", store_name))
        rows.append(
            Row(
                f"store: {store_name} bytes per identity",
                new["bytes"],
                information_bytes,
                "information content",
                "B",
                True,
            )
        )
        if old is None:  # the baseline not run
            continue
        rows.append(
            Row(
                f"store: {store_name} lookup p99",
                new["p99_ms"],
                old["p99_ms"],
                "the present store",
                "ms",
                True,
            )
        )
    return rows


if __name__ == "__main__":
    child(sys.argv[1:])
