"""`atwhois.testing`: the world in memory a user's tests (and our unit tests) run against,
with no network. Each test here is written only against the public API and the world, as
a user would write one; the same rules run as against the test network's real servers."""

from __future__ import annotations

from dataclasses import replace

import atwhois
from atwhois.testing import World


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_handle_change_shows_once_the_held_answer_is_due() -> None:
    """H-RES-3, H-CACHE-1: a verified binding is held; after the handle moves, the held
    answer stands while fresh, and once due the old handle no longer verifies and the new
    one does."""
    world, clock = World(), Clock()
    did = world.add("alice.example.org")
    cached = world.cached(clock=clock)
    try:
        first = await cached.lookup("alice.example.org")
        assert (first.status, first.did) == (atwhois.Status.VERIFIED, did)

        world.change_handle(did, "alice.example.net")
        held = await cached.lookup("alice.example.org")
        assert held.status is atwhois.Status.VERIFIED and held.cache is not None
        assert held.cache.cached and held.cache.state == "fresh"

        clock.now += 2 * 86_400  # past what the policy may serve
        old = await cached.lookup("alice.example.org")
        assert old.status is atwhois.Status.HANDLE_NOT_FOUND, old.error
        new = await cached.lookup("alice.example.net")
        assert (new.status, new.did, new.handle) == (
            atwhois.Status.VERIFIED,
            did,
            "alice.example.net",
        )
        by_did = await cached.lookup(did)
        assert by_did.handle == "alice.example.net"
    finally:
        await cached.aclose()


async def test_an_outage_serves_the_held_answer_and_says_so() -> None:
    """Stale-if-error: when every source fails, a held verified answer past its fresh
    window is served marked stale with the failure it stands in for; a name never held
    is `unavailable` (transient), not absent."""
    world, clock = World(), Clock()
    world.add("bob.example.org", method="https")
    cached = world.cached(clock=clock)
    try:
        assert (await cached.lookup("bob.example.org")).status is atwhois.Status.VERIFIED
        for name in ("bob.example.org", "never.example.org"):
            world.fail(name, "timeout")
        world.fail(world.add("never.example.org"), "5xx")
        clock.now += 3_700  # past fresh (an hour), within what may be served
        served = await cached.lookup("bob.example.org")  # stale: refreshed behind it
        assert served.status is atwhois.Status.VERIFIED and served.cache is not None
        assert served.cache.state == "stale"
        await cached.settled()  # that refresh failed: the answer stands in for it
        stale = await cached.lookup("bob.example.org")
        assert stale.status is atwhois.Status.VERIFIED and stale.cache is not None
        assert stale.cache.state == "stale" and "no answer in time" in str(
            stale.cache.refresh_error
        )

        never = await cached.lookup("never.example.org")
        assert never.status is atwhois.Status.UNAVAILABLE  # transient, exit code 3
        assert never.status.exit_code == 3
        world.heal("never.example.org")
        world.heal(world.add("never.example.org"))
        healed = await cached.lookup("never.example.org")
        assert healed.status is atwhois.Status.VERIFIED  # the failure was not kept as absence
    finally:
        await cached.aclose()


async def test_an_absence_is_confirmed_and_kept_apart_from_a_failure() -> None:
    """The three outcomes apart: a handle with no record anywhere is `handle_not_found`;
    a DID the directory does not know is `did_not_found`; a tombstoned one is deactivated."""
    world = World()
    gone = world.add("carol.example.org")
    world.tombstone(gone)
    async with world.resolver() as resolver:
        absent = await resolver.lookup("nobody.example.org")
        assert absent.status is atwhois.Status.HANDLE_NOT_FOUND
        assert absent.dns.outcome == "not_found" and absent.https.outcome == "not_found"
        unknown = await resolver.lookup("did:plc:" + "a" * 24)
        assert unknown.status is atwhois.Status.DID_NOT_FOUND
        deactivated = await resolver.lookup(gone)
        assert deactivated.status is atwhois.Status.DID_DEACTIVATED
    assert world.asked["dns"] >= 1 and world.asked["https"] >= 1 and world.asked["plc"] >= 2


async def test_a_lagging_directory_is_what_the_rules_see() -> None:
    """A replica behind its primary serves the old document: the new handle's records name
    the DID, but its document does not declare the handle yet (H-RES-3: not verified)."""
    world = World()
    did = world.add("dave.example.org")
    world.lag()
    world.change_handle(did, "dave.example.net")
    lagging = await atwhois.alookup("dave.example.net", directory=world.resolver())
    assert lagging.status is atwhois.Status.HANDLE_MISMATCH
    world.catch_up()
    caught_up = await atwhois.alookup("dave.example.net", directory=world.resolver())
    assert caught_up.status is atwhois.Status.VERIFIED


def test_the_synchronous_lookup_runs_over_the_world() -> None:
    world = World()
    did = world.add("erin.example.org", method="both")
    assert atwhois.lookup("erin.example.org", directory=world.resolver()).did == did


async def test_the_synchronous_lookup_inside_a_loop_runs_on_the_librarys_own() -> None:
    """Where a loop runs (a notebook), the sync call runs on the library's loop and waits."""
    world = World()
    did = world.add("erin.example.org", method="both")
    assert atwhois.lookup("erin.example.org", directory=world.resolver()).did == did


async def test_the_daemon_answers_from_the_world_in_process() -> None:
    """`World.daemon()`: `atwhois serve`'s app (`build_daemon`) over the world, asked
    through aiohttp's test client: XRPC, the report, a refresh after a change."""
    from aiohttp.test_utils import TestClient, TestServer

    world = World()
    did = world.add("frank.example.org")
    app = world.daemon(refresh_token="t0k")
    async with TestClient(TestServer(app)) as client:
        resolved = await client.get(
            "/xrpc/com.atproto.identity.resolveHandle", params={"handle": "frank.example.org"}
        )
        assert resolved.status == 200 and (await resolved.json())["did"] == did
        report = await (await client.get(f"/v1/identity/{did}")).json()
        assert report["status"] == "verified" and report["handle"] == "frank.example.org"

        world.change_handle(did, "frank.example.net")
        refreshed = await client.post(
            "/xrpc/com.atproto.identity.refreshIdentity",
            json={"identifier": did},
            headers={"Authorization": "Bearer t0k"},
        )
        assert refreshed.status == 200 and (await refreshed.json())["handle"] == "frank.example.net"
        gone = await client.get(
            "/xrpc/com.atproto.identity.resolveHandle", params={"handle": "frank.example.org"}
        )
        assert gone.status in (400, 404)  # the old handle no longer names the DID


async def test_each_fault_is_the_outcome_the_real_edges_give() -> None:
    """A host with no address is absent, as the fetcher says of one (not a failure); a
    web host's 5xx and a DNS SERVFAIL are transient: a handle failing both ways is
    `unavailable`, one whose records are gone everywhere is not found."""
    world = World()
    world.add("gina.example.org", method="both")
    world.fail("gina.example.org", "nxdomain")
    async with world.resolver() as resolver:
        gone = await resolver.lookup("gina.example.org")
        assert gone.status is atwhois.Status.HANDLE_NOT_FOUND
        assert gone.dns.outcome == "not_found" and gone.https.outcome == "not_found"
        world.fail("gina.example.org", "5xx")
        failing = await resolver.lookup("gina.example.org")
        assert failing.status is atwhois.Status.UNAVAILABLE
        assert failing.dns.outcome == failing.https.outcome == "failed"


async def test_the_pds_check_runs_against_the_worlds_pds() -> None:
    """R-PDS-*, R-COMMIT-4 over the world: its PDS answers what the check asks
    (getRepoStatus, getLatestCommit, getBlocks), its commit signed with the account's key."""
    world = World()
    did = world.add("alice.example.org")
    held = await world.lookup("alice.example.org")
    checked = (await world.check_pds(held)).pds_check
    assert checked is not None and checked.outcome == "hosted", checked
    assert checked.key == held.signing_key and checked.rev is not None
    world.rotate_key(did)  # the PDS signs with the new key; `held` names the old one
    refused = (await world.check_pds(held)).pds_check
    assert refused is not None and refused.outcome == "invalid"
    assert "R-COMMIT-4" in (refused.error or "")
    again = (await world.check_pds(await world.lookup("alice.example.org"))).pds_check
    assert again is not None and again.outcome == "hosted" and again.rev != checked.rev
    elsewhere = world.add("bob.example.org", pds="https://other.world.example")
    moved = replace(held, did=elsewhere)  # bob's account is not at alice's PDS
    absent = (await world.check_pds(moved)).pds_check
    assert absent is not None and absent.outcome == "not_hosted", absent
