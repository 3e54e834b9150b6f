"""Verifying records' proofs in process, on one core: `read_proof` and the commit's signature
under the document's key (`resolver.record_proof`, `resolver.commit`: the CAR and its caps,
every block hashed, the commit read strictly, the MST path walked with every node checked,
the record decoded) over `getRecord` answers for a repository of N records made here
(`atwhois.testing.mst`, whose trees are the reference PDS's), against what the Python SDK offers for
the same answer: `CAR.from_bytes` (every block decoded by libipld, nothing checked) and its
`verify_signature` over the commit without `sig`; the walk to the key, which the SDK does
not do, left out of its side. Interleaved rounds, medians. Only correct verdicts count:
each proof must give its record, each signature verify.

    python -m bench records [--records 10000] [--proofs 500] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import libipld
from atproto_core.car import CAR
from atproto_crypto.verify import verify_signature

from atwhois.resolver.commit import signed_by
from atwhois.resolver.record_proof import read_proof
from atwhois.testing import mst
from bench import Row
from devnet.plc_ops import Key

DID = "did:plc:" + "b" * 24
KEY = Key("bench record proofs")


def ours(proofs: list[tuple[str, bytes]]) -> int:
    verified = 0
    for path, car in proofs:
        collection, rkey = path.split("/")
        proof = read_proof(car, DID, collection, rkey)
        if proof.value is not None and signed_by(proof.commit, (KEY.did_key,)):
            verified += 1
    return verified


def sdk(proofs: list[tuple[str, bytes]]) -> int:
    verified = 0
    for _, car in proofs:
        decoded = CAR.from_bytes(car)
        commit = dict(decoded.blocks[decoded.root])
        signature = commit.pop("sig")
        unsigned = libipld.encode_dag_cbor(commit)
        if verify_signature(KEY.did_key, unsigned, signature):
            verified += 1
    return verified


def rate(run: Callable[[list[tuple[str, bytes]]], int], proofs: list[tuple[str, bytes]]) -> float:
    started = time.perf_counter()
    verified = run(proofs)
    seconds = time.perf_counter() - started
    assert verified == len(proofs), f"{run.__name__}: {verified} of {len(proofs)} verified"
    return len(proofs) / seconds


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench records", description=__doc__)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--proofs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    paths = mst.collection_keys(args.records)
    repo = mst.Repo(DID, KEY.private, {path: mst.post(path) for path in paths})
    tree = repo.tree()
    step = max(1, len(paths) // args.proofs)
    proofs = [(path, repo.proof(path, tree=tree)) for path in paths[::step][: args.proofs]]
    depth = max(len(mst.path(tree, path.encode())) for path, _ in proofs)
    size = statistics.median(len(car) for _, car in proofs)
    ours_rates, sdk_rates = [], []
    for _ in range(args.rounds):
        ours_rates.append(rate(ours, proofs))
        sdk_rates.append(rate(sdk, proofs))
    mine, theirs = statistics.median(ours_rates), statistics.median(sdk_rates)
    print(
        f"{len(proofs):,} proofs of a repository of {args.records:,} records (paths of up to "
        f"{depth} nodes, {size:,.0f} bytes each), medians of {args.rounds} rounds:"
    )
    print(f"  atwhois {mine:9,.0f} proofs/s   SDK decode + signature {theirs:9,.0f}/s   "
          f"ratio {mine / theirs:.2f}")  # fmt: skip
    return [
        Row("record proofs verified/s, in process", mine, theirs, "SDK CAR + signature", "proofs/s")
    ]


if __name__ == "__main__":
    main()
