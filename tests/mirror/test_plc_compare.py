"""P-CMP-1..3: a mirror compared with its upstream DID by DID (`atwhois plc compare`), the
operations the upstream removed taken out only when asked and kept as evidence, and the
cursor and the upstream's newest seq in a mirror's health.

On the test network the upstream is the reference directory; an operation is removed in its
own PostgreSQL database, as plc.directory's admin endpoint removes invalid ones.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from atwhois.mirror import Follower, Replica, Upstream
from atwhois.mirror.backends import open_mirror_store
from atwhois.mirror.compare import (
    DOCUMENT,
    GIVE_UP_AFTER,
    KEPT,
    MISSING,
    NULLIFIED,
    ORDER,
    REFUSED,
    REMOVAL_RULE,
    REMOVED,
    CompareOutcome,
    DidComparison,
    Difference,
    compare_logs,
)
from atwhois.mirror.records import Rejection, StoredOp
from atwhois.mirror.state import MirrorState
from atwhois.mirror.upstream import newest_seq
from atwhois.resolver.config import AUDIT_LOG_MAX_BYTES, DOCUMENT_MAX_BYTES
from devnet.atwhois import ATWHOIS
from devnet.forwarder import PlcStandIn
from devnet.network import DevnetState
from devnet.plc_ops import PlcAccount, new_handle

# --- the comparison itself ----------------------------------------------------------------


def _op(seq: int, cid: str, nullified: bool = False) -> StoredOp:
    return StoredOp(seq, "did:plc:x", cid, f"2026-01-0{seq}T00:00:00.000Z", "{}", 0, nullified)


def _entry(cid: str, nullified: bool = False) -> dict[str, object]:
    return {"did": "did:plc:x", "cid": cid, "nullified": nullified, "createdAt": "t"}


def test_the_same_log_on_both_sides_is_no_difference() -> None:
    mine = [_op(1, "a"), _op(2, "b", nullified=True), _op(3, "c")]
    theirs = [_entry("a"), _entry("b", nullified=True), _entry("c")]
    assert compare_logs(mine, theirs, {}) == []


def test_each_kind_of_difference_is_named_with_its_op() -> None:
    refusal = Rejection("did:plc:x", "r", "t", "P-SIG-2", "not signed by a rotation key", "", "")
    mine = [_op(1, "a"), _op(2, "b"), _op(3, "gone")]
    theirs = [_entry("a"), _entry("b", nullified=True), _entry("r"), _entry("new")]
    found = {(d.kind, d.cid): d for d in compare_logs(mine, theirs, {"r": refusal})}
    assert set(found) == {(REMOVED, "gone"), (NULLIFIED, "b"), (REFUSED, "r"), (MISSING, "new")}
    assert found[(REFUSED, "r")].rule == "P-SIG-2"
    assert found[(NULLIFIED, "b")].detail == "in force here, nullified upstream"


def test_each_difference_says_what_each_side_holds() -> None:
    refusal = Rejection("did:plc:x", "r", "t", "P-SIG-2", "not signed by a rotation key", "", "")
    mine = [_op(1, "gone"), _op(2, "b", nullified=True)]
    theirs = [_entry("b"), _entry("r"), {**_entry("new"), "createdAt": "2026-02-01T00:00:00Z"}]
    details = {d.cid: d.detail for d in compare_logs(mine, theirs, {"r": refusal})}
    assert details == {
        "gone": "created 2026-01-01T00:00:00.000Z: kept here, no longer served upstream",
        "r": "not signed by a rotation key",
        "new": "created 2026-02-01T00:00:00Z: served upstream, not applied here",
        "b": "nullified here, in force upstream",
    }


def test_entries_an_upstream_garbles_are_no_ops_and_no_crash() -> None:
    """A /log/audit answer is a stranger's JSON: an entry that is not an object, or has no
    CID as text, is skipped (the op it stood for then shows as removed)."""
    theirs = ["junk", {"cid": 5}, {"did": "did:plc:x"}, _entry("a")]
    (found,) = compare_logs([_op(1, "a"), _op(2, "b")], theirs, {})
    assert (found.kind, found.cid) == (REMOVED, "b")


def test_an_op_listed_twice_upstream_is_a_difference_of_order() -> None:
    (found,) = compare_logs([_op(1, "a")], [_entry("a"), _entry("a")], {})
    assert found.kind == ORDER and found.detail == "from op 2 on: nothing here, a upstream"


def test_the_same_ops_in_another_order_is_a_difference_of_order() -> None:
    (found,) = compare_logs([_op(1, "a"), _op(2, "b")], [_entry("b"), _entry("a")], {})
    assert found.kind == ORDER and found.detail == "from op 1 on: a here, b upstream"


def test_a_mirror_says_the_newest_seq_its_upstream_served() -> None:
    """P-CMP-3: pages and stream messages tell the state the newest seq seen, kept across a
    reload of the store's meta; a legacy page (no seq) says nothing."""
    lines = [b'{"seq":7,"did":"d"}', b"not json", b'{"seq":9,"did":"d"}']
    assert newest_seq(lines) == 9 and newest_seq([b'{"createdAt":"x"}']) is None
    state = MirrorState("http://upstream")
    state.saw(newest_seq(lines))
    state.saw(3)  # an older one never moves it back
    assert state.to_json()["upstream_seq"] == 9


def test_a_run_keeps_a_bounded_account_and_stops_when_the_upstream_is_gone() -> None:
    """A run over every DID holds at most KEPT comparisons of each kind, counting the rest;
    GIVE_UP_AFTER DIDs in a row without an answer stop it (one answered resets the count)."""
    outcome = CompareOutcome()
    removed = Difference(REMOVED, "c", "gone")
    for index in range(KEPT + 5):
        outcome.add(DidComparison(f"did:plc:{index}", (removed,)))
    for index in range(GIVE_UP_AFTER - 1):
        outcome.add(DidComparison(f"did:plc:u{index}", unavailable="HTTP 503"))
    assert not outcome.upstream_gone
    outcome.add(DidComparison("did:plc:same"))
    for index in range(GIVE_UP_AFTER):
        outcome.add(DidComparison(f"did:plc:v{index}", unavailable="HTTP 503"))
    assert outcome.upstream_gone and outcome.exit_code() == 1
    assert len(outcome.different) == KEPT and outcome.differing == KEPT + 5
    assert outcome.unanswered == 2 * GIVE_UP_AFTER - 1 and outcome.same == 1
    assert "(stopped: the upstream answered none of the last 100)" in outcome.summary()


# --- on the test network -------------------------------------------------------------------


def _compare(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    done = subprocess.run(
        [ATWHOIS, "plc", "compare", *args], env=env, capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def mirrored(devnet: DevnetState, tmp_path: Path) -> tuple[dict[str, str], str, str]:
    """A DID of two operations, and a mirror of the whole directory caught up (its store in
    `tmp_path`): the environment, the DID, the CID of its second operation."""
    account = PlcAccount(devnet.plc_url, new_handle("compared"))
    account.set_handle(new_handle("renamed"))
    database = tmp_path / "mirror.db"
    upstream = Upstream(devnet.plc_url)
    follower = Follower(Replica(open_mirror_store(str(database)), workers=0), upstream)
    try:
        follower.catch_up()
    finally:
        follower.stop()
        follower.replica.store.close()
    log = httpx.get(f"{devnet.plc_url}/{account.did}/log/audit", timeout=10).json()
    env = {**devnet.env(), "ATWHOIS_PLC_DB": str(database)}
    return env, account.did, log[-1]["cid"]


def test_compare_names_an_operation_the_directory_removed_and_applies_it_with_evidence(
    devnet: DevnetState, mirrored: tuple[dict[str, str], str, str]
) -> None:
    """P-CMP-1 names the op the directory removed (and the document that changed with it);
    P-CMP-2: --apply-removals brings the DID to the directory's state, the op kept as
    evidence under its rule."""
    env, did, second = mirrored
    code, out, err = _compare(env, "--all")
    assert code == 0, (out, err)  # in sync: every DID the same
    assert "0 different, 0 not compared" in out

    devnet.remove_plc_op(did, second)
    code, out, err = _compare(env, did)
    assert code == 1, (out, err)
    assert f"{did}  removed    {second}" in out
    code, out, _ = _compare(env, "--json", did)
    summary = json.loads(out)
    (different,) = summary["different"]
    assert summary["different_count"] == 1 and summary["unavailable_count"] == 0
    assert {(d["kind"], d["cid"]) for d in different["differences"]} == {
        (REMOVED, second),
        (DOCUMENT, None),  # the mirror's state is the removed op's, the directory's the one before
    }

    code, out, err = _compare(env, "--apply-removals", did)
    assert code == 0, (out, err)
    assert f"{did}: 1 op(s) the upstream removed taken out, kept as evidence" in out
    assert _compare(env, did)[0] == 0  # the same now, log and document

    store = open_mirror_store(env["ATWHOIS_PLC_DB"])
    try:
        (kept,) = store.rejected(10, did)
        assert (kept.cid, kept.rule) == (second, REMOVAL_RULE)
        assert devnet.plc_url in kept.message and json.loads(kept.entry)["cid"] == second
        served = httpx.get(f"{devnet.plc_url}/{did}", timeout=10).json()
        current = store.in_force(did)
        assert current is not None and not current.tombstoned
        assert list(current.state(did).also_known_as) == served["alsoKnownAs"]  # type: ignore[union-attr]
        assert [op.cid for op in store.log(did)] == [
            e["cid"] for e in httpx.get(f"{devnet.plc_url}/{did}/log/audit", timeout=10).json()
        ]
    finally:
        store.close()


def test_compare_refuses_what_it_cannot_do_and_samples_at_random(
    mirrored: tuple[dict[str, str], str, str],
) -> None:
    env, did, _ = mirrored
    code, _, err = _compare(env)
    assert code == 2 and "name DIDs, or --sample N, or --all" in err
    code, _, err = _compare(env, "did:plc:not-a-did")
    assert code == 2 and "did:plc" in err
    code, out, err = _compare(env, "--sample", "5")
    assert code == 0 and "compared 5 DIDs" in out, (out, err)
    down = {**env, "ATWHOIS_PLC_URL": "http://127.0.0.1:9"}  # nothing listens: no verdict
    code, out, _ = _compare(down, did)
    assert code == 3 and "not compared" in out and "0 different, 1 not compared" in out
    code, out, _ = _compare(down, "--all", "--json")
    summary = json.loads(out)
    assert code == 3 and summary["unavailable_count"] == summary["compared"] > 1


def test_compare_goes_on_past_what_a_lying_upstream_serves_and_exits_by_the_worst(
    devnet: DevnetState, mirrored: tuple[dict[str, str], str, str]
) -> None:
    """A hostile upstream (a stand-in in front of the directory): a document nested past
    any parser, a log over the bound on one DID's log (64 MB), a document over the bound on
    a document. Each of those DIDs is not compared, saying why; `--all` goes on past them
    to every other DID; the exit is 3 (some not compared, none different), and 1 once one
    DID's log differs (the worst outcome wins)."""
    env, _, _ = mirrored
    nested, flooded, heavy, lied = (devnet.did(n) for n in ("alice", "bob", "carol", "dave"))
    depth = 20_000  # within a document's size cap: the nesting alone must be refused
    with PlcStandIn(devnet.plc_url) as stand_in:
        stand_in.bodies = {
            f"/{nested}": b"[" * depth + b"]" * depth,
            f"/{flooded}/log/audit": b"[" + b'{"cid":"x"},' * (64 * 1024 * 1024 // 12) + b"{}]",
            f"/{heavy}": b'{"id":"' + b"x" * (DOCUMENT_MAX_BYTES + 1) + b'"}',
        }
        lying = {**env, "ATWHOIS_PLC_URL": stand_in.url}
        code, out, err = _compare(lying, "--all", "--json")
        assert code == 3, (out, err)
        summary = json.loads(out)
        unavailable = {c["did"]: c["unavailable"] for c in summary["unavailable"]}
        assert set(unavailable) == {nested, flooded, heavy}
        assert "nested too deeply" in unavailable[nested]
        assert f"over {AUDIT_LOG_MAX_BYTES} bytes" in unavailable[flooded]
        assert f"over {DOCUMENT_MAX_BYTES} bytes" in unavailable[heavy]
        assert summary["compared"] == summary["same"] + 3 > 3  # every other DID, the same
        stand_in.edits = {f"/{lied}/log/audit": lambda log: log[:-1] if len(log) > 1 else []}
        code, out, err = _compare(lying, "--all", "--json")
    assert code == 1, (out, err)
    summary = json.loads(out)
    assert [c["did"] for c in summary["different"]] == [lied]
    assert summary["unavailable_count"] == 3
