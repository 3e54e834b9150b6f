"""Records' proofs verified per second from a warm cache (the identity's key in hand, no
network), on one core each: atwhois's `read_proof` and the commit's signature under the
document's key (`resolver.record_proof`, `resolver.commit`: the CAR and its caps, every
block hashed, the commit read strictly, the MST path walked with every node checked, the
record decoded) against `@atproto/repo`'s own `verifyProofs` (the reference PDS's
dependency, as the test network installs it: `bench/record_proofs_peer.cjs`, in a Node
process of its own) on the very same `getRecord` answers, for a repository of N records
made here (`atwhois.testing.mst`, whose trees are the reference PDS's): proofs of records
there and of keys that are not. Each round verifies every proof once; atwhois's rounds and
the reference's take turns (one warm-up round each first, not counted), medians. Only
correct answers count, for both: a record proven with its CID, an absence proven, the
commit verified under the key.

    python -m bench records [--records 10000] [--proofs 500] [--absent 50] [--rounds 7]
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import libipld

from atwhois.resolver.commit import signed_by
from atwhois.resolver.record_proof import read_proof
from atwhois.testing import mst
from bench import Row
from devnet.plc_ops import Key

DID = "did:plc:" + "b" * 24
KEY = Key("bench record proofs")
PDS_DIR = Path(__file__).resolve().parent.parent / "devnet" / "pds"
PEER = Path(__file__).with_name("record_proofs_peer.cjs")
REFERENCE = "@atproto/repo verifyProofs"

Proof = tuple[str, str | None, bytes]  # the record's path, its CID (None: absent), the answer


def ours(proofs: list[Proof]) -> tuple[int, float]:
    """Correct answers, and the seconds the round took."""
    correct = 0
    started = time.perf_counter()
    for path, cid, car in proofs:
        collection, rkey = path.split("/")
        proof = read_proof(car, DID, collection, rkey)
        if proof.cid == cid and signed_by(proof.commit, (KEY.did_key,)):
            correct += 1
    return correct, time.perf_counter() - started


class Reference:
    """`record_proofs_peer.cjs` holding the proofs, verifying them a round at a time."""

    def __init__(self, proofs: list[Proof], folder: Path) -> None:
        if shutil.which("node") is None or not (PDS_DIR / "node_modules").is_dir():
            raise SystemExit("bench records needs node and devnet/pds's packages (make setup)")
        claims = [
            {"collection": path.split("/")[0], "rkey": path.split("/")[1], "cid": cid,
             "car": base64.b64encode(car).decode()}
            for path, cid, car in proofs
        ]  # fmt: skip
        given = folder / "proofs.json"
        given.write_text(json.dumps({"did": DID, "key": KEY.did_key, "proofs": claims}))
        self.node = subprocess.Popen(
            ["node", str(PEER), str(PDS_DIR), str(given)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self._line()
        assert ready["ready"] == len(proofs), ready
        self.version = str(ready["repo"])

    def _line(self) -> dict[str, Any]:
        assert self.node.stdout is not None
        line = self.node.stdout.readline()
        if not line:
            raise SystemExit(f"{PEER.name} stopped (exit {self.node.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def round(self) -> tuple[int, float, list[str]]:
        assert self.node.stdin is not None
        self.node.stdin.write("round\n")
        self.node.stdin.flush()
        answer = self._line()
        return int(answer["verified"]), float(answer["seconds"]), list(answer["errors"])

    def close(self) -> None:
        assert self.node.stdin is not None
        self.node.stdin.close()
        self.node.wait(timeout=30)


def made(records: int, present: int, absent: int) -> tuple[list[Proof], int, float]:
    """The answers to verify, the longest path among them (nodes) and their median size."""
    paths = mst.collection_keys(records)
    repo = mst.Repo(DID, KEY.private, {path: mst.post(path) for path in paths})
    tree = repo.tree()
    step = max(1, len(paths) // present)
    there = paths[::step][:present]
    # keys between two that are there (an "a" sorts after the base32 digits of a TID)
    missing = [f"{path}a" for path in paths[step // 2 :: step][:absent]]
    proofs: list[Proof] = []
    for path in there + missing:
        cid = None
        if path in repo.records:
            cid = libipld.encode_cid(mst.record_block(repo.records[path])[0])
        proofs.append((path, cid, repo.proof(path, tree=tree)))
    depth = max(len(mst.path(tree, path.encode())) for path, _, _ in proofs)
    return proofs, depth, statistics.median(len(car) for _, _, car in proofs)


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench records", description=__doc__)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--proofs", type=int, default=500, help="of records there")
    parser.add_argument("--absent", type=int, default=50, help="proofs of keys not there")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    proofs, depth, size = made(args.records, args.proofs, args.absent)
    with tempfile.TemporaryDirectory(prefix="bench-records-") as folder:
        reference = Reference(proofs, Path(folder))
        try:
            ours(proofs), reference.round()  # warm-up: caches, the JIT
            mine, theirs = [], []
            for _ in range(args.rounds):
                correct, seconds = ours(proofs)
                mine.append(correct / seconds)
                verified, seconds, errors = reference.round()
                theirs.append(verified / seconds)
                wrong = len(proofs) - correct, len(proofs) - verified
                if any(wrong):
                    print(f"  not verified: atwhois {wrong[0]}, reference {wrong[1]} {errors}")
        finally:
            reference.close()
    ours_rate, their_rate = statistics.median(mine), statistics.median(theirs)
    print(
        f"{len(proofs):,} getRecord answers ({args.proofs:,} records there, {args.absent:,} "
        f"keys not) of a repository of {args.records:,} records: paths of up to {depth} "
        f"nodes, {size:,.0f} bytes at the median; medians of {args.rounds} rounds:"
    )
    print(f"  atwhois {ours_rate:9,.0f} proofs/s   {REFERENCE} {reference.version} "
          f"{their_rate:9,.0f}/s   ratio {ours_rate / their_rate:.2f} (target >= 1)")  # fmt: skip
    print("  rounds, atwhois:  " + " ".join(f"{rate:,.0f}" for rate in mine))
    print("  rounds, reference: " + " ".join(f"{rate:,.0f}" for rate in theirs))
    return [Row("record proofs verified/s, warm", ours_rate, their_rate, REFERENCE, "proofs/s")]


if __name__ == "__main__":
    main()
