"""The PLC mirror: backfill from a synthetic directory (signed for real), verification
included, on SQLite and on PostgreSQL; where a backfill's time goes; and the read path,
`GET /{did}` at 100 connections, against the bare aiohttp handler (`bench serve`'s baseline).

    python -m bench mirror [--dids 200000] [--ops-per-did 5] [--seconds 10]
    python -m bench mirror --scale [--sizes 1000000,3000000,10000000] [--skip-postgres]

`--scale`: the curve (issue 33) over directories of the real one's shape
(`devnet.synthetic_plc.directory_lines`, `seq` format), each size alone: backfill ops/s and
CPU per op with a worker per core, peak RSS of the mirror's main process (and of it with
its workers, each counted at the largest one's peak), disk bytes per op (the SQLite file
after a checkpoint), and `GET /{did}` over DIDs drawn uniformly from the whole mirror
against the bare handler.

The upstream is a small server in a child process that pages the export file as the
reference directory does (`/export?after=<createdAt>`, JSON Lines). The synthetic export is
made once and kept in the user's cache directory (a million ops take a minute and a half to
sign).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import functools
import itertools
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from atwhois.foundation.pool import default_workers
from atwhois.mirror.backends import SqliteMirrorStore
from atwhois.mirror.records import Batch
from atwhois.mirror.replica import Verifier
from atwhois.resolver.plc.encoding import dag_cbor, unsigned
from atwhois.resolver.plc.export import export_entry
from atwhois.resolver.plc.signature import decode_signature, verify
from bench.child import run_cli
from bench.serve_load import free_port, require_wrk, rotate_script, wait_for, wrk
from devnet.atwhois import ATWHOIS
from devnet.postgres import scratch_database
from devnet.synthetic_plc import directory_lines, export_lines


def cache_folder() -> Path:
    """Where benchmarks keep what they made once (in the user's cache directory)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = base / "atwhois" / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def cache_file(name: str) -> Path:
    return cache_folder() / name


def _made_once(name: str, lines: Callable[[], Iterator[str]]) -> Path:
    """The export file `name` in the cache, written from `lines` the first time."""
    path = cache_file(name)
    if not path.exists():
        started = time.perf_counter()
        partial = path.with_suffix(".partial")
        with partial.open("w") as out:
            for line in lines():
                out.write(line + "\n")
        partial.rename(path)
        print(f"  (made {path} in {time.perf_counter() - started:.0f} s)")
    return path


def _export_file(dids: int, ops_per_did: int) -> Path:
    made = functools.partial(export_lines, dids, ops_per_did)
    return _made_once(f"plc-export-{dids}x{ops_per_did}.jsonl", made)


_BLOCK = 1024  # lines between two entries of the upstream's index


class ExportFile:
    """An export file's lines by position, read from disk through a sparse index: the
    offset of every `_BLOCK`-th line (and, for legacy lines, its `createdAt`). Held in
    memory whole, the 10M file took 7.6 GB in the upstream alone, and 150M would take 110."""

    def __init__(self, path: str) -> None:
        self._file = Path(path).open("rb")  # noqa: SIM115 (open while the upstream serves)
        self.by_seq = b'"seq":' in self._file.readline()
        self._offsets: list[int] = []
        self._times: list[str] = []
        self._file.seek(0)
        offset = 0
        for number, line in enumerate(self._file):
            if number % _BLOCK == 0:
                self._offsets.append(offset)
                if not self.by_seq:
                    self._times.append(json.loads(line)["createdAt"])
            offset += len(line)

    def lines(self, start: int, count: int) -> list[bytes]:
        """Lines `start` to `start + count` (0-based; fewer at the end of the file)."""
        block, skip = divmod(start, _BLOCK)
        if block >= len(self._offsets):
            return []
        self._file.seek(self._offsets[block])
        read = itertools.islice(self._file, skip, skip + count)
        return [line.rstrip(b"\n") for line in read]

    def first_after(self, after: str) -> int:
        """The position of the first line after `after`: a seq (line N has seq N), or a
        createdAt for legacy lines; the start for anything else."""
        if self.by_seq:
            return int(after) if after.isdigit() else 0
        if not after or after.isdigit():
            return 0
        block = max(bisect.bisect_right(self._times, after) - 1, 0)
        start = block * _BLOCK
        # the block's first line is not after `after` (or it is the first block): the line
        # sought is in the block, or it is the next block's first
        block_lines = self.lines(start, _BLOCK)
        for number, line in enumerate(block_lines):
            if json.loads(line)["createdAt"] > after:
                return start + number
        return start + len(block_lines)


def serve_export(path: str, port: int) -> None:
    """The upstream: the export file, paged by `after` (a createdAt, or a seq for a file of
    `seq` lines, whose line N has seq N) and `count`."""
    from aiohttp import web

    export_file = ExportFile(path)

    async def export(request: web.Request) -> web.Response:
        count = min(int(request.query.get("count", "1000")), 1000)
        start = export_file.first_after(request.query.get("after", ""))
        return web.Response(
            body=b"\n".join(export_file.lines(start, count)), content_type="application/jsonlines"
        )

    app = web.Application()
    app.router.add_get("/export", export)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def backfill(upstream: str, db: str, workers: int | None) -> dict[str, float]:
    args = ["plc", "mirror", "--once", "--json", "--plc-url", upstream, "--plc-db", db]
    if workers is not None:
        args += ["--plc-mirror-workers", str(workers)]
    run = run_cli(args)
    # The mirror's main process and, at worst, each worker at the largest one's peak
    started = default_workers() if workers is None else workers
    summary = json.loads(run.stdout)
    return {
        "ops": summary["ops_applied"],
        "seconds": run.seconds,
        "ops_per_s": summary["ops_applied"] / run.seconds,
        "cpu_per_op_us": run.cpu_seconds / max(summary["ops_applied"], 1) * 1e6,
        "main_cpu_per_op_us": run.own_cpu_seconds / max(summary["ops_applied"], 1) * 1e6,
        "refused": sum(summary["rejected"].values()),
        # lookups of DIDs not in a worker's memory: new ones, and evicted ones rebuilt
        "created": summary["dids_created"],
        "rebuilt": summary["replays_rebuilt"],
        "peak_mib": run.peak_mib,
        "peak_all_mib": run.peak_mib + started * run.child_peak_mib,
    }


def _where_time_goes(path: Path, sample: int = 20_000) -> list[tuple[str, float]]:
    """One core, per op, on every op of the first DIDs of the export (about `sample` ops,
    genesis and later ops in their proportion): each stage alone."""
    lines: list[bytes] = []
    dids: set[bytes] = set()
    with path.open("rb") as source:
        for line in source:
            did = line[8:40]  # {"did":"did:plc:…" — the synthetic lines are compact
            if len(dids) < sample // 5 and did not in dids:
                dids.add(did)
            if did in dids:
                lines.append(line.rstrip(b"\n"))
    entries = [export_entry(line) for line in lines]
    started = time.perf_counter()
    for line in lines:
        export_entry(line)
    parse = time.perf_counter() - started
    cases = []
    for entry in entries:
        assert entry is not None
        op = entry["operation"]
        cases.append((op["rotationKeys"][0], dag_cbor(unsigned(op)), decode_signature(op["sig"])))
    for did_key, message, signature in cases:  # keys parsed once, as a DID's replay does
        verify(did_key, message, signature)
    started = time.perf_counter()
    for did_key, message, signature in cases:
        verify(did_key, message, signature)
    secp = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteMirrorStore(Path(tmp) / "stages.db")
        verifier = Verifier(store)
        batches = []
        started = time.perf_counter()
        for start in range(0, len(lines), 1000):
            verdicts, heads, _ = verifier.verify(list(enumerate(lines[start : start + 1000])))
            batch = Batch(heads=heads)
            for v in verdicts:
                batch.ops.append((v.did, v.cid, v.created_at, v.operation, v.signer))
            batches.append(batch)
        verifying = time.perf_counter() - started
        started = time.perf_counter()
        for batch in batches:
            store.write(batch)
        write = time.perf_counter() - started
        store.close()
    per_op = 1e6 / len(lines)
    return [
        ("verification, all of it (one core)", verifying * per_op),
        ("  of which JSON parsing of the line", parse * per_op),
        ("  of which the signature check (libsecp256k1)", secp * per_op),
        (
            "  of which the rest: op checks, DAG-CBOR, CID, replay",
            (verifying - parse - secp) * per_op,
        ),
        ("SQLite write (one transaction a page)", write * per_op),
    ]


# `bench serve`'s bare handler, answering a document as large as the mirror's (a loopback
# send costs by the byte) on a route that takes the same paths, so that wrk runs the same
# script for both (choosing a path per request costs wrk time too).
BARE_DOCUMENT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from aiohttp import web
    source = Path(sys.argv[2])
    async def handle(request):
        return web.Response(body=body, content_type="application/did+ld+json")
    app = web.Application()
    app.router.add_get("/{did}", handle)
    while not source.exists() or not source.stat().st_size:
        time.sleep(0.05)
    body = source.read_bytes()
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
""")


# The bare handler's rate moves by a third from one minute to the next on this shared machine
# (16,000 to 27,000 req/s within one run): the two are measured in turns, and the round with
# the median ratio is the figure.
READ_ROUNDS = 3


def _read_path(
    db: str, dids: list[str], connections: int, seconds: int
) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """wrk's (req/s, …, p99 ms) for the bare handler and for the mirror's `GET /{did}`, in
    the round whose ratio of the two is the median."""
    with tempfile.TemporaryDirectory() as tmp:
        _, script = rotate_script(Path(tmp), [f"/{did}" for did in dids])
        port = free_port()
        mirror = subprocess.Popen(
            [
                ATWHOIS,
                "plc",
                "mirror",
                "--plc-db",
                db,
                "--plc-url",
                "http://127.0.0.1:9",
                "--plc-mirror-interval",
                "3600",
                "--plc-mirror-workers",
                "0",
                "--listen",
                f"127.0.0.1:{port}",
            ],
            stderr=subprocess.DEVNULL,
        )
        bare_port = free_port()
        body = Path(tmp) / "document.json"
        bare = subprocess.Popen([sys.executable, "-c", BARE_DOCUMENT, str(bare_port), str(body)])
        try:
            wait_for(f"http://127.0.0.1:{port}/_health")
            body.write_bytes(httpx.get(f"http://127.0.0.1:{port}/{dids[0]}").content)
            wait_for(f"http://127.0.0.1:{bare_port}/{dids[0]}")
            assert len(httpx.get(f"http://127.0.0.1:{bare_port}/x").content) == body.stat().st_size
            wrk(f"http://127.0.0.1:{port}/", connections, 3, script=script)  # warm: every DID read
            print(f"read path, wrk 1 thread, {connections} connections, {seconds} s each:")
            rounds = []
            for _ in range(READ_ROUNDS):
                base = wrk(f"http://127.0.0.1:{bare_port}/", connections, seconds, script=script)
                ours = wrk(f"http://127.0.0.1:{port}/", connections, seconds, script=script)
                print(
                    f"  bare {base[0]:9,.0f} req/s, p99 {base[2]:6.2f} ms;   GET /{{did}} of "
                    f"{len(dids):,} DIDs {ours[0]:9,.0f} req/s, p99 {ours[2]:6.2f} ms;   "
                    f"ratio {ours[0] / base[0]:.2f}, p99 {ours[2] / base[2]:.2f}"
                )
                rounds.append((base, ours))
        finally:
            for child in (mirror, bare):
                child.terminate()
                child.wait()
    rounds.sort(key=lambda pair: pair[1][0] / pair[0][0])
    base, ours = rounds[len(rounds) // 2]
    print(f"  the median round: ratio {ours[0] / base[0]:.2f}, p99 {ours[2] / base[2]:.2f}")
    return base, ours


def _directory_file(ops: int) -> Path:
    """The real-shaped directory of `ops` operations, cut from a larger one already made:
    the generator's first lines do not depend on how many follow (`--scale` makes the
    largest first; tests/mirror/test_synthetic_directory.py holds the generator to it)."""
    prefix = "plc-directory-"
    made = {
        int(path.stem[len(prefix) :]): path
        for path in cache_folder().glob(f"{prefix}*.jsonl")
        if path.stem[len(prefix) :].isdigit()
    }
    larger = min((size for size in made if size > ops), default=None)
    if larger is None:
        lines = functools.partial(directory_lines, ops)
    else:
        lines = functools.partial(_first_lines, made[larger], ops)
    return _made_once(f"{prefix}{ops}.jsonl", lines)


def _first_lines(path: Path, count: int) -> Iterator[str]:
    with path.open() as source:
        for line in itertools.islice(source, count):
            yield line.rstrip("\n")


def _disk_bytes(db: str) -> int:
    """The SQLite file's size once its write-ahead log is folded in."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return Path(db).stat().st_size


def _postgres_bytes(url: str) -> int:
    """The database's size once vacuumed (dead rows of the DIDs' rewritten rows gone)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("VACUUM")
        row = connection.execute("SELECT pg_database_size(current_database())").fetchone()
    assert row is not None
    return int(row[0])


def _uniform_dids(path: Path, wanted: int) -> list[str]:
    """`wanted` DIDs drawn evenly from the whole export (not the last ones touched), none
    tombstoned (their 410 is not a document)."""
    dids, gone = [], set()
    with path.open() as source:
        for number, line in enumerate(source):
            if '"plc_tombstone"' in line:
                gone.add(json.loads(line)["did"])
            elif number % 97 == 0:
                dids.append(json.loads(line)["did"])
    step = max(1, len(dids) // wanted)
    return sorted(set(dids[::step]) - gone)[:wanted]


def _measured(
    ops: int,
    path: Path,
    upstream: str,
    connections: int,
    seconds: int,
    store: str,
    db: str,
    disk: Callable[[str], int],
) -> tuple[str, str, dict[str, float], float, float, float]:
    """One size on one store: the backfill, the disk it took, the read path; its row of
    the table, printed at once."""
    run = backfill(upstream, db, None)
    print(f"{ops:,} ops, {store}: {run}")
    per_op = disk(db) / max(run["ops"], 1)
    base, ours = _read_path(db, _uniform_dids(path, 10_000), connections, seconds)
    row = f"{ops:,}", store, run, per_op, ours[0] / base[0], ours[2] / base[2]
    print(f"row: {_scale_row(row)}", flush=True)  # a run stopped later keeps it
    return row


def scale(sizes: list[int], connections: int, seconds: int, skip_postgres: bool) -> None:
    rows = []
    for ops in sorted(sizes, reverse=True):  # the smaller ones are cut from the largest
        _directory_file(ops)
    for ops in sizes:
        path = _directory_file(ops)
        port = free_port()
        upstream = subprocess.Popen(
            [sys.executable, "-m", "bench.plc_mirror", str(path), str(port)]
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for(f"{url}/export?count=1")
            measure = functools.partial(_measured, ops, path, url, connections, seconds)
            with tempfile.TemporaryDirectory(prefix="atwhois-mirror-scale-") as tmp:
                rows.append(measure("SQLite", f"{tmp}/mirror.db", _disk_bytes))
            if not skip_postgres:
                with scratch_database("atwhois_bench") as pg:
                    rows.append(measure("PostgreSQL", pg, _postgres_bytes))
        finally:
            upstream.terminate()
            upstream.wait()
    print(
        "\n| ops | store | backfill ops/s | CPU/op (main process) | peak RSS, main (all, at most) "
        "| disk/op "
        "| GET /{did} vs bare | p99 vs bare | DIDs read from the store: new, rebuilt |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(_scale_row(row))


def _scale_row(row: tuple[str, str, dict[str, float], float, float, float]) -> str:
    """One row of the scale table (Markdown)."""
    size, store, run, per_op, ratio, p99 = row
    return (
        f"| {size} | {store} | {run['ops_per_s']:,.0f} | {run['cpu_per_op_us']:.0f} us "
        f"({run['main_cpu_per_op_us']:.0f} us) | "
        f"{run['peak_mib']:,.0f} MiB ({run['peak_all_mib']:,.0f} MiB) | {per_op:,.0f} B | "
        f"{ratio:.2f}x | {p99:.2f}x | {run['created']:,}, {run['rebuilt']:,} |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench mirror", description=__doc__)
    parser.add_argument("--dids", type=int, default=200_000)
    parser.add_argument("--ops-per-did", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--scale", action="store_true", help="the curve over real-shaped sizes")
    parser.add_argument("--sizes", default="1000000,3000000,10000000")
    args = parser.parse_args(argv)
    require_wrk()
    if args.scale:
        sizes = [int(size) for size in args.sizes.split(",")]
        scale(sizes, args.connections, args.seconds, args.skip_postgres)
        return
    path = _export_file(args.dids, args.ops_per_did)
    total = args.dids * args.ops_per_did
    print(f"synthetic directory: {total:,} ops over {args.dids:,} DIDs, K-256, 2% recoveries")
    print("where a backfill's time goes, per op, on all the ops of 4,000 DIDs:")
    for stage, micros in _where_time_goes(path):
        print(f"  {stage:54} {micros:7.1f} us")
    port = free_port()
    upstream = subprocess.Popen([sys.executable, "-m", "bench.plc_mirror", str(path), str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(f"{url}/export?count=1")
        with tempfile.TemporaryDirectory(prefix="atwhois-mirror-bench-") as tmp:
            db = f"{tmp}/mirror.db"
            runs = {"SQLite, one process": backfill(url, f"{tmp}/one.db", 0)}
            runs["SQLite, a worker per core"] = backfill(url, db, None)
            if not args.skip_postgres:
                with scratch_database("atwhois_bench") as pg:
                    runs["PostgreSQL, a worker per core"] = backfill(url, pg, None)
            print(
                "backfill, `atwhois plc mirror --once` (fetch, verify, store; "
                "CPU time of all its processes):"
            )
            for name, run in runs.items():
                print(
                    f"  {name:32} {run['ops']:>9,} ops in {run['seconds']:6.1f} s   "
                    f"{run['ops_per_s']:7,.0f} ops/s   {run['cpu_per_op_us']:5.0f} us CPU/op   "
                    f"refused {run['refused']}"
                )
            dids = sorted({json.loads(line)["did"] for line in path.open().readlines()[:50_000]})
            _read_path(db, dids[:10_000], args.connections, args.seconds)
    finally:
        upstream.terminate()
        upstream.wait()


if __name__ == "__main__":
    serve_export(sys.argv[1], int(sys.argv[2]))
