"""Records verified on the test network (`Resolver.verify_record`): the reference PDS proves
a post just made through its own API, the absence of one never made or since deleted, and
says an account deactivated or taken down is inactive; its trees are the ones
`atwhois/testing/mst.py` builds from the same records, block for block. A PDS of the test
network's that answers as tests write it (a TLS host serving `getRecord`) shows the
hostile answers end to end, and an identity kept in a cache refreshed once when its key
rotated or its account moved."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import libipld
import pytest

import atwhois
from atwhois.auth.refresh import REFRESH_EVERY
from atwhois.cache import CachedResolver, MemoryStore
from atwhois.resolver import Resolver
from atwhois.resolver.commit import car_blocks, car_roots
from atwhois.resolver.errors import InvalidInput
from atwhois.resolver.record_proof import MAX_CAR, RecordVerification, read_proof
from atwhois.resolver.remote import Client
from atwhois.testing import World, mst
from devnet import world
from devnet.atwhois import Daemon, run
from devnet.network import DevnetState
from devnet.pds import create_account
from devnet.plc_ops import Key, PlcAccount
from tests.stream.test_live_pds import admin, xrpc
from tests.support import metrics
from tests.support.waiting import until

POST = "app.bsky.feed.post"
GET_RECORD = "/xrpc/com.atproto.sync.getRecord"
UPSTREAM = "atwhois_upstream_resolutions_total"  # the daemon's, by kind


def _account(devnet: DevnetState, tag: str) -> tuple[str, str, str]:
    """A new account of the reference PDS: its handle, DID and an access token."""
    name = f"{tag}{uuid.uuid4().hex[:8]}"
    did = create_account(devnet.pds_url, name)
    handle = name + world.LIVE_HANDLE_SUFFIX
    body = {"identifier": handle, "password": world.live_password(name)}
    return handle, did, xrpc(devnet, "com.atproto.server.createSession", body)["accessJwt"]


def _create(devnet: DevnetState, did: str, token: str, record: dict[str, Any]) -> Any:
    body = {"repo": did, "collection": record["$type"], "record": record}
    return xrpc(devnet, "com.atproto.repo.createRecord", body, token)


async def _verify(devnet: DevnetState, uri: str, **claim: Any) -> RecordVerification:
    async with Resolver(devnet.config()) as resolver:
        return await resolver.verify_record(uri, **claim)


async def test_a_post_just_made_is_verified_as_its_pds_made_it(devnet: DevnetState) -> None:
    """R-REC-2, R-REC-4, R-REC-5: the reference PDS's proof of a post made through its API:
    the CID and commit it answered `createRecord` with, the document's key; R-REC-7: the CID
    and the record's JSON it was made from both match; by handle too (R-REC-1)."""
    handle, did, token = _account(devnet, "rec")
    record = mst.post("a post to verify")
    made = _create(devnet, did, token, record)
    assert made["uri"].startswith(f"at://{did}/{POST}/")
    async with Resolver(devnet.config()) as resolver:
        identity = await resolver.lookup(did)
        verdict = await resolver.verify_record(made["uri"], cid=made["cid"])
        by_json = await resolver.verify_record(made["uri"], record=json.dumps(record).encode())
        by_handle = await resolver.verify_record(made["uri"].replace(did, handle))
    assert verdict.outcome == "verified" and verdict.proven and verdict.matches, verdict
    assert (verdict.cid, verdict.value) == (made["cid"], record)
    assert (verdict.commit, verdict.rev) == (made["commit"]["cid"], made["commit"]["rev"])
    assert verdict.key == identity.signing_key and verdict.pds == identity.pds
    assert by_json.matches and by_json.claimed == made["cid"]
    assert by_handle.outcome == "verified" and by_handle.cid == made["cid"]


async def test_a_record_not_there_is_absent_as_the_signed_tree_shows(
    devnet: DevnetState,
) -> None:
    """R-REC-6: a key never made, and a post since deleted: the reference PDS answers each
    with a proof of absence (a 200, the path without the key), which verifies under the
    document's key; the deleted post's CID no longer matches."""
    _, did, token = _account(devnet, "abs")
    made = _create(devnet, did, token, mst.post("soon gone"))
    _create(devnet, did, token, mst.post("stays"))
    never = await _verify(devnet, f"at://{did}/{POST}/3zzzzzzzzzzzz")
    assert (never.outcome, never.proven, never.cid) == ("absent", True, None), never
    assert never.key is not None and never.commit is not None
    rkey = made["uri"].rsplit("/", 1)[1]
    xrpc(
        devnet,
        "com.atproto.repo.deleteRecord",
        {"repo": did, "collection": POST, "rkey": rkey},
        token,
    )
    gone = await _verify(devnet, made["uri"], cid=made["cid"])
    assert (gone.outcome, gone.proven, gone.matches) == ("absent", True, False), gone
    assert gone.commit != made["commit"]["cid"]


async def test_an_account_deactivated_or_taken_down_is_inactive(devnet: DevnetState) -> None:
    """R-REC-2: deactivated through the PDS's own API, taken down by its administrator: the
    PDS refuses the proof with the account's state, which is the verdict (not a failure,
    not absent); active again, the record verifies."""
    _, did, token = _account(devnet, "ina")
    made = _create(devnet, did, token, mst.post("an inactive account's post"))
    xrpc(devnet, "com.atproto.server.deactivateAccount", {}, token)
    off = await _verify(devnet, made["uri"])
    assert (off.outcome, off.status, off.proven) == ("inactive", "deactivated", False), off
    xrpc(devnet, "com.atproto.server.activateAccount", None, token)
    assert (await _verify(devnet, made["uri"])).outcome == "verified"
    subject = {"$type": "com.atproto.admin.defs#repoRef", "did": did}
    takedown = {"subject": subject, "takedown": {"applied": True, "ref": "test"}}
    admin(devnet, "com.atproto.admin.updateSubjectStatus", takedown)
    down = await _verify(devnet, made["uri"])
    assert (down.outcome, down.status) == ("inactive", "takendown"), down


async def test_the_builder_s_tree_is_the_reference_s_block_for_block(
    devnet: DevnetState,
) -> None:
    """The MST built here from the records the reference PDS lists has the root its commit
    names, and the proof it answers for a key is the commit, the nodes of the builder's path
    for that key, and the record: the pure tests' trees are the reference's. The same
    records written at `atwhois.testing.World`'s PDS have the reference's CIDs, and its
    proofs the same tree and the same blocks but the commit (another account's, signed by
    another key): a service's tests see the reference PDS's answers."""
    _, did, token = _account(devnet, "mst")
    for n in range(40):
        _create(devnet, did, token, mst.post(f"post {n}"))
    _create(devnet, did, token, {"$type": "app.bsky.graph.follow", "subject": did,
                                 "createdAt": "2026-12-01T02:00:00.000Z"})  # fmt: skip
    listed: dict[bytes, bytes] = {}
    twins = World()
    twin = twins.add("twin.example.org")
    for collection in (POST, "app.bsky.graph.follow"):
        answer = httpx.get(
            f"{devnet.pds_url}/xrpc/com.atproto.repo.listRecords",
            params={"repo": did, "collection": collection, "limit": 100},
            timeout=10,
        ).json()
        for item in answer["records"]:
            path = item["uri"].removeprefix(f"at://{did}/").encode()
            listed[path] = mst.blessed(item["cid"])
            written = twins.put_record(twin, collection, path.decode().split("/")[1], item["value"])
            assert written.cid == item["cid"], item
    tree = mst.build(listed)
    blocks: dict[bytes, bytes] = {}
    root = mst.encode(tree, blocks)
    for key in [*sorted(listed)[::10], f"{POST}/3zzzzzzzzzzzz".encode()]:
        collection, rkey = key.decode().split("/")
        car = httpx.get(
            f"{devnet.pds_url}{GET_RECORD}",
            params={"did": did, "collection": collection, "rkey": rkey},
            timeout=10,
        ).content
        proof = read_proof(car, did, collection, rkey)
        assert proof.commit.data == root
        [commit] = car_roots(car)
        expected = {commit.cid} | {node.cid for node in mst.path(tree, key)}
        expected |= {listed[key]} if key in listed else set()
        assert {name for name, _ in car_blocks(car)} == expected, key
        ours = await twins.verify_record(f"at://{twin}/{key.decode()}")
        assert ours.cid == (libipld.encode_cid(listed[key]) if key in listed else None)
        query = f"?did={twin}&collection={collection}&rkey={rkey}"
        async with twins.resolver() as resolver:  # asked of the world's PDS as of any
            served = await resolver.web.get(
                f"https://pds.world.example{GET_RECORD}{query}", max_bytes=MAX_CAR, timeout=5
            )
        [world_commit] = car_roots(served.body)
        sent = {name for name, _ in car_blocks(served.body)} - {world_commit.cid}
        assert sent == expected - {commit.cid}, key


# --- a PDS that answers as the tests write it ------------------------------------------


@pytest.fixture
def hostile(devnet: DevnetState) -> tuple[PlcAccount, str]:
    """A did:plc of its own whose PDS is a host of the test network's TLS server, serving
    the file a test writes as its answer to getRecord."""
    account = PlcAccount(devnet.plc_url, None)
    host = f"rec-{uuid.uuid4().hex[:8]}{world.BULK_SUFFIX}"
    account.move_pds(f"https://{host}")
    return account, host


RECORDS = {f"{POST}/3l2a{n:03d}": mst.post(f"hostile {n}") for n in range(60)}
OTHER_KEY = Key("not theirs").private  # signs commits no document of theirs names


def _repo(account: PlcAccount) -> mst.Repo:
    return mst.Repo(account.did, account.key.private, dict(RECORDS))


async def test_a_hostile_pds_s_broken_proofs_are_invalid_end_to_end(
    devnet: DevnetState, hostile: tuple[PlcAccount, str]
) -> None:
    """Through the guarded fetcher and a real TLS host: an honest proof verifies; a tampered
    record (R-CAR-2), a node of the path left out (R-MST-6), a tree out of order (R-MST-4),
    a commit another key signed (R-COMMIT-4), an answer over the cap (R-REC-3), a web page
    (R-REC-2) are invalid naming the rule; a 503 is unavailable."""
    account, host = hostile
    repo = _repo(account)
    tree = repo.tree()
    mst.encode(tree, {})  # the nodes' CIDs
    path = next(  # a leaf's, on a path with a node of two entries or more to swap
        p
        for p in RECORDS
        if mst.layer(p.encode()) == 0
        and max(len(n.entries) for n in mst.path(tree, p.encode())) > 1
    )
    uri = f"at://{account.did}/{path}"
    nodes = mst.path(tree, path.encode())
    record = mst.record_block(RECORDS[path])
    unordered = repo.tree()
    node = next(n for n in mst.path(unordered, path.encode()) if len(n.entries) > 1)
    node.entries[:2] = node.entries[1::-1]
    answers: dict[str, tuple[bytes | None, str, str | None]] = {
        "honest": (repo.proof(path, tree=tree), "verified", None),
        "tampered record": (
            repo.proof(path, leave_out=[record[0]], add=[(record[0], record[1] + b" ")]),
            "invalid",
            "R-CAR-2",
        ),
        "node left out": (repo.proof(path, leave_out=[nodes[1].cid]), "invalid", "R-MST-6"),
        "out of order": (repo.proof(path, tree=unordered), "invalid", "R-MST-4"),
        "another key": (repo.proof(path, signer=OTHER_KEY), "invalid", "R-COMMIT-4"),
        "over the cap": (b"\x00" * (MAX_CAR + 1), "invalid", "R-REC-3"),
        "a web page": (None, "invalid", "R-REC-2"),  # no file: the host's 404 page
    }
    for case, (body, outcome, rule) in answers.items():
        devnet.set_file(host, GET_RECORD, body)
        verdict = await _verify(devnet, uri)
        assert (verdict.outcome, verdict.rule) == (outcome, rule), (case, verdict.reason)
        assert verdict.pds == f"https://{host}"
    devnet.set_https_faults({host: "503"})
    try:
        assert (await _verify(devnet, uri)).outcome == "unavailable"
    finally:
        devnet.set_https_faults({})


async def test_a_kept_identity_is_refreshed_once_for_a_rotated_key_and_a_moved_account(
    devnet: DevnetState, hostile: tuple[PlcAccount, str]
) -> None:
    """R-REC-8 end to end, with a cache: the key rotated since the document was kept, and
    the PDS signs with the new one; then the account moved from the reference PDS (which
    answers RepoNotFound) to its new host. Each time the kept identity is resolved once
    afresh, and the record verifies under the new document."""
    account, host = hostile
    path = next(iter(RECORDS))
    uri = f"at://{account.did}/{path}"
    async with Resolver(devnet.config()) as resolver:
        cached = CachedResolver(resolver, MemoryStore())
        await cached.lookup(account.did)  # kept from now on
        account.rotate_key(uuid.uuid4().hex)
        devnet.set_file(host, GET_RECORD, _repo(account).proof(path))
        rotated = await resolver.verify_record(uri, directory=cached)
        assert (rotated.outcome, rotated.refreshed) == ("verified", True), rotated.reason
        assert rotated.key == account.key.did_key
        account.move_pds(f"https://{world.LIVE_PDS_HOST}")  # a PDS that never heard of it
        await cached.refresh(account.did)
        account.move_pds(f"https://{host}")
        moved = await resolver.verify_record(uri, directory=cached)
        assert (moved.outcome, moved.refreshed, moved.pds) == ("verified", True, f"https://{host}")
        assert libipld.encode_cid(mst.record_block(RECORDS[path])[0]) == moved.cid


# --- the faces: the daemon, its client, the command line ----------------------------------


async def test_the_daemon_verifies_a_record_with_the_identities_it_keeps(
    devnet: DevnetState, daemon: Daemon, hostile: tuple[PlcAccount, str]
) -> None:
    """`GET /v1/verify/record` answers the verdict (200), with whether it is the CID given
    (R-REC-7), an absence proven (R-REC-6); a URI that names no record is a 400, nothing
    asked (R-REC-1); unavailable is a 502 with Retry-After; a `Client` asks it the same, the
    record given as JSON; `/openapi.json` describes it."""
    _, did, token = _account(devnet, "dmn")
    record = mst.post("asked of the daemon")
    made = _create(devnet, did, token, record)
    url = f"{daemon.url}/v1/verify/record"
    answer = httpx.get(url, params={"uri": made["uri"], "cid": made["cid"]}, timeout=30)
    assert answer.status_code == 200 and answer.headers["Cache-Control"] == "no-store"
    body = answer.json()
    assert (body["outcome"], body["matches"], body["value"]) == ("verified", True, record)
    other = mst.blessed(REPO_CID)
    answer = httpx.get(url, params={"uri": made["uri"], "cid": libipld.encode_cid(other)})
    assert (answer.json()["outcome"], answer.json()["matches"]) == ("verified", False)
    absent = httpx.get(url, params={"uri": f"at://{did}/{POST}/3zzzzzzzzzzzz"}, timeout=30)
    assert (absent.status_code, absent.json()["outcome"], absent.json()["proven"]) == (
        200,
        "absent",
        True,
    )
    for params in ({"uri": f"at://{did}/{POST}"}, {}, {"uri": made["uri"], "cid": "nope"}):
        refused = httpx.get(url, params=params, timeout=30)
        assert (refused.status_code, refused.json()["error"]) == (400, "InvalidRequest"), params
    assert "[R-REC-1]" in httpx.get(url, params={"uri": f"at://{did}/{POST}"}).json()["message"]
    account, host = hostile
    devnet.set_https_faults({host: "503"})
    try:
        down = httpx.get(url, params={"uri": f"at://{account.did}/{POST}/3l2a"}, timeout=30)
    finally:
        devnet.set_https_faults({})
    assert down.status_code == 502 and down.headers["Retry-After"]
    assert down.json()["outcome"] == "unavailable"
    client = Client(daemon.url)
    asked = await client.verify_record(made["uri"], record=json.dumps(record).encode())
    assert (asked.outcome, asked.matches, asked.cid) == ("verified", True, made["cid"])
    with pytest.raises(InvalidInput):
        await client.verify_record(f"at://{did}")
    assert "/v1/verify/record" in httpx.get(f"{daemon.url}/openapi.json").json()["paths"]


REPO_CID = "bafyreie5cvv4h45feadgeuwhbcutmh6t2ceseocckahdoe6uat64zmz454"  # any other CID


async def test_a_flood_at_the_daemon_against_a_hostile_pds_costs_a_refresh_every_few_seconds(
    devnet: DevnetState, daemon: Daemon, hostile: tuple[PlcAccount, str]
) -> None:
    """R-REC-8 end to end: a PDS whose every proof is signed by a key its account's document
    does not name. The daemon keeps the identity; once it is older than the spacing, a
    verification refreshes it (and is still refused); then hundreds of verifications at
    once cost the PLC directory at most one resolution every `REFRESH_EVERY` seconds they
    took, as the daemon's /metrics count them (its upstream documents, its records'
    refreshes)."""
    account, host = hostile
    path = next(iter(RECORDS))
    uri = f"at://{account.did}/{path}"
    devnet.set_file(host, GET_RECORD, _repo(account).proof(path, signer=OTHER_KEY))
    url = f"{daemon.url}/v1/verify/record"
    first = httpx.get(url, params={"uri": uri}, timeout=30).json()
    assert (first["outcome"], first["rule"], first["refreshed"]) == ("invalid", "R-COMMIT-4", False)
    # resolved for that first verification: not again within the spacing, then once
    until(lambda: httpx.get(url, params={"uri": uri}, timeout=30).json()["refreshed"], 30)
    before = httpx.get(f"{daemon.url}/metrics", timeout=10).text
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=60) as client:
        answers = await asyncio.gather(*(client.get(url, params={"uri": uri}) for _ in range(300)))
    took = time.monotonic() - started
    assert {(a.status_code, a.json()["rule"]) for a in answers} == {(200, "R-COMMIT-4")}
    after = httpx.get(f"{daemon.url}/metrics", timeout=10).text
    allowed = 1 + int(took // REFRESH_EVERY)
    refreshes = metrics.value(after, "atwhois_record_refreshes_total") - metrics.value(
        before, "atwhois_record_refreshes_total"
    )
    documents = metrics.value(after, UPSTREAM, kind="documents") - metrics.value(
        before, UPSTREAM, kind="documents"
    )
    assert refreshes <= allowed and documents <= allowed, (took, refreshes, documents)


def test_the_command_line_says_the_verdict_in_its_exit_code(
    devnet: DevnetState,
    devnet_env: dict[str, str],
    daemon: Daemon,
    hostile: tuple[PlcAccount, str],
    tmp_path: Path,
) -> None:
    """`atwhois verify-record`: 0 verified (the CID or the record given matching), 1 another
    record than the one given, absent, inactive; 2 a URI or a file that cannot be read; 3
    unavailable; the same through `--server`."""
    _, did, token = _account(devnet, "cli")
    record = mst.post("asked on the command line")
    made = _create(devnet, did, token, record)
    held = tmp_path / "record.json"
    held.write_text(json.dumps(record))
    code, out, err = run(["verify-record", made["uri"], "--cid", made["cid"]], devnet_env)
    assert code == 0, err
    assert out.startswith("verified\n") and f"given     {made['cid']}: it matches" in out
    code, out, _ = run(["verify-record", made["uri"], "--record", str(held), "--json"], devnet_env)
    assert code == 0 and json.loads(out)["matches"] is True
    code, out, _ = run(["verify-record", made["uri"], "--cid", REPO_CID], devnet_env)
    assert code == 1 and "it DIFFERS" in out
    code, out, _ = run(["verify-record", f"at://{did}/{POST}/3zzzzzzzzzzzz"], devnet_env)
    assert code == 1 and out.startswith("ABSENT (proven by the signed tree)")
    code, _, err = run(["verify-record", f"at://{did}/{POST}"], devnet_env)
    assert code == 2 and "R-REC-1" in err
    code, _, err = run(["verify-record", made["uri"], "--record", str(tmp_path / "no")], devnet_env)
    assert code == 2 and "cannot read the record" in err
    account, host = hostile
    devnet.set_https_faults({host: "503"})
    try:
        code, out, _ = run(["verify-record", f"at://{account.did}/{POST}/3l2a"], devnet_env)
    finally:
        devnet.set_https_faults({})
    assert code == 3 and out.startswith("UNAVAILABLE")
    code, out, _ = run(["verify-record", made["uri"], "--server", daemon.url, "--json"], devnet_env)
    assert code == 0 and json.loads(out)["cid"] == made["cid"]


async def test_the_library_verifies_a_record_here_through_a_cache_or_a_daemon(
    devnet: DevnetState, daemon: Daemon
) -> None:
    """`atwhois.verify_record` (on the library's loop) and `averify_record`: resolved now,
    through a cache, through a running daemon: one verdict; a URI that names no record
    raises `InvalidInput` before anything is asked."""
    _, did, token = _account(devnet, "lib")
    record = mst.post("asked of the library")
    made = _create(devnet, did, token, record)
    here = atwhois.verify_record(made["uri"], cid=made["cid"], config=devnet.config())
    async with CachedResolver(Resolver(devnet.config()), MemoryStore()) as cached:
        kept = await atwhois.averify_record(made["uri"], record=json.dumps(record).encode(),
                                            directory=cached)  # fmt: skip
    there = await atwhois.averify_record(made["uri"], directory=Client(daemon.url))
    for verdict in (here, kept, there):
        assert (verdict.outcome, verdict.cid, verdict.value) == ("verified", made["cid"], record)
    assert here.matches and kept.matches and there.matches is None
    with pytest.raises(atwhois.InvalidInput):
        atwhois.verify_record(f"at://{did}", config=devnet.config())
