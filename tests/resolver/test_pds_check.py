"""The PDS check (`resolver.pds`, `resolver.commit`): the commit block's rules on bytes made
here and signed for real, then the reference PDS of the test network changed through its
own API and through real PLC operations: a healthy account, a signing key the PDS does not
sign with, a deactivated account, a DID whose PDS does not host it, a PDS that is gone."""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import libipld
import pytest

from atwhois.audit import Auditor, AuditStore, Watched
from atwhois.cache import CachedResolver, MemoryStore
from atwhois.cli.render import render_text
from atwhois.resolver import Resolver, drisl
from atwhois.resolver.commit import InvalidCommit, read_commit, signed_by
from atwhois.resolver.identity import HOSTED, INACTIVE, INVALID, NOT_HOSTED, UNREACHABLE
from atwhois.resolver.plc.encoding import cid_of, dag_cbor
from devnet import world
from devnet.atwhois import daemon_here, run
from devnet.network import DevnetState
from devnet.pds import create_account, free_port
from devnet.plc_ops import Key, PlcAccount, new_handle
from tests.server.test_views import disagreements
from tests.stream.test_live_pds import xrpc
from tests.support import repo

DID = "did:plc:" + "p" * 24
# the devnet PDS's rotation key: it signs the PLC operations of the accounts it made
PDS_ROTATION = Key("atwhois devnet pds rotation key")


# --- the commit block, on bytes made here ------------------------------------------------


def _commit(key: Key, **changes: Any) -> tuple[str, bytes, bytes]:
    return repo.signed_commit(key.private, DID, **changes)


def test_a_commit_is_read_from_its_car_and_verified_with_the_key_that_signed_it() -> None:
    """R-COMMIT-4: the signature over the commit without `sig`, by the key that made it and
    by no other; R-CAR-1, R-CAR-2: the block found by its CID among others, in a CAR whose
    roots are empty (as `getBlocks` sends); its `data`, the MST root, read as a link."""
    key, other = Key("commit key"), Key("another key")
    text, cid, block = _commit(key)
    commit = read_commit(repo.car((repo.cid(b"x"), b"x"), (cid, block)), text)
    assert (commit.did, commit.rev, commit.cid) == (DID, "3n3qpjq7vrk2v", text)
    assert commit.data == repo.cid(b"mst root")
    assert signed_by(commit, (other.did_key, key.did_key)) == key.did_key
    assert signed_by(commit, (other.did_key,)) is None
    high_s = commit.signature[:32] + (
        0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
        - int.from_bytes(commit.signature[32:], "big")
    ).to_bytes(32, "big")
    flipped = dataclasses.replace(commit, signature=high_s)
    assert signed_by(flipped, (key.did_key,)) is None  # R-COMMIT-3: low-S only


@pytest.mark.parametrize(
    ("case", "rule"),
    [
        ("no block of that CID", "R-CAR-2"),
        ("the block does not hash to its CID", "R-CAR-2"),
        ("a CID of another codec", "R-CAR-2"),
        ("a section cut short", "R-CAR-1"),
        ("a header that is not CAR v1", "R-CAR-1"),
        ("more than 16 blocks", "R-CAR-1"),
        ("not DAG-CBOR", "R-COMMIT-1"),
        ("no rev", "R-COMMIT-1"),
        ("version 2", "R-COMMIT-2"),
        ("a signature of 63 bytes", "R-COMMIT-3"),
        ("a field v3 does not have", "R-COMMIT-6"),
        ("no prev", "R-COMMIT-6"),
        ("data as bytes, not a link", "R-COMMIT-6"),
        ("prev a raw CID", "R-COMMIT-6"),
        ("a longer head than needed", "R-COMMIT-1"),
    ],
)
def test_a_car_or_commit_that_breaks_a_rule_is_refused_naming_it(case: str, rule: str) -> None:
    key = Key("commit key")
    text, cid, block = _commit(key)
    car = repo.car((cid, block))
    header = libipld.encode_dag_cbor({"roots": [], "version": 1})
    match case:
        case "no block of that CID":
            car = repo.car((repo.cid(b"x"), b"x"))
        case "the block does not hash to its CID":
            car = repo.car((cid, block[:-1] + bytes([block[-1] ^ 1])))
        case "a CID of another codec":
            car = repo.car((repo.cid(block, codec=0x55), block))
        case "a section cut short":
            car = car[:-10]
        case "a header that is not CAR v1":
            other = libipld.encode_dag_cbor({"roots": [], "version": 2})
            car = repo.varint(len(other)) + other + car[len(header) + 1 :]
        case "more than 16 blocks":
            car = repo.car(*[(repo.cid(bytes([n])), bytes([n])) for n in range(17)], (cid, block))
        case "not DAG-CBOR":
            text, car = repo.alone(b"\xff\x00")
        case "no rev":
            fields = libipld.decode_dag_cbor(block)
            del fields["rev"]
            text, car = repo.alone(libipld.encode_dag_cbor(fields))
        case "version 2":
            text, cid, block = _commit(key, version=2)
            car = repo.car((cid, block))
        case "a signature of 63 bytes":
            text, cid, block = _commit(key, sig=b"s" * 63)
            car = repo.car((cid, block))
        case "a field v3 does not have":
            text, cid, block = _commit(key, extra="x")
            car = repo.car((cid, block))
        case "no prev" | "data as bytes, not a link" | "prev a raw CID":
            fields = drisl.decode(block)
            if case == "no prev":
                del fields["prev"]
            elif case == "prev a raw CID":
                fields["prev"] = drisl.Link(repo.cid(b"x", codec=0x55))
            else:
                fields["data"] = fields["data"].cid  # the same bytes, not tagged as a link
            text, car = repo.alone(drisl.encode(fields))
        case "a longer head than needed":  # version 3 written in two bytes
            text, car = repo.alone(block.replace(b"\x67version\x03", b"\x67version\x18\x03"))
    with pytest.raises(InvalidCommit) as refused:
        read_commit(car, text)
    assert refused.value.rule == rule, str(refused.value)
    assert f"[{rule}]" in str(refused.value)


# --- the reference PDS -------------------------------------------------------------------


async def _checked(devnet: DevnetState, identifier: str) -> Any:
    async with Resolver(devnet.config()) as resolver:
        identity = await resolver.lookup(identifier)
        return identity, await resolver.check_pds(identity)


def _session(devnet: DevnetState, name: str) -> str:
    handle = name + world.LIVE_HANDLE_SUFFIX
    password = world.live_password(name)
    body = {"identifier": handle, "password": password}
    return str(xrpc(devnet, "com.atproto.server.createSession", body)["accessJwt"])


async def test_an_account_its_pds_hosts_verifies_its_latest_commit_under_the_document_key(
    devnet: DevnetState,
) -> None:
    """R-PDS-1, R-PDS-2, R-PDS-3, R-COMMIT-4, R-COMMIT-5: the reference PDS hosts the
    account, active; its latest commit (the one `getLatestCommit` names) is signed by the
    document's `#atproto` key."""
    name = f"pds{uuid.uuid4().hex[:8]}"
    did = create_account(devnet.pds_url, name)
    identity, checked = await _checked(devnet, name + world.LIVE_HANDLE_SUFFIX)
    assert identity.verified and checked.status == identity.status
    check = checked.pds_check
    latest = httpx.get(
        f"{devnet.pds_url}/xrpc/com.atproto.sync.getLatestCommit", params={"did": did}
    ).json()
    assert check is not None and check.outcome == HOSTED, check
    assert (check.status, check.rev, check.commit) == ("active", latest["rev"], latest["cid"])
    assert check.key == identity.signing_key and check.pds == identity.pds
    assert check.signed_with is None and check.error is None


def _declare(
    devnet: DevnetState, did: str, *, atproto: str | None = None, pds: str | None = None
) -> None:
    """A real PLC operation on an account the PDS made (signed with the PDS's rotation
    key): the document's `#atproto` key, or its PDS, from now on."""
    last = httpx.get(f"{devnet.plc_url}/{did}/log/last", timeout=10).json()
    op = {k: v for k, v in last.items() if k != "sig"}
    if atproto is not None:
        op["verificationMethods"] = {**op["verificationMethods"], "atproto": atproto}
    if pds is not None:
        op["services"] = {
            **op["services"],
            "atproto_pds": {"type": "AtprotoPersonalDataServer", "endpoint": pds},
        }
    op["prev"] = cid_of(dag_cbor(last))
    answer = httpx.post(f"{devnet.plc_url}/{did}", json=PDS_ROTATION.sign(op), timeout=10)
    assert answer.status_code == 200, answer.text


async def test_a_signing_key_the_pds_does_not_sign_with_is_a_mismatch_naming_both_keys(
    devnet: DevnetState,
) -> None:
    """R-COMMIT-4: a real PLC operation (signed with the PDS's rotation key) declares a new
    `#atproto` key the PDS does not have; the PDS goes on signing with the old one. The
    check is invalid, names the declared key and the earlier one that signed, and turns
    back to hosted when the document declares the PDS's key again."""
    name = f"rot{uuid.uuid4().hex[:8]}"
    did = create_account(devnet.pds_url, name)
    handle = name + world.LIVE_HANDLE_SUFFIX
    before, _ = await _checked(devnet, did)
    old_key = str(before.signing_key)
    new_key = Key(uuid.uuid4().hex).did_key
    _declare(devnet, did, atproto=new_key)
    identity, checked = await _checked(devnet, handle)
    check = checked.pds_check
    assert identity.verified and identity.signing_key == new_key  # the binding still holds
    assert check is not None and check.outcome == INVALID, check
    assert check.signed_with == old_key and check.key is None
    assert check.error is not None and new_key in check.error and old_key in check.error
    assert "[R-COMMIT-4]" in check.error
    report = checked.to_json()
    assert disagreements(report, render_text(report)) == []  # the text says it all
    _declare(devnet, did, atproto=old_key)  # the document and the PDS agree again
    _, healed = await _checked(devnet, handle)
    assert healed.pds_check is not None and healed.pds_check.outcome == HOSTED
    assert healed.pds_check.key == old_key


async def test_a_deactivated_account_is_inactive_with_its_status(devnet: DevnetState) -> None:
    """R-PDS-1: deactivated through the PDS's own API, the account is hosted inactive (a
    confirmed answer, not a failure); activated again, it is hosted."""
    name = f"off{uuid.uuid4().hex[:8]}"
    did = create_account(devnet.pds_url, name)
    token = _session(devnet, name)
    xrpc(devnet, "com.atproto.server.deactivateAccount", {}, token)
    _, checked = await _checked(devnet, did)
    check = checked.pds_check
    assert check is not None and check.outcome == INACTIVE, check
    assert check.status == "deactivated" and check.commit is None
    xrpc(devnet, "com.atproto.server.activateAccount", None, token)
    _, again = await _checked(devnet, did)
    assert again.pds_check is not None and again.pds_check.outcome == HOSTED


async def test_a_pds_that_does_not_host_the_did_and_one_that_is_gone_are_told_apart(
    devnet: DevnetState,
) -> None:
    """R-PDS-1: a DID whose document names the test network's PDS, which never heard of it:
    not hosted (RepoNotFound, confirmed); a host whose web server answers no XRPC, and a
    host name that does not exist: not hosted either; a PDS nobody listens at: unreachable
    (transient); each with its reason."""
    handle = new_handle("nohost")
    account = PlcAccount(devnet.plc_url, handle)
    devnet.set_txts({handle: [f"did={account.did}"]})
    account.move_pds("https://live.test")
    _, checked = await _checked(devnet, account.did)
    check = checked.pds_check
    assert check is not None and check.outcome == NOT_HOSTED, check
    assert check.error is not None and "RepoNotFound" in check.error
    account.move_pds(f"https://nopds-{uuid.uuid4().hex[:8]}{world.BULK_SUFFIX}")  # a web host
    _, checked = await _checked(devnet, account.did)
    check = checked.pds_check
    assert check is not None and check.outcome == NOT_HOSTED, check
    assert check.error is not None and "no XRPC answer" in check.error
    assert "[R-PDS-1]" in check.error
    account.move_pds("https://elsewhere.test")  # a name that does not exist
    _, checked = await _checked(devnet, account.did)
    check = checked.pds_check
    assert check is not None and check.outcome == NOT_HOSTED, check
    assert check.error is not None and "NXDOMAIN" in check.error
    account.move_pds(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    _, checked = await _checked(devnet, account.did)
    check = checked.pds_check
    assert check is not None and check.outcome == UNREACHABLE, check
    assert check.error is not None and check.commit is None


def test_the_check_from_the_command_line_and_the_daemon(
    devnet: DevnetState, devnet_env: dict[str, str], tmp_path: Path
) -> None:
    """`lookup --check-pds` shows the check in text and JSON; the daemon's report does with
    `?check_pds=1`, not kept (no-store), and leaves it out otherwise."""
    name = f"cli{uuid.uuid4().hex[:8]}"
    create_account(devnet.pds_url, name)
    handle = name + world.LIVE_HANDLE_SUFFIX
    code, text, err = run(["lookup", "--check-pds", "--no-color", handle], devnet_env)
    assert code == 0, err
    assert "repo      hosted  active  rev " in text
    _, out, _ = run(["lookup", "--check-pds", "--json", handle], devnet_env)
    report = json.loads(out)
    assert report["evidence"]["pds"]["outcome"] == HOSTED
    assert report["evidence"]["pds"]["key"] == report["signing_key"]
    _, out, _ = run(["lookup", "--json", handle], devnet_env)
    assert "pds" not in json.loads(out)["evidence"]  # asked for only
    with daemon_here(devnet.env(), tmp_path / "serve.log", "--cache", "memory:") as daemon:
        answer = httpx.get(f"{daemon.url}/v1/identity/{handle}", params={"check_pds": "1"})
        assert answer.status_code == 200 and answer.headers["Cache-Control"] == "no-store"
        assert answer.json()["evidence"]["pds"]["outcome"] == HOSTED
        kept = httpx.get(f"{daemon.url}/v1/identity/{handle}")
        assert "pds" not in kept.json()["evidence"]
        asked = ["lookup", "--check-pds", "--json", "--server", daemon.url, handle]
        _, out, _ = run(asked, devnet_env)
        assert json.loads(out)["evidence"]["pds"]["outcome"] == HOSTED


async def test_an_audit_run_reports_each_pds_problem_as_a_finding_with_its_severity(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """With check_pds, an audit of four accounts of the reference PDS: a baseline run finds
    nothing; then one declares a key the PDS does not sign with, one is deactivated, one
    names a PDS that does not host it, one a PDS that is gone; the next run has one finding
    each, with the table's severity (and the findings the change itself makes); the run
    after the repairs, `pds_recovered`."""
    names = {
        kind: f"aud{kind[:4]}{uuid.uuid4().hex[:6]}" for kind in ("key", "off", "host", "gone")
    }
    dids = {kind: create_account(devnet.pds_url, name) for kind, name in names.items()}
    # by handle; the one to be deactivated by its DID: its handle stops resolving with it
    watched = {kind: name + world.LIVE_HANDLE_SUFFIX for kind, name in names.items()}
    watched["off"] = dids["off"]
    targets = [Watched(watched[kind]) for kind in names]
    config = devnet.config(verify_plc=True, check_pds=True)
    store = AuditStore(tmp_path / "audit.db")
    async with CachedResolver(Resolver(config), MemoryStore()) as cached:
        auditor = Auditor(cached, store, concurrency=4)
        first = await auditor.run(targets)
        assert first.by_status == {"verified": 4} and not store.run_findings(first.run_id)
        checks = {c.identifier: c for c in store.run_checks(first.run_id)}
        assert {c.pds_check for c in checks.values()} == {HOSTED}
        original_key = checks[targets[0].identifier].signing_key
        _declare(devnet, dids["key"], atproto=Key(uuid.uuid4().hex).did_key)
        token = _session(devnet, names["off"])
        xrpc(devnet, "com.atproto.server.deactivateAccount", {}, token)
        _declare(
            devnet, dids["host"], pds=f"https://nopds-{uuid.uuid4().hex[:6]}{world.BULK_SUFFIX}"
        )
        _declare(devnet, dids["gone"], pds=f"http://127.0.0.1:{free_port()}")
        second = await auditor.run(targets)
        kinds = {(f.identifier, f.kind, str(f.severity)) for f in store.run_findings(second.run_id)}
        handle = watched
        assert kinds == {
            (handle["key"], "commit_key_mismatch", "critical"),
            (handle["off"], "repo_inactive", "warning"),
            (handle["off"], "became_unverified", "warning"),  # its handle went with it
            (handle["host"], "repo_not_hosted", "critical"),
            (handle["host"], "pds_changed", "info"),
            (handle["gone"], "pds_unreachable", "warning"),
            (handle["gone"], "pds_changed", "info"),
            (handle["key"], "signing_key_rotated", "info"),
        }, kinds
        details = {f.kind: f.detail for f in store.run_findings(second.run_id)}
        assert str(original_key) in details["commit_key_mismatch"]
        assert "deactivated" in details["repo_inactive"]
        _declare(devnet, dids["key"], atproto=str(original_key))
        xrpc(devnet, "com.atproto.server.activateAccount", None, token)
        third = await auditor.run(targets[:2])
        kinds = {(f.identifier, f.kind) for f in store.run_findings(third.run_id)}
        assert kinds == {
            (handle["key"], "pds_recovered"),
            (handle["key"], "signing_key_rotated"),
            (handle["off"], "pds_recovered"),
            (handle["off"], "recovered"),
        }, kinds
    store.close()
