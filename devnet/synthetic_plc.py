"""A synthetic PLC directory export, signed for real (K-256, libsecp256k1) from fixed keys:
many DIDs whose operations interleave in time, as in `/export`, with a recovery now and
then. For the export tests and the verification benchmark."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path

from devnet import world
from devnet.plc_ops import Key, plc_operation
from resolver.plc.encoding import cid_of, dag_cbor, did_of_genesis

EPOCH = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)


def export_lines(dids: int, ops_per_did: int, *, recover_every: int = 50) -> Iterator[str]:
    """Round r emits op r of every DID; a round lasts 60 hours, so recoveries land inside
    the 72-hour window and older ops fall out of it. Every `recover_every`-th DID has its
    op 1 signed by the hot key (index 1) and nullified by op 2, signed by key 0."""
    seconds_per_op = 60 * 3600 / dids
    keys = [[Key(f"{d}/0"), Key(f"{d}/1")] for d in range(dids)]
    heads: list[tuple[str, str]] = []  # (did, cid of head)
    history: list[list[str]] = [[] for _ in range(dids)]
    clock = 0.0
    for round_ in range(ops_per_did):
        for d in range(dids):
            clock += seconds_per_op
            stamp = EPOCH + datetime.timedelta(seconds=clock)
            created = stamp.isoformat(timespec="milliseconds")
            recovering = d % recover_every == 0 and ops_per_did >= 3
            if round_ == 0:
                op = keys[d][0].sign(plc_operation(None, keys[d], [f"at://user{d}.test"]))
                did = did_of_genesis(dag_cbor(op))
                heads.append((did, ""))
            else:
                did = heads[d][0]
                prev = history[d][0] if recovering and round_ == 2 else history[d][-1]
                signer = keys[d][1] if recovering and round_ == 1 else keys[d][0]
                op = signer.sign(plc_operation(prev, keys[d], [f"at://user{d}-v{round_}.test"]))
            cid = cid_of(dag_cbor(op))
            history[d].append(cid)
            nullified = recovering and round_ == 1
            yield json.dumps(
                {
                    "did": did,
                    "operation": op,
                    "cid": cid,
                    "nullified": nullified,
                    "createdAt": created.replace("+00:00", "Z"),
                },
                separators=(",", ":"),  # as the reference directory writes its export
            )


def write_export(path: Path, dids: int, ops_per_did: int) -> int:
    count = 0
    with path.open("w") as out:
        for line in export_lines(dids, ops_per_did):
            out.write(line + "\n")
            count += 1
    return count


def network_world(identities: int) -> Iterator[tuple[str, str, str | None]]:
    """The network-shaped world (`world.shaped_handle`): per identity its handle, its DID and
    the export line of its genesis operation (None for did:web), in `/export` order. A
    did:plc names its handle's PDS domain as its PDS, or for a domain of its own, one of the
    PDS domains in turn."""
    clock = 0.0
    for index in range(identities):
        handle = world.shaped_handle(index)
        if handle.endswith(world.BULK_SUFFIX):
            yield handle, f"did:web:{handle}", None
            continue
        pds = world.shaped_pds(handle) or world.PDS_DOMAINS[index % len(world.PDS_DOMAINS)][0]
        key = Key(f"network/{index}")
        op = key.sign(plc_operation(None, [key], [f"at://{handle}"], f"https://{pds}"))
        clock += 0.25  # a creation every quarter of a second: a million in about 3 days
        created = (EPOCH + datetime.timedelta(seconds=clock)).isoformat(timespec="milliseconds")
        encoded = dag_cbor(op)
        did = did_of_genesis(encoded)
        line = {
            "did": did,
            "operation": op,
            "cid": cid_of(encoded),
            "nullified": False,
            "createdAt": created.replace("+00:00", "Z"),
        }
        yield handle, did, json.dumps(line, separators=(",", ":"))
