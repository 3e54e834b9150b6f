"""Fuzz targets for records' proofs (issue 68): DRISL blocks, whose every accepted input
must encode back to itself; getRecord answers with bytes flipped or cut; trees whose nodes
are changed after they were built (their blocks hashing to their CIDs, so that the walk,
not the hash check, meets them); what a caller says it holds. Each may end only in the
classified ways the code promises: `NotDrisl`, `InvalidCommit` (a rule named),
`InvalidInput`."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from atwhois.resolver import drisl
from atwhois.resolver.commit import InvalidCommit, car_blocks, signed_by
from atwhois.resolver.errors import InvalidInput
from atwhois.resolver.record_proof import claimed_cid, read_proof
from atwhois.testing import mst
from atwhois.testing.mst import cid
from devnet.plc_ops import Key

from .fuzz_inputs import json_values, mutated_json

DID = "did:plc:" + "f" * 24
KEY = Key("fuzz records")
_REPO = mst.Repo(DID, KEY.private, {path: mst.post(path) for path in mst.collection_keys(60)})
PATHS = [*list(_REPO.records)[:3], "app.bsky.feed.post/3zzz", "a.b.c/x"]
PROOFS = [_REPO.proof(path) for path in PATHS] + [mst.Repo(DID, KEY.private).proof(PATHS[0])]
_FIXTURES = Path(__file__).parents[1] / "vectors/atproto-interop-tests/data-model"
_VECTORS = json.loads((_FIXTURES / "data-model-fixtures.json").read_text())
BLOCKS = [base64.b64decode(v["cbor_base64"] + "==") for v in _VECTORS]
BLOCKS += [block for proof in PROOFS[:2] for _, block in car_blocks(proof)]  # commit, nodes, post


def drisl_block(raw: bytes) -> None:
    """A block decoded is one value: encoded again, it is the very bytes read (R-DATA-1)."""
    try:
        value = drisl.decode(raw)
    except drisl.NotDrisl:
        return
    assert drisl.encode(value) == raw
    drisl.to_json(value)


def proof(raw: bytes) -> None:
    """Any answer, for any of the paths: a proof, or refused naming a rule."""
    for path in PATHS[::2]:
        collection, rkey = path.split("/")
        try:
            proof = read_proof(raw, DID, collection, rkey)
        except InvalidCommit as err:
            assert err.rule and str(err).endswith(f"[{err.rule}]")
            continue
        assert proof.cid is None or isinstance(proof.value, dict)
        signed_by(proof.commit, (KEY.did_key,))


_KEYS = st.from_regex(r"[a-c]\.[a-c]\.[a-c]{1,2}/[a-z0-9]{1,4}", fullmatch=True)
_VALUES = st.one_of(
    st.none(),
    st.integers(-2, 1100),
    st.binary(max_size=12),
    st.text(max_size=6),
    st.sampled_from([cid(b"node"), cid(b"raw", codec=0x55), b"a.b.c/x", b""]),
    st.lists(st.integers(0, 3), max_size=2),
)


@st.composite
def changed_trees(draw: st.DrawFn) -> tuple[bytes, str]:
    """A tree built right, then up to three of the nodes on a key's path changed (a field
    set to anything, an entry dropped, repeated or moved, a field added), as its owner
    could sign it; the path's blocks, or some of them, in the answer."""
    keys = sorted(draw(st.sets(_KEYS, max_size=30)))
    repo = mst.Repo(DID, KEY.private, {key: {"k": key} for key in keys})
    tree = repo.tree()
    probe = draw(st.sampled_from([*keys, "a.b.c/zz", "a.a.a/0"]))
    nodes = mst.path(tree, probe.encode())
    for _ in range(draw(st.integers(1, 3))):
        node = draw(st.sampled_from(nodes))
        kind = draw(st.sampled_from(["entry", "node", "drop", "repeat", "swap", "extra"]))
        if kind in ("drop", "repeat", "swap") and node.entries:
            at = draw(st.integers(0, len(node.entries) - 1))
            entry = node.entries.pop(at) if kind != "repeat" else node.entries[at]
            if kind != "drop":
                node.entries.insert(draw(st.integers(0, len(node.entries))), entry)
        else:
            node.change = _changer(kind, draw(st.sampled_from("pkvtl")), draw(_VALUES), node.change)
    mst.encode(tree, {})  # the changed nodes' CIDs, to leave some out
    leave_out = draw(st.sets(st.sampled_from([b"", *[n.cid for n in nodes]])))
    return repo.proof(probe, tree=tree, leave_out=leave_out), probe


def _changer(
    kind: str, name: str, value: Any, before: Callable[[mst.Fields], mst.Fields] | None
) -> Callable[[mst.Fields], mst.Fields]:
    def change(fields: mst.Fields) -> mst.Fields:
        fields = before(fields) if before else fields
        if kind == "node":
            fields["l"] = value
        elif kind == "extra":
            fields[name] = value
        elif fields["e"]:
            fields["e"][0][name if name != "l" else "t"] = value
        return fields

    return change


def changed(case: tuple[bytes, str]) -> None:
    raw, probe = case
    collection, rkey = probe.split("/")
    try:
        proof = read_proof(raw, DID, collection, rkey)
    except InvalidCommit as err:
        assert err.rule and str(err).endswith(f"[{err.rule}]")
        return
    assert proof.cid is None or proof.value == {"k": probe}  # what is proven is what is there


def claim(raw: bytes) -> None:
    """What a caller says it holds: a CID, or refused as invalid input (R-REC-7)."""
    with contextlib.suppress(InvalidInput):
        text = claimed_cid(record=raw)
        assert text is not None and text.startswith("bafyrei")


_RECORDS = [mst.post("a post"), {"$type": "x.y.z", "b": {"$bytes": "AAE"}}]
_RECORDS += [vector["json"] for vector in _VECTORS]
claims = st.one_of(
    mutated_json(_RECORDS).map(lambda value: json.dumps(value).encode()),
    json_values.map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=80),
)
