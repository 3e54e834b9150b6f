"""did:plc verification throughput, against the raw signature-verify rate measured in the
same run, and the peak memory of a streaming export check.

    python -m bench plc [--dids 20000] [--ops-per-did 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import coincurve
import orjson
from coincurve.ecdsa import cdata_to_der, deserialize_compact

from atwhois.foundation.pool import default_workers
from atwhois.resolver.keys import parse_did_key
from atwhois.resolver.plc import replay
from atwhois.resolver.plc.audit import parse_time
from atwhois.resolver.plc.encoding import cid_of, dag_cbor, unsigned, unsigned_dag_cbor
from atwhois.resolver.plc.operation import parse_operation
from atwhois.resolver.plc.signature import _verifier, decode_signature, verify
from bench import Row
from bench.child import Measured, run_cli
from devnet.synthetic_plc import write_export

Clock = Callable[[], float]


def raw_verify_rate(
    entries: list[dict[str, Any]], count: int = 20000, clock: Clock = time.perf_counter
) -> tuple[float, float]:
    """libsecp256k1 alone (keys parsed, signatures converted beforehand), and atwhois's
    `verify` (strict low-S check, cached keys), on the same signatures, by `clock`."""
    cases = []
    # genesis ops: signed by their first rotation key (a later op may be another key's)
    genesis = [entry for entry in entries if entry["operation"].get("prev") is None]
    for entry in genesis[:count]:
        op = entry["operation"]
        message, sig = dag_cbor(unsigned(op)), decode_signature(op["sig"])
        cases.append((op["rotationKeys"][0], message, sig))
    raw = [
        (
            coincurve.PublicKey(parse_did_key(did_key).compressed),
            message,
            cdata_to_der(deserialize_compact(sig)),
        )
        for did_key, message, sig in cases
    ]
    started = clock()
    assert all(key.verify(der, message) for key, message, der in raw)
    raw_rate = len(raw) / (clock() - started)
    started = clock()
    assert all(verify(did_key, message, sig) for did_key, message, sig in cases)
    ours = len(cases) / (clock() - started)
    return raw_rate, ours


def library_floor_rate(
    lines: list[bytes], signers: dict[str, str], *, parse: bool, clock: Clock = time.perf_counter
) -> float:
    """Ops/s of the library calls each op needs, and nothing else: the JSON parse and its
    duplicate-key check, the DAG-CBOR encoding, the CID, the signature decoding, the
    unsigned bytes and one verification by the key known to have signed it. No rule is
    checked and nothing is kept: what a replay in Python could reach if its own logic cost
    nothing. With `parse`, also the two readings every rule starts from: the op's shape
    (`parse_operation`, P-OP-1..3) and its time (`parse_time`, RFC 3339)."""
    gc.disable()
    started = clock()
    for line in lines:
        entry = orjson.loads(line)
        orjson.dumps(entry)
        op = entry["operation"]
        if parse:
            parse_operation(op)
            parse_time(entry["createdAt"])
        encoded = dag_cbor(op)
        cid_of(encoded)
        signature = decode_signature(op["sig"])
        assert verify(signers[entry["cid"]], unsigned_dag_cbor(encoded, op), signature)
    rate = len(lines) / (clock() - started)
    gc.enable()
    return rate


def cpu_view(
    entries: list[dict[str, Any]],
    lines: list[bytes],
    signers: dict[str, str],
    alone: Measured,
    spread: Measured,
    workers: int,
) -> None:
    """The run's figures in CPU time, which neighbours on a shared machine change little
    (in wall time they take the cores the workers wait for, and the raw rate is measured
    on one core while the workers need all of them): microseconds of CPU an op, and what
    `workers` processes would reach on cores of their own, with the main process beside
    them. The ceiling is the library calls alone (`library_floor_rate`), each did:key
    parsed once as a replay must: no Python replay can go below it."""
    raw, _ = raw_verify_rate(entries, clock=time.process_time)
    _verifier.cache_clear()  # every key parsed once, as in a fresh replay
    floor = library_floor_rate(lines, signers, parse=True, clock=time.process_time)
    ops = len(lines)
    one = alone.cpu_seconds / ops * 1e6
    main = spread.own_cpu_seconds / ops * 1e6
    per_worker = (spread.cpu_seconds - spread.own_cpu_seconds) / ops * 1e6
    cores = max(workers, 1)
    own_cores = ops / (spread.cpu_seconds / cores)  # every process's CPU spread over the cores
    print(
        f"in CPU time (us an op): raw verify {1e6 / raw:.1f}, library calls alone {1e6 / floor:.1f}"
    )
    print(
        f"  verify-export: one process {one:.1f}; {workers} workers {per_worker:.1f} in them "
        f"and {main:.1f} in the main process"
    )
    print(
        f"  on {cores} cores of their own: {own_cores:,.0f} ops/s, {own_cores / raw:.2f} of one "
        f"core's raw rate (ceiling at the library calls alone: {cores * floor / raw:.2f})"
    )


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench plc", description=__doc__)
    parser.add_argument("--dids", type=int, default=20000)
    parser.add_argument("--ops-per-did", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="atwhois-plc-bench-") as tmp:
        small, large = Path(tmp) / "small.jsonl", Path(tmp) / "large.jsonl"
        started = time.perf_counter()
        ops = write_export(large, args.dids, args.ops_per_did)
        small_ops = write_export(small, args.dids, 2)
        print(
            f"synthetic K-256 exports: {ops:,} and {small_ops:,} ops over {args.dids:,} DIDs "
            f"(generated in {time.perf_counter() - started:.1f}s)"
        )
        entries = [json.loads(line) for line in large.open()]

        raw, ours = raw_verify_rate(entries)
        logs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for entry in entries:
            logs[entry["did"]].append(entry)
        started = time.perf_counter()
        audits = [replay(did, log) for did, log in logs.items()]
        replay_rate = len(entries) / (time.perf_counter() - started)
        assert all(audit.valid for audit in audits)
        signers = {op.cid: key for audit in audits for op in audit.ops if (key := op.signer_key)}
        lines = large.read_bytes().splitlines()
        floor = library_floor_rate(lines, signers, parse=False)
        parsed_floor = library_floor_rate(lines, signers, parse=True)
        print(f"raw libsecp256k1 verify         {raw:9,.0f} /s")
        print(f"atwhois verify, first use of key {ours:9,.0f} /s")
        print(
            f"audit-log replay, whole logs     {replay_rate:9,.0f} ops/s   "
            f"ratio to raw verify {replay_rate / raw:.2f}"
        )
        print(
            f"library calls alone, per op      {floor:9,.0f} ops/s   "
            f"ratio to raw verify {floor / raw:.2f} (no rule checked: the most a replay "
            "in Python could reach)"
        )
        print(
            f"  and the op's parsing         {parsed_floor:9,.0f} ops/s   "
            f"ratio to raw verify {parsed_floor / raw:.2f} (shape and time read, still no rule "
            "checked)"
        )

        empty = Path(tmp) / "empty.jsonl"
        empty.write_text("")
        one = ["--workers", "0"]
        baseline = run_cli(["plc", "verify-export", str(empty), *one]).peak_mib
        small_run = run_cli(["plc", "verify-export", str(small), *one])
        workers = default_workers()
        cores = max(workers, 1)
        # The machine's speed drifts by 10-20 % over a minute: each round measures the raw
        # rate just before and just after its two runs, and is judged against their mean;
        # the round with the median ratio is reported.
        print("verify-export (streaming, incl. JSON parsing and process start):")
        rounds: list[tuple[float, float, float, float]] = []  # raw, one process, workers, RSS
        runs: list[tuple[Measured, Measured]] = []
        for number in range(1, args.rounds + 1):
            before, _ = raw_verify_rate(entries)
            large_run = run_cli(["plc", "verify-export", str(large), *one])
            parallel = run_cli(["plc", "verify-export", str(large), "--workers", str(workers)])
            runs.append((large_run, parallel))
            after, _ = raw_verify_rate(entries)
            raw = (before + after) / 2
            alone, spread = ops / large_run.seconds, ops / parallel.seconds
            rounds.append((raw, alone, spread, large_run.peak_mib))
            print(
                f"  round {number}: raw verify {before:,.0f} then {after:,.0f}/s; {ops:,} ops at "
                f"{alone:,.0f}/s in one process (ratio {alone / raw:.2f}), {spread:,.0f}/s "
                f"with {workers} workers (ratio per core {spread / raw / cores:.2f})"
            )
        middle = (len(rounds) - 1) // 2
        raw, alone, _, rss = sorted(rounds, key=lambda r: r[1] / r[0])[middle]
        raw_spread, _, spread, _ = sorted(rounds, key=lambda r: r[2] / r[0])[middle]
        print(f"  {small_ops:>9,} ops  {small_ops / small_run.seconds:9,.0f} ops/s   one process")
        print(
            f"  median round: one process ratio to raw verify {alone / raw:.2f}; "
            f"{workers} workers ratio per core {spread / raw_spread / cores:.2f}"
        )
        print(
            f"  peak RSS: {small_run.peak_mib:.0f} MiB for {small_ops:,} ops, {rss:.0f} MiB for "
            f"{ops:,} ops, same DIDs (an empty export: {baseline:.0f} MiB)"
        )
        least = min(runs, key=lambda run: run[0].cpu_seconds)[0]  # the least disturbed
        cpu_view(
            entries,
            lines,
            signers,
            least,
            min(runs, key=lambda run: run[1].cpu_seconds)[1],
            workers,
        )
    return [
        Row(
            "plc verify-export, one process",
            alone,
            raw,
            "raw libsecp256k1, one core",
            "ops/s",
        ),
        # per core, as the target reads: against the raw rate of as many cores as workers
        Row(
            f"plc verify-export, {workers} workers",
            spread,
            raw_spread * cores,
            f"raw libsecp256k1, {cores} cores",
            "ops/s",
        ),
    ]
