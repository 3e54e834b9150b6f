"""The benchmark's directory of the real one's shape (`devnet.synthetic_plc.directory_lines`,
issue 33): the mirror verifies every operation of it, and it has the shape it claims, so the
scale curve measures what a full mirror meets."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

from atwhois.mirror import Replica
from atwhois.mirror.backends import SqliteMirrorStore
from devnet.synthetic_plc import BOT_PDS, _later, directory_lines


def test_every_operation_verifies_and_the_shape_is_the_directorys(tmp_path: Path) -> None:
    lines = list(directory_lines(6000, recover=0.05, tombstone=0.02, burst_every=2000))
    # a smaller directory is the larger one's start (the bench cuts 1M and 3M from 10M),
    # made anew: the same ops, signatures and all
    assert lines[:1000] == list(
        directory_lines(1000, recover=0.05, tombstone=0.02, burst_every=2000)
    )
    entries = [json.loads(line) for line in lines]
    assert [e["seq"] for e in entries] == list(range(1, 6001))
    assert {e["type"] for e in entries} == {"sequenced_op"}
    store = SqliteMirrorStore(tmp_path / "m.db")
    result = Replica(store).apply(lines)
    counts = store.counts()
    # every op verifies; the hijacks are nullified by their recoveries, the tombstones hold
    assert (result.applied, result.rejected) == (6000, 0)
    assert result.nullified > 0 and counts["tombstoned"] > 0
    per_did = Counter(e["did"] for e in entries)
    assert sum(1 for n in per_did.values() if n <= 2) / len(per_did) > 0.8  # mostly 1 or 2
    assert max(per_did.values()) >= 3  # and a tail
    # a DID's operations are spread over the log, not written together
    first, last = {}, {}
    for e in entries:
        first.setdefault(e["did"], e["seq"])
        last[e["did"]] = e["seq"]
    assert max(last[d] - first[d] for d in per_did) > 1000
    # a burst: a run of creations from one PDS
    bots = [
        e["seq"]
        for e in entries
        if e["operation"].get("services", {}).get("atproto_pds", {}).get("endpoint") == BOT_PDS
    ]
    assert len(bots) >= 1000
    kinds = Counter(e["operation"]["type"] for e in entries)
    assert kinds["plc_tombstone"] == counts["tombstoned"]


def test_a_dids_next_operation_never_shares_its_last_ones_millisecond() -> None:
    """P-NULL-1 holds for every op the generator writes: the exponential wait before a
    DID's next op may draw anything down to zero, and once drew under a millisecond (the
    10M directory's op 4,323,078, refused by the mirror as the rule says)."""

    class Drawn(random.Random):
        def expovariate(self, lambd: float) -> float:
            return 1e-9

    assert _later(Drawn(1)) >= 1.0
    assert sum(_later(random.Random(seed)) for seed in range(200)) / 200 > 3600
