"""A record's proof read on bytes made here (`resolver.record_proof`, `resolver.mst`): trees
built in Python (`atwhois.testing.mst`, checked against indigo's interop vectors) prove every
key they hold and the absence of every other; each answer that breaks one rule, and only
that one, is refused naming it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import libipld
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atwhois.resolver import mst as rules
from atwhois.resolver.commit import InvalidCommit, signed_by
from atwhois.resolver.errors import InvalidInput
from atwhois.resolver.plc.encoding import cid_of
from atwhois.resolver.record_proof import (
    MAX_BLOCKS,
    MAX_CAR,
    RecordVerification,
    claimed_cid,
    read_proof,
    record_uri,
)
from atwhois.testing import mst
from atwhois.testing.mst import cid
from devnet.plc_ops import Key

DID = "did:plc:" + "r" * 24
KEY = Key("record proofs")
KEYS = mst.collection_keys(300)
REPO = mst.Repo(DID, KEY.private, {path: mst.post(path) for path in KEYS})
TREE = REPO.tree()
FIXTURES = (
    Path(__file__).parents[1] / "vectors/indigo/atproto/repo/testdata/commit-proof-fixtures.json"
)


def _read(car: bytes, path: str) -> Any:
    collection, rkey = path.split("/")
    return read_proof(car, DID, collection, rkey)


def test_a_key_s_layer_is_the_spec_s() -> None:
    """R-MST-5: the repository spec's vectors, and the builder's count of the same bits
    agrees on a thousand keys."""
    vectors = {
        "2653ae71": 0,
        "blue": 1,
        "app.bsky.feed.post/454397e440ec": 4,
        "app.bsky.feed.post/9adeb165882c": 8,
    }
    assert {key: rules.key_layer(key.encode()) for key in vectors} == vectors
    for n in range(1000):
        assert rules.key_layer(b"k/%d" % n) == mst.layer(b"k/%d" % n)


@pytest.mark.parametrize("fixture", json.loads(FIXTURES.read_text()), ids=lambda f: f["comment"])
def test_the_builder_makes_indigo_s_trees_and_each_of_their_keys_is_proven(
    fixture: dict[str, Any],
) -> None:
    """The trees of indigo's interop vectors, before and after each commit, have the root
    CIDs the vectors say; in each, every key is proven with its value (R-MST-1..R-MST-5),
    and the keys added or removed are proven absent where they are not."""
    value = mst.blessed(fixture["leafValue"])
    before = set(fixture["keys"])
    after = (before | set(fixture["adds"])) - set(fixture["dels"])
    for keys, root in ((before, fixture["rootBeforeCommit"]), (after, fixture["rootAfterCommit"])):
        tree = mst.build({key.encode(): value for key in keys})
        blocks: dict[bytes, bytes] = {}
        assert libipld.encode_cid(mst.encode(tree, blocks)) == root
        for key in before | after:
            found = rules.find(blocks, tree.cid, key.encode())
            assert (found.cid if found else None) == (value if key in keys else None), key


def test_every_key_of_a_repository_is_proven_and_every_other_absent() -> None:
    """R-REC-4, R-REC-5: a present key's proof gives its record, its CID, and the commit,
    signed by the repository's key (R-COMMIT-4); R-REC-6: keys before, between and after
    them, of other collections, of every layer, are proven absent by the signed tree."""
    commit = REPO.commit_cid(TREE)
    for path in KEYS[::7]:
        proof = _read(REPO.proof(path, tree=TREE), path)
        assert proof.value == mst.post(path) and proof.commit.cid == commit
        assert proof.cid == cid_of(libipld.encode_dag_cbor(mst.post(path)))
        assert signed_by(proof.commit, (KEY.did_key,)) == KEY.did_key
    others = [f"{k[:-1]}{c}" for k in KEYS[::31] for c in "0z"] + ["a.b.c/x", "zz.zz.zz/self"]
    others += [mst.keyed("app.bsky.feed.post/x", layer) for layer in range(5)]
    for path in others:
        assert path not in REPO.records
        assert _read(REPO.proof(path, tree=TREE), path).cid is None, path


@settings(max_examples=60, deadline=None)
@given(
    st.sets(st.from_regex(r"[a-z]{1,3}\.[a-z]{1,3}\.[a-z]{1,3}/[a-z0-9]{1,6}", fullmatch=True)),
    st.lists(st.from_regex(r"[a-z]{1,3}\.[a-z]{1,3}\.[a-z]{1,3}/[a-z0-9]{1,6}", fullmatch=True)),
)
def test_any_tree_proves_its_keys_and_the_absence_of_others(
    keys: set[str], probes: list[str]
) -> None:
    """R-MST-1..R-MST-6 on any set of keys: what the proof says of a key is whether the
    repository holds it."""
    repo = mst.Repo(DID, KEY.private, {key: {"k": key} for key in keys})
    tree = repo.tree()
    for path in [*list(keys)[:5], *probes]:
        proof = _read(repo.proof(path, tree=tree), path)
        assert (proof.value == {"k": path}) if path in keys else proof.cid is None


def test_an_empty_repository_proves_every_key_absent() -> None:
    """R-MST-5: the one empty node allowed is the root of an empty repository."""
    empty = mst.Repo(DID, KEY.private)
    for path in KEYS[:3]:
        assert _read(empty.proof(path), path).cid is None


# --- one rule broken at a time ------------------------------------------------------------

A0, C0 = mst.keyed("app.bsky.feed.post/a", 0), mst.keyed("app.bsky.feed.post/c", 0)
B1 = mst.keyed("app.bsky.feed.post/b", 1)
VALUE = cid(b"a record")
# a key at layer 0, so that its path runs from the root (layer 3 or more) to a leaf node
PROBE = next(path for path in KEYS if mst.layer(path.encode()) == 0)
RECORD = mst.record_block(REPO.records[PROBE])
COMMIT = mst.blessed(REPO.commit_cid(TREE))
BIG = b"x" * MAX_CAR
NOT_A_MAP = b"\x80"  # an empty array


def _entry(path: str, right: mst.Node | None = None) -> mst.Entry:
    return mst.Entry(path.encode(), VALUE, right)


def _hand(root: mst.Node, *add: tuple[bytes, bytes]) -> bytes:
    """The proof of A0 in a tree built by hand (records left out, unless added)."""
    return mst.Repo(DID, KEY.private).proof(A0, tree=root, add=add)


def _path() -> tuple[mst.Node, list[mst.Node]]:
    """A fresh copy of the repository's tree, and the probe's path in it, encoded."""
    tree = REPO.tree()
    mst.encode(tree, {})
    return tree, mst.path(tree, PROBE.encode())


def _changed(which: int, change: Callable[[mst.Fields], mst.Fields]) -> bytes:
    """The probe's proof with a node of its path changed: the `which`th, or (-1) the first
    of more than one entry."""
    tree, nodes = _path()
    node = nodes[which] if which >= 0 else next(n for n in nodes if len(n.entries) > 1)
    node.change = change
    return REPO.proof(PROBE, tree=tree)


def _entries(change: Callable[[list[Any]], None]) -> Callable[[mst.Fields], mst.Fields]:
    def changed(fields: mst.Fields) -> mst.Fields:
        change(fields["e"])
        return fields

    return changed


def _unprefixed(entries: list[Any]) -> None:
    """The second entry shares one byte fewer with the first than it could."""
    second, first = entries[1], entries[0]["k"]
    second["k"], second["p"] = first[second["p"] - 1 : second["p"]] + second["k"], second["p"] - 1


def _swapped() -> bytes:
    tree, nodes = _path()
    node = next(n for n in nodes if len(n.entries) > 1)
    node.entries[0], node.entries[1] = node.entries[1], node.entries[0]
    return REPO.proof(PROBE, tree=tree)


def _left_out(which: int) -> bytes:
    _, nodes = _path()
    return REPO.proof(PROBE, leave_out=[nodes[which].cid])


BROKEN: dict[str, tuple[Callable[[], bytes], str, str]] = {
    "a record block that does not hash to its CID": (
        lambda: REPO.proof(PROBE, leave_out=[RECORD[0]], add=[(RECORD[0], RECORD[1] + b"!")]),
        PROBE,
        "R-CAR-2",
    ),
    "another record in its place": (
        lambda: REPO.proof(PROBE, leave_out=[RECORD[0]], add=[mst.record_block({"a": 1})]),
        PROBE,
        "R-REC-5",
    ),
    "a record that is not a map": (
        lambda: _hand(
            mst.Node(entries=[mst.Entry(A0.encode(), cid(NOT_A_MAP))]), (cid(NOT_A_MAP), NOT_A_MAP)
        ),
        A0,
        "R-REC-5",
    ),
    "a record by a raw CID": (
        lambda: _hand(mst.Node(entries=[mst.Entry(A0.encode(), cid(b"r", codec=0x55))])),
        A0,
        "R-REC-5",
    ),
    "the commit left out": (lambda: REPO.proof(PROBE, leave_out=[COMMIT]), PROBE, "R-REC-4"),
    "two roots": (lambda: REPO.proof(PROBE, roots=[COMMIT, COMMIT]), PROBE, "R-REC-4"),
    "a root by a raw CID": (lambda: REPO.proof(PROBE, roots=[cid(b"c", 0x55)]), PROBE, "R-REC-4"),
    "another DID's commit": (
        lambda: REPO.proof(PROBE, commit={"did": "did:plc:" + "o" * 24}),
        PROBE,
        "R-COMMIT-5",
    ),
    "a commit with a field v3 lacks": (
        lambda: REPO.proof(PROBE, commit={"x": 1}),
        PROBE,
        "R-COMMIT-6",
    ),
    "a node of the path left out": (lambda: _left_out(1), PROBE, "R-MST-6"),
    "the root node left out": (lambda: _left_out(0), PROBE, "R-MST-6"),
    "the last node of the path left out": (lambda: _left_out(-1), PROBE, "R-MST-6"),
    "keys out of order": (_swapped, PROBE, "R-MST-4"),
    "a key outside its subtree's range": (
        lambda: _hand(mst.Node(mst.Node(entries=[_entry(A0), _entry(C0)]), [_entry(B1)])),
        A0,
        "R-MST-4",
    ),
    "a prefix shorter than the one shared": (
        lambda: _changed(-1, _entries(_unprefixed)),
        PROBE,
        "R-MST-2",
    ),
    "a prefix longer than the key before": (
        lambda: _changed(-1, _entries(lambda e: e[1].update(p=500))),
        PROBE,
        "R-MST-2",
    ),
    "a prefix on the first entry": (
        lambda: _changed(0, _entries(lambda e: e[0].update(p=1))),
        PROBE,
        "R-MST-2",
    ),
    "a key without its collection": (
        lambda: _hand(mst.Node(entries=[mst.Entry(b"3l2a", VALUE)])),
        A0,
        "R-MST-3",
    ),
    "a key of another layer": (
        lambda: _hand(mst.Node(entries=[_entry(A0), _entry(B1)])),
        A0,
        "R-MST-5",
    ),
    "a node of layer 0 with a subtree": (
        lambda: _hand(mst.Node(mst.Node(entries=[_entry(A0)]), [_entry(C0)])),
        A0,
        "R-MST-5",
    ),
    "an empty root over a subtree": (
        lambda: _hand(mst.Node(mst.Node(entries=[_entry(A0)]))),
        A0,
        "R-MST-5",
    ),
    "an empty node below the root": (
        lambda: _hand(mst.Node(mst.Node(), [_entry(B1)])),
        A0,
        "R-MST-5",
    ),
    "a node with a field of its own": (
        lambda: _changed(1, lambda f: {**f, "x": 1}),
        PROBE,
        "R-MST-1",
    ),
    "an entry with a field of its own": (
        lambda: _changed(1, _entries(lambda e: e[0].update(x=1))),
        PROBE,
        "R-MST-1",
    ),
    "a value that is no link": (
        lambda: _changed(1, _entries(lambda e: e[0].update(v="x"))),
        PROBE,
        "R-MST-1",
    ),
    "a subtree by a raw CID": (
        lambda: _changed(0, lambda f: {**f, "l": cid(b"n", codec=0x55)}),
        PROBE,
        "R-MST-1",
    ),
    "a node of 257 entries": (
        lambda: _hand(
            mst.Node(entries=[_entry(mst.keyed(f"a.b.c/{n:03d}-", 0)) for n in range(257)])
        ),
        A0,
        "R-MST-7",
    ),
    "an answer over 2 MiB": (lambda: REPO.proof(PROBE, add=[(cid(BIG), BIG)]), PROBE, "R-REC-3"),
    "more than 64 blocks": (
        lambda: REPO.proof(PROBE, add=[(cid(bytes([n])), bytes([n])) for n in range(MAX_BLOCKS)]),
        PROBE,
        "R-REC-3",
    ),
}


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_an_answer_that_breaks_one_rule_is_refused_naming_it(case: str) -> None:
    """Each answer breaks one rule (R-CAR-2, R-REC-3..5, R-COMMIT-5, R-COMMIT-6,
    R-MST-1..7), and is refused naming that rule: never read as absent."""
    make, path, rule = BROKEN[case]
    with pytest.raises(InvalidCommit) as refused:
        _read(make(), path)
    assert refused.value.rule == rule, str(refused.value)
    assert str(refused.value).endswith(f"[{rule}]")


def test_a_path_longer_than_the_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """R-MST-7: the walk stops at the cap, whatever the tree (a path of the cap's length
    from a real tree needs a key of layer 31: the cap is made small to reach it)."""
    _, nodes = _path()
    monkeypatch.setattr(rules, "MAX_PATH", len(nodes) - 1)
    with pytest.raises(InvalidCommit) as refused:
        _read(REPO.proof(PROBE, tree=TREE), PROBE)
    assert refused.value.rule == "R-MST-7"
    monkeypatch.setattr(rules, "MAX_PATH", len(nodes))
    assert _read(REPO.proof(PROBE, tree=TREE), PROBE).cid is not None


def test_a_commit_another_key_signed_proves_nothing_under_the_document_s_key() -> None:
    """R-COMMIT-4: the proof reads (its tree and record are sound), and the commit is not
    signed by the repository's key."""
    proof = _read(REPO.proof(PROBE, tree=TREE, signer=Key("another").private), PROBE)
    assert proof.cid is not None
    assert signed_by(proof.commit, (KEY.did_key,)) is None
    assert signed_by(proof.commit, (Key("another").did_key,)) == Key("another").did_key


def test_a_record_uri_names_a_record_before_anything_is_asked() -> None:
    """R-REC-1: the authority, an NSID and a record key, each valid (U-1)."""
    uri = record_uri(f"at://{DID}/{PROBE}")
    assert (uri.authority, f"{uri.collection}/{uri.rkey}") == (DID, PROBE)
    for text in (
        f"at://{DID}",
        f"at://{DID}/app.bsky.feed.post",
        f"at://{DID}/app.bsky.feed.post/..",
        f"at://{DID}/not-an-nsid/3l2a",
        f"at://{DID}/app.bsky.feed.post/a b",
        "at://not a handle/app.bsky.feed.post/3l2a",
    ):
        with pytest.raises(InvalidInput) as refused:
            record_uri(text)
        assert refused.value.rule in ("R-REC-1", "U-1", "U-2"), text


def test_what_the_caller_holds_is_read_into_the_cid_it_claims() -> None:
    """R-REC-7: a CID (in any base, as proofs spell it), the record's DRISL bytes, or its
    JSON in atproto's form (R-DATA-4) give the same CID; anything else is invalid input."""
    record = {"$type": "x.y.z", "b": b"\x00\x01", "l": mst.blessed(REPO.commit_cid(TREE))}
    encoded = bytes(libipld.encode_dag_cbor(record))
    expected = cid_of(encoded)
    as_json = json.dumps(
        {
            "$type": "x.y.z",
            "b": {"$bytes": "AAE"},
            "l": {"$link": REPO.commit_cid(TREE)},
        }
    ).encode()
    assert claimed_cid(record=encoded) == expected
    assert claimed_cid(record=as_json) == expected
    assert claimed_cid(cid=expected) == expected
    assert claimed_cid(cid=expected.upper()) == expected
    assert claimed_cid() is None
    raw = libipld.encode_cid(cid(encoded, codec=0x55))
    assert claimed_cid(cid=raw) == raw  # kept as given: no proof names it
    bad_ones = [b"[1]", b'{"a": 1.5}', b"\xa1\x61\x61\x18\x01", b"{", b'{"a": {"$link": "x"}}']
    bad_ones += [b'{"a": 18446744073709551616}', b'{"a": "\\ud800"}']  # found by the fuzzer
    for bad in bad_ones:
        with pytest.raises(InvalidInput) as refused:
            claimed_cid(record=bad)
        assert refused.value.rule == "R-REC-7", bad
    with pytest.raises(InvalidInput):
        claimed_cid(cid="bafy-not-a-cid")


def test_the_verdict_says_whether_the_record_is_the_one_claimed() -> None:
    """R-REC-7: verified and the same CID matches; another CID, or a record proven absent,
    does not; nothing claimed, or nothing proven, says nothing. Its JSON reads back, with
    whether the identity was refreshed for it (R-REC-8)."""
    verified = RecordVerification(
        "verified", "at://x", cid="a", claimed="a", proven=True, refreshed=True
    )
    assert verified.matches is True
    assert RecordVerification("verified", "at://x", cid="a", claimed="b").matches is False
    assert RecordVerification("absent", "at://x", claimed="b").matches is False
    assert RecordVerification("unavailable", "at://x", claimed="b").matches is None
    assert RecordVerification("verified", "at://x", cid="a").matches is None
    report = verified.to_json()
    assert report["verified"] and report["matches"] and report["outcome"] == "verified"
    assert report["refreshed"] is True
    assert RecordVerification.from_json(report) == verified
