"""`python -m bench [NAME] [options]`: run one benchmark, or all of them."""

from __future__ import annotations

import sys
from collections.abc import Callable

from bench import (
    Row,
    audit_run,
    audit_store,
    cache_lookups,
    cold_resolution,
    cold_start,
    dnssec_attack,
    follow_load,
    hit_cost,
    idle_connections,
    label_verify,
    memory_load,
    plc_mirror,
    plc_verify,
    read_after_write,
    record_proofs,
    refused_tokens,
    replay_flood,
    serve_load,
    slow_readers,
    startup,
    store_bytes,
    stream_decode,
    verify_tokens,
)

BENCHMARKS: dict[str, Callable[[list[str]], list[Row] | None]] = {
    "cold": cold_resolution.main,
    "coldstart": cold_start.main,
    "dnssec": dnssec_attack.main,
    "plc": plc_verify.main,
    "mirror": plc_mirror.main,
    "mirror-raw": read_after_write.main,
    "cache": cache_lookups.main,
    "serve": serve_load.main,
    "hits": hit_cost.main,
    "store": store_bytes.main,
    "audit": audit_run.main,
    "audit-store": audit_store.main,
    "memory": memory_load.main,
    "startup": startup.main,
    "stream": stream_decode.main,
    "follow": follow_load.main,
    "idle": idle_connections.main,
    "slow": slow_readers.main,
    "verify": verify_tokens.main,
    "refused": refused_tokens.main,
    "replay": replay_flood.main,
    "records": record_proofs.main,
    "labels": label_verify.main,
}


def main() -> None:
    args = sys.argv[1:]
    rows: list[Row] = []
    if args and args[0] in BENCHMARKS:
        rows += BENCHMARKS[args[0]](args[1:]) or []
    else:
        for name, run in BENCHMARKS.items():
            print(f"=== {name} ===")
            rows += run(args) or []
    if not rows:
        return
    print("=== summary: atwhois against the baseline of the same run ===")
    for row in rows:
        print(row.line())


if __name__ == "__main__":
    main()
