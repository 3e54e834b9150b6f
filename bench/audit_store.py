"""The audit store over many runs of a large watch-list, on SQLite and on PostgreSQL: its
size after each run as a ratio to its size after the first (retention: an identity that
did not change costs one row), and the rate at which runs record their checks, against
the bare insert of the same rows in the same run (what a store keeping every check does).

The checks are scripted (the lookups are `bench audit`'s); between two runs a share of the
identities changes (another PDS: an `info` finding, a change kept for ever).

    python -m bench audit-store [--identities 100000] [--runs 10] [--change 0.01]
                                [--backend sqlite --backend postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import tempfile
import time
from pathlib import Path

from atwhois.audit import Auditor, AuditStore, Check
from bench import Row
from devnet.identities import scripted, verified_check
from devnet.postgres import database

TABLES = ("watch", "runs", "checks", "findings", "streaks", "states", "outbox", "run_items")


def _did(identifier: str) -> str:
    return f"did:plc:{identifier.split('.')[0]:0>24}"


def size(store: AuditStore) -> int:
    """Bytes on disk: the SQLite file after a checkpoint (never a VACUUM), or PostgreSQL's
    tables and indexes after a plain VACUUM ANALYZE: what autovacuum does between two runs an hour
    apart (these are seconds apart), marking the old versions of rewritten rows free for
    the next run's. Neither gives space back to the system: the figure is what stays."""
    if not store.db.postgres:
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return Path(store.location).stat().st_size
    store.db.execute("VACUUM ANALYZE")
    names = ",".join(f"'{name}'" for name in TABLES)
    row = store.db.one(
        "SELECT sum(pg_total_relation_size(relname::regclass)) FROM pg_stat_user_tables "
        f"WHERE relname IN ({names})"
    )
    return int(row[0]) if row else 0


def bare_inserts(where: str, checks: list[Check]) -> float:
    """Seconds to insert one row per check, in one transaction (the baseline)."""
    store = AuditStore(where)
    started = time.perf_counter()
    with store.db.transaction():
        store.db.many(
            "INSERT INTO checks (run_id, identifier, checked_at, status, data) "
            "VALUES (?, ?, ?, ?, ?)",
            [(0, c.identifier, c.checked_at, c.status, c.encode()) for c in checks],
        )
    seconds = time.perf_counter() - started
    store.db.execute("DELETE FROM checks WHERE run_id = 0")
    store.close()
    return seconds


def measure(backend: str, identities: int, runs: int, change: float) -> list[Row]:
    names = [f"u{i:07d}.bench.test" for i in range(identities)]
    world = {name: verified_check(name, _did(name), "https://pds-a.test") for name in names}
    rng = random.Random(7)
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-audit-store-") as folder,
        database(backend, Path(folder), "atwhois_bench_audit") as where,
    ):
        bare = bare_inserts(where, list(world.values()))
        store = AuditStore(where)
        store.watch_import((name, None) for name in names)
        auditor = Auditor(None, store, check=scripted(world), concurrency=64)  # type: ignore[arg-type]
        sizes, rates = [], []
        print(f"{backend}: {identities:,} identities, {runs} runs, {change:.1%} changing each run")
        for number in range(1, runs + 1):
            started = time.perf_counter()
            report = asyncio.run(auditor.run())
            seconds = time.perf_counter() - started
            rates.append(report.total / seconds)
            sizes.append(size(store))
            print(
                f"  run {number:2}: {report.total / seconds:8,.0f} identities/s   "
                f"{sizes[-1] / 2**20:8.1f} MiB   x{sizes[-1] / sizes[0]:.2f} of run 1   "
                f"{sizes[-1] / identities:6.0f} B per identity   findings {dict(report.findings)}"
            )
            for name in rng.sample(names, int(identities * change)):
                moved = world[name].pds != "https://pds-a.test"
                world[name] = dataclasses.replace(
                    world[name], pds="https://pds-a.test" if moved else "https://pds-b.test"
                )
        rows_kept = store.db.one("SELECT count(*) FROM checks")
        print(
            f"  checks kept: {rows_kept[0] if rows_kept else 0:,} for {identities:,} identities "
            f"over {runs} runs"
        )
        print(f"  bare insert of one row per check: {identities / bare:,.0f} rows/s")
        store.close()
    return [
        Row(
            f"audit store ({backend}): size after {runs} runs",
            sizes[-1] / 2**20,
            sizes[0] / 2**20,
            "after 1 run (target x2)",
            "MiB",
            True,
        ),
        Row(
            f"audit store ({backend}): identities/s recorded",
            sum(rates) / len(rates),
            identities / bare,
            "bare insert of the rows",
            "/s",
        ),
    ]


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench audit-store", description=__doc__)
    parser.add_argument("--identities", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--change", type=float, default=0.01, help="share changing per run")
    parser.add_argument("--backend", action="append", choices=("sqlite", "postgresql"))
    args = parser.parse_args(argv)
    rows: list[Row] = []
    for backend in args.backend or ["sqlite", "postgresql"]:
        rows += measure(backend, args.identities, args.runs, args.change)
    return rows
