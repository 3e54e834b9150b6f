"""Records in `atwhois.testing.World`, tested as a service that verifies records would test
itself: written at the world's PDS (`put_record`, `delete_record`, `tamper_record`), proven by
it as the reference PDS proves them, verified through the public API, the world's cache and
its in-process daemon, with no network and nothing of the project's test network. The same
rules against the reference PDS: `tests/resolver/test_record_network.py`."""

from __future__ import annotations

import asyncio
import json

import atwhois
from atwhois.auth import RecordVerifier
from atwhois.auth.refresh import REFRESH_EVERY
from atwhois.testing import World

POST = "app.bsky.feed.post"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def post(text: str) -> dict[str, object]:
    return {"$type": POST, "text": text, "createdAt": "2026-12-01T02:00:00.000Z"}


async def test_a_record_written_at_the_world_s_pds_verifies_with_no_network() -> None:
    """R-REC-5, R-REC-7: the record put is proven with the CID `put_record` answered, its
    value as written (links and bytes in atproto's JSON form too), by CID or by content."""
    world = World()
    did = world.add("alice.example.org")
    link = {"$link": "bafyreie5cvv4h45feadgeuwhbcutmh6t2ceseocckahdoe6uat64zmz454"}
    value = {**post("hello"), "embed": link, "sig": {"$bytes": "AAEC"}}
    ref = world.put_record(did, POST, "3l2aaaaaaaaaa", value)
    assert ref.uri == f"at://{did}/{POST}/3l2aaaaaaaaaa"
    verdict = await atwhois.averify_record(ref.uri, cid=ref.cid, directory=world)
    assert (verdict.outcome, verdict.proven, verdict.matches) == ("verified", True, True)
    assert (verdict.cid, verdict.value) == (ref.cid, value)
    by_content = await atwhois.averify_record(
        ref.uri, record=json.dumps(value).encode(), directory=world
    )
    assert by_content.matches and by_content.claimed == ref.cid
    by_handle = await atwhois.averify_record(
        f"at://alice.example.org/{POST}/3l2aaaaaaaaaa", directory=world
    )
    assert (by_handle.outcome, by_handle.cid) == ("verified", ref.cid)
    assert world.asked["pds"] == 3


async def test_absence_is_proven_for_a_key_never_written_and_one_deleted() -> None:
    """R-REC-6: the world's PDS answers a key it does not hold with the signed tree's path,
    which proves it absent; a record deleted is absent in the next commit, and the CID it
    had no longer matches."""
    world = World()
    did = world.add("alice.example.org")
    kept = world.put_record(did, POST, "3l2aaaaaaaaaa", post("stays"))
    gone = world.put_record(did, POST, "3l2bbbbbbbbbb", post("soon gone"))
    never = await atwhois.averify_record(f"at://{did}/{POST}/3l2zzzzzzzzzz", directory=world)
    assert (never.outcome, never.proven, never.cid) == ("absent", True, None)
    before = await atwhois.averify_record(gone.uri, directory=world)
    world.delete_record(did, POST, "3l2bbbbbbbbbb")
    after = await atwhois.averify_record(gone.uri, cid=gone.cid, directory=world)
    assert (after.outcome, after.proven, after.matches) == ("absent", True, False)
    assert after.commit != before.commit and after.rev is not None and before.rev is not None
    assert after.rev > before.rev  # a later commit
    assert (await atwhois.averify_record(kept.uri, directory=world)).verified


async def test_a_record_tampered_with_behind_its_signature_is_invalid() -> None:
    """R-CAR-2: the PDS serves other bytes under the CID its signed tree names: invalid,
    naming the rule; the record written again verifies."""
    world = World()
    did = world.add("alice.example.org")
    ref = world.put_record(did, POST, "3l2aaaaaaaaaa", post("as signed"))
    world.tamper_record(did, POST, "3l2aaaaaaaaaa", post("as forged"))
    verdict = await atwhois.averify_record(ref.uri, cid=ref.cid, directory=world)
    assert (verdict.outcome, verdict.rule, verdict.matches) == ("invalid", "R-CAR-2", None)
    again = world.put_record(did, POST, "3l2aaaaaaaaaa", post("as signed"))
    assert again.cid == ref.cid
    assert (await atwhois.averify_record(ref.uri, directory=world)).verified


async def test_a_rotated_key_verifies_once_the_kept_identity_is_refreshed() -> None:
    """R-REC-8: through a cache, the identity is kept; the account's key rotates and its PDS
    signs with the new one. Within a few seconds of the kept resolution nothing is asked
    again and the commit is refused (R-COMMIT-4); past them, the identity is resolved once
    afresh and the record verifies under the new key."""
    world, clock = World(), Clock()
    did = world.add("alice.example.org")
    ref = world.put_record(did, POST, "3l2aaaaaaaaaa", post("hello"))
    async with world.cached(clock=clock) as cached:
        first = await atwhois.averify_record(ref.uri, directory=cached)
        assert first.verified and not first.refreshed
        world.rotate_key(did)
        asked = world.asked["plc"]
        early = await atwhois.averify_record(ref.uri, directory=cached)
        assert (early.outcome, early.rule, early.refreshed) == ("invalid", "R-COMMIT-4", False)
        assert world.asked["plc"] == asked
        clock.now += REFRESH_EVERY
        late = await atwhois.averify_record(ref.uri, directory=cached)
        assert (late.outcome, late.refreshed) == ("verified", True), late.reason
        assert late.key == (await cached.lookup(did)).signing_key != first.key
        assert world.asked["plc"] == asked + 1


async def test_the_world_s_daemon_serves_the_verdicts() -> None:
    """`World.daemon()`: `GET /v1/verify/record` in process: verified with whether it is
    the CID given, absent proven, tampered invalid, the PDS failing 502."""
    from aiohttp.test_utils import TestClient, TestServer

    world = World()
    did = world.add("alice.example.org")
    ref = world.put_record(did, POST, "3l2aaaaaaaaaa", post("asked of the daemon"))
    async with TestClient(TestServer(world.daemon())) as client:

        async def verify(uri: str, **query: str) -> tuple[int, dict[str, object]]:
            answer = await client.get("/v1/verify/record", params={"uri": uri, **query})
            return answer.status, await answer.json()

        status, body = await verify(ref.uri, cid=ref.cid)
        assert (status, body["outcome"], body["matches"]) == (200, "verified", True)
        status, body = await verify(f"at://{did}/{POST}/3l2zzzzzzzzzz")
        assert (status, body["outcome"], body["proven"]) == (200, "absent", True)
        world.tamper_record(did, POST, "3l2aaaaaaaaaa", post("forged"))
        status, body = await verify(ref.uri)
        assert (status, body["outcome"], body["rule"]) == (200, "invalid", "R-CAR-2")
        world.fail("pds.world.example", "5xx")
        status, body = await verify(ref.uri)
        assert (status, body["outcome"]) == (502, "unavailable")


async def test_a_flood_against_a_hostile_pds_costs_one_refresh_a_did_every_few_seconds() -> None:
    """R-REC-8: a PDS signing with a key the directory does not serve (here: the key rotated
    while the directory lags) refuses every proof under a kept identity, each a reason to
    refresh it. Through one `RecordVerifier` (as the daemon keeps), hundreds of verifications
    at once cost the directory one resolution, the same again a moment later none, and one
    more once `refresh_every` seconds have passed."""
    world, clock = World(), Clock()
    did = world.add("alice.example.org")
    ref = world.put_record(did, POST, "3l2aaaaaaaaaa", post("hello"))
    async with world.cached(clock=clock) as cached:
        verifier = RecordVerifier(cached)
        assert (await verifier.verify(ref.uri)).verified  # the identity kept
        world.lag()
        world.rotate_key(did)

        async def flood() -> int:
            asked = world.asked["plc"]
            verdicts = await asyncio.gather(*(verifier.verify(ref.uri) for _ in range(300)))
            assert {(v.outcome, v.rule) for v in verdicts} == {("invalid", "R-COMMIT-4")}
            return world.asked["plc"] - asked

        assert await flood() == 0  # kept a moment ago: nothing asked
        clock.now += REFRESH_EVERY
        assert await flood() == 1
        assert await flood() == 0
        clock.now += REFRESH_EVERY
        assert await flood() == 1
        assert verifier.refreshes == 2
        world.catch_up()  # the directory serves the new key: the next refresh verifies
        clock.now += REFRESH_EVERY
        assert (await verifier.verify(ref.uri)).verified
