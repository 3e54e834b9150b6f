"""Inter-service auth tokens checked against their issuer's identity (`atwhois.auth`,
SA-*), in the in-memory world (`atwhois.testing`): the refresh-once rule after a key
rotation, a flood of bad tokens for one DID, an issuer that cannot be resolved or is
deactivated, the replay check, the library's front door. The same against the test
network's real PDS and PLC directory is in test_service_auth_network.py."""

from __future__ import annotations

import asyncio

import pytest

import atwhois
from atwhois.auth import ServiceAuthVerifier
from atwhois.auth.verifier import REFRESH_EVERY, ReplayNeedsAVerifier
from atwhois.cache.stores import MemoryNonces
from atwhois.resolver.service_auth import PROCESS_ONLY, Expected
from atwhois.testing import World
from tests.support.clock import Clock

AUDIENCE = "did:web:feed.example#bsky_fg"
EXPECTED = Expected(AUDIENCE)


async def test_a_token_verifies_by_the_issuers_document_alone() -> None:
    """SA-ISS-2: the document and its key decide; the handle it declares is reported, not
    checked (neither DNS nor the handle's host is asked)."""
    world = World()
    did = world.add("alice.example.org")
    async with world.cached() as cached:
        verification = await ServiceAuthVerifier(cached).verify(
            world.service_token(did, AUDIENCE), EXPECTED
        )
    assert verification.valid and verification.issuer == did
    assert verification.declared_handle == "alice.example.org"
    assert verification.key_id == "atproto"
    assert verification.document_checked_at and not verification.refreshed
    shown = verification.to_json()
    assert shown["handle"] is None and shown["handle_checked"] is False
    assert world.asked["plc"] == 1 and world.asked["dns"] == world.asked["https"] == 0


async def test_a_handle_whose_hosts_fail_does_not_make_a_token_unavailable() -> None:
    """Issue 66: a 503 at the issuer's handle host (and DNS timing out) made a token with a
    good document and key unavailable; its verdict does not wait on the handle."""
    world = World()
    did = world.add("alice.example.org", method="https")
    world.fail("alice.example.org", "5xx")
    async with world.cached() as cached:
        verification = await ServiceAuthVerifier(cached).verify(
            world.service_token(did, AUDIENCE), EXPECTED
        )
        assert (await cached.lookup(did)).status == "unavailable"  # the identity, as a whole
    assert (verification.outcome, verification.rule) == ("valid", None)


async def test_after_a_rotation_one_refresh_verifies_the_new_key_and_refuses_the_old() -> None:
    """SA-SIG-2: the old document is cached; a token signed with the new key fails under it,
    the issuer is resolved once more, and the token verifies; one signed with the old key
    is then refused. A failure under a fresh document is not refreshed again."""
    world = World()
    did = world.add("alice.example.org")
    clock = Clock()
    old_token = world.service_token(did, AUDIENCE, now=clock.now)
    async with world.cached(clock=clock) as cached:
        verifier = ServiceAuthVerifier(cached, clock=clock)
        assert (await verifier.verify(old_token, EXPECTED)).valid  # the document cached
        world.rotate_key(did)
        clock.now += REFRESH_EVERY  # the cached document is older than a refresh's spacing
        asked = world.asked["plc"]
        new = await verifier.verify(world.service_token(did, AUDIENCE, now=clock.now), EXPECTED)
        assert new.valid and new.refreshed
        assert world.asked["plc"] == asked + 1 and verifier.refreshes == 1
        old = await verifier.verify(old_token, EXPECTED)
        assert (old.outcome, old.rule) == ("invalid", "SA-SIG-1")
        assert world.asked["plc"] == asked + 1  # refreshed a moment ago: not again


async def test_a_document_resolved_moments_ago_is_not_refreshed_for_a_refused_token() -> None:
    """SA-SIG-2, cold: a token with a bad signature for an issuer not yet held costs its
    directory one request, not two (the document was just fetched), and asks nothing of
    the handle: however deep, its DNS is never asked."""
    world = World()
    did = world.add("a.b.c.d.e.f.g.h.alice.example.org")
    head, _, signature = world.service_token(did, AUDIENCE).rpartition(".")
    bad = f"{head}.{'A' if signature[0] != 'A' else 'B'}{signature[1:]}"
    async with world.cached() as cached:
        verifier = ServiceAuthVerifier(cached)
        verification = await verifier.verify(bad, EXPECTED)
    assert (verification.outcome, verification.rule) == ("invalid", "SA-SIG-1")
    assert world.asked["plc"] == 1 and verifier.refreshes == 0
    assert world.asked["dns"] == world.asked["dns_authority"] == world.asked["https"] == 0


async def test_a_thousand_bad_tokens_for_one_did_cost_one_directory_fetch() -> None:
    world = World()
    did = world.add("alice.example.org")
    clock = Clock()
    good = world.service_token(did, AUDIENCE, now=clock.now)
    head, _, signature = good.rpartition(".")
    async with world.cached(clock=clock) as cached:
        verifier = ServiceAuthVerifier(cached, clock=clock)
        assert (await verifier.verify(good, EXPECTED)).valid
        clock.now += REFRESH_EVERY
        asked = world.asked["plc"]
        bad = f"{head}.{'A' if signature[0] != 'A' else 'B'}{signature[1:]}"
        results = await asyncio.gather(*(verifier.verify(bad, EXPECTED) for _ in range(1000)))
    assert {(r.outcome, r.rule) for r in results} == {("invalid", "SA-SIG-1")}
    assert world.asked["plc"] - asked == 1 and verifier.refreshes == 1


async def test_a_token_refused_under_a_document_resolved_for_it_is_not_refreshed() -> None:
    """SA-SIG-2 (issue 66): a document resolved for this very token is as fresh as a refresh
    would make it: a bad signature from an issuer not cached cost the directory the same
    document twice, milliseconds apart; once now."""
    world = World()
    did = world.add("alice.example.org")
    head, _, signature = world.service_token(did, AUDIENCE).rpartition(".")
    bad = f"{head}.{'A' if signature[0] != 'A' else 'B'}{signature[1:]}"
    async with world.cached() as cached:
        verifier = ServiceAuthVerifier(cached)
        asked = world.asked["plc"]
        refused = await verifier.verify(bad, EXPECTED)
    assert (refused.outcome, refused.rule) == ("invalid", "SA-SIG-1") and not refused.refreshed
    assert world.asked["plc"] - asked == 1 and verifier.refreshes == 0


async def test_an_issuer_that_cannot_be_resolved_is_unavailable_never_invalid() -> None:
    world = World()
    did = world.add("alice.example.org")
    token = world.service_token(did, AUDIENCE)
    world.fail(did, "5xx")
    async with world.cached() as cached:
        verification = await ServiceAuthVerifier(cached).verify(token, EXPECTED)
    assert (verification.outcome, verification.rule) == ("unavailable", None)
    assert "could not be resolved" in (verification.reason or "")


async def test_a_deactivated_issuer_refuses_its_tokens_naming_the_status() -> None:
    world = World()
    did = world.add("alice.example.org")
    token = world.service_token(did, AUDIENCE)
    world.tombstone(did)
    async with world.cached() as cached:
        verification = await ServiceAuthVerifier(cached).verify(token, EXPECTED)
    assert (verification.outcome, verification.rule) == ("invalid", "SA-ISS-2")
    assert "did_deactivated" in (verification.reason or "")


async def test_a_token_refused_by_its_claims_costs_the_directory_nothing() -> None:
    world = World()
    did = world.add("alice.example.org")
    async with world.cached() as cached:
        verification = await ServiceAuthVerifier(cached).verify(
            world.service_token(did, "did:web:other.example#bsky_fg"), EXPECTED
        )
    assert verification.rule == "SA-AUD-1" and world.asked["plc"] == 0


async def test_a_replay_is_refused_and_the_nonces_are_kept_in_the_store() -> None:
    """SA-JTI-2: the second use of one token is refused; another token of the issuer is
    not; the nonce is kept until the token expires. In this process's memory, which the
    verdict says."""
    world = World()
    did = world.add("alice.example.org")
    token, other = world.service_token(did, AUDIENCE), world.service_token(did, AUDIENCE)
    nonces = MemoryNonces()
    async with world.cached() as cached:
        verifier = ServiceAuthVerifier(cached, nonces=nonces)
        first = await verifier.verify(token, EXPECTED, replay=True)
        assert first.valid and first.replay == "process"
        assert first.to_json()["replay"] == {"scope": "process", "warning": PROCESS_ONLY}
        again = await verifier.verify(token, EXPECTED, replay=True)
        assert (again.outcome, again.rule) == ("invalid", "SA-JTI-2") and verifier.replays == 1
        assert (await verifier.verify(other, EXPECTED, replay=True)).valid
        unchecked = await verifier.verify(token, EXPECTED)  # the check asked for only
        assert unchecked.valid and unchecked.replay is None
    assert len(nonces) == 2


async def test_the_nonces_held_are_bounded_and_past_the_bound_a_replay_is_not_ruled_out() -> None:
    """SA-JTI-2's bounds: a verifier holds at most `max_nonces` at once, one issuer at most
    `issuer_nonces` of them; past either the replay check answers unavailable (never valid),
    a replay is still refused as one, and a nonce's place is free once its token expired."""
    world = World()
    alice, bob, carol = (world.add(f"{n}.example.org") for n in ("alice", "bob", "carol"))
    now = [1_800_000_000.0]

    def token(did: str) -> str:
        return world.service_token(did, AUDIENCE, lifetime=60, now=now[0])

    first, second, third = token(alice), token(alice), token(alice)
    async with world.cached(clock=lambda: now[0]) as cached:
        verifier = ServiceAuthVerifier(cached, max_nonces=3, issuer_nonces=2, clock=lambda: now[0])
        assert (await verifier.verify(first, EXPECTED, replay=True)).valid
        assert (await verifier.verify(second, EXPECTED, replay=True)).valid
        share = await verifier.verify(third, EXPECTED, replay=True)
        assert share.outcome == "unavailable" and "holds its share, 2 nonces" in (
            share.reason or ""
        )
        assert (await verifier.verify(token(bob), EXPECTED, replay=True)).valid
        full = await verifier.verify(token(carol), EXPECTED, replay=True)
        assert full.outcome == "unavailable" and "3 nonces held" in (full.reason or "")
        again = await verifier.verify(first, EXPECTED, replay=True)  # full, yet told a replay
        assert (again.outcome, again.rule) == ("invalid", "SA-JTI-2")
        assert (await verifier.verify(third, EXPECTED)).valid  # the check asked for only
        now[0] += 91  # the tokens expired (60 s and 30 s of skew): places free
        assert (await verifier.verify(token(carol), EXPECTED, replay=True)).valid
        assert (await verifier.verify(token(alice), EXPECTED, replay=True)).valid
        assert verifier.unruled == {"issuer": 1, "bound": 1}


async def test_a_one_shot_check_cannot_rule_out_a_replay_and_says_what_can() -> None:
    """Issue 67: `replay=True` through a directory that keeps no nonces is refused with an
    error that says to keep a ServiceAuthVerifier (it was `unavailable`, saying nothing of
    why); a kept verifier does rule replays out."""
    world = World()
    did = world.add("alice.example.org")
    token = world.service_token(did, AUDIENCE)
    async with world.cached() as cached:
        with pytest.raises(ReplayNeedsAVerifier, match=r"keep one atwhois\.ServiceAuthVerifier"):
            await atwhois.averify_service_auth(token, AUDIENCE, replay=True, directory=cached)
        assert (await atwhois.averify_service_auth(token, AUDIENCE, directory=cached)).valid
        kept = atwhois.ServiceAuthVerifier(cached)
        expected = atwhois.Expected(AUDIENCE)
        assert (await kept.verify(token, expected, replay=True)).valid
        assert (await kept.verify(token, expected, replay=True)).rule == "SA-JTI-2"


async def test_the_front_door_verifies_through_any_directory() -> None:
    world = World()
    did = world.add("alice.example.org")
    token = world.service_token(did, AUDIENCE, method="app.bsky.feed.getFeedSkeleton")
    async with world.cached() as cached:
        verification = await atwhois.averify_service_auth(
            token, AUDIENCE, method="app.bsky.feed.getFeedSkeleton", directory=cached
        )
        wrong = await atwhois.averify_service_auth(token, AUDIENCE, directory=cached)
    assert verification.valid and verification.method == "app.bsky.feed.getFeedSkeleton"
    assert wrong.rule == "SA-LXM-1"
