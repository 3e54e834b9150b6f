"""OAuth sign-in tested as a service author would, with `atwhois.testing.World` and the
public API only (nothing from devnet/, no network): the world's PDSes serve the reference's
documents and are their own servers, or sit behind an entryway on another host; a token
response as the server answers it is bound to its account and issuer; a cache keeps the
documents five minutes on its clock; `World.daemon()` serves `GET /v1/oauth/{identifier}`."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

import atwhois
from atwhois.testing import World

ENTRYWAY = "https://entryway.world.example"
OTHER_PDS = "https://pds2.world.example"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def a_world() -> tuple[World, str, str]:
    """alice's PDS is its own server; bob's sits behind an entryway."""
    world = World()
    alice = world.add("alice.example.org")
    bob = world.add("bob.example.org", pds=OTHER_PDS)
    world.entryways[OTHER_PDS] = ENTRYWAY
    return world, alice, bob


async def test_a_pds_that_is_its_own_server_and_one_behind_an_entryway() -> None:
    """O-FLOW-1, O-PRM-1, O-PRM-2, O-ASM-1: by handle and by DID, the server the PDS names,
    with both documents and the verified identity."""
    world, alice, bob = a_world()
    found = await atwhois.aoauth_server("alice.example.org", directory=world)
    assert (found.outcome, found.did, found.handle) == ("ok", alice, "alice.example.org")
    assert found.issuer == found.pds == "https://pds.world.example"
    assert found.protected_resource is not None and found.authorization_server is not None
    assert found.authorization_server["protected_resources"] == [found.pds]
    assert found.identity is not None and found.identity.verified
    behind = await atwhois.aoauth_server(bob, directory=world)
    assert (behind.outcome, behind.pds, behind.issuer) == ("ok", OTHER_PDS, ENTRYWAY)
    assert behind.authorization_server is not None
    assert behind.authorization_server["pushed_authorization_request_endpoint"] == (
        f"{ENTRYWAY}/oauth/par"
    )


async def test_the_token_response_is_bound_to_its_account_and_issuer() -> None:
    """O-TOK-1..5: the server's answer passes for the account the flow started from and for
    a flow started from the server; another account's token (O-TOK-4), a token whose account
    is served by another server (O-TOK-5: the mix-up), a Bearer token (O-TOK-1) and a scope
    without atproto (O-TOK-3) do not."""
    world, alice, bob = a_world()
    server = await atwhois.aoauth_server("bob.example.org", directory=world)
    token = world.token_response(bob)
    for did in (bob, None):
        check = await atwhois.acheck_token_response(
            token, issuer=ENTRYWAY, did=did, directory=world
        )
        assert (check.outcome, check.sub, check.rule) == ("ok", bob, None), check.reason
        assert check.server is not None and check.server.issuer == server.issuer
    cases: list[tuple[Any, str | None, str]] = [
        (world.token_response(alice), bob, "O-TOK-4"),
        (world.token_response(alice), None, "O-TOK-5"),  # alice's server is her PDS
        ({**token, "token_type": "Bearer"}, bob, "O-TOK-1"),
        (world.token_response(bob, scope="transition:generic"), bob, "O-TOK-3"),
    ]
    for response, did, rule in cases:
        check = await atwhois.acheck_token_response(
            response, issuer=ENTRYWAY, did=did, directory=world
        )
        assert (check.outcome, check.rule) == ("invalid", rule), check.reason
    with pytest.raises(atwhois.InvalidInput):
        await atwhois.acheck_token_response(token, issuer=ENTRYWAY + "/", directory=world)


async def test_a_hostile_server_is_refused_and_an_outage_is_unavailable() -> None:
    """What a test puts at a URL replaces the world's document: an issuer that differs
    (O-ASM-1), a second server named (O-PRM-2), metadata missing a MUST (O-ASM-3); a 404
    (O-PRM-1); a document past the cap, and a host name that does not exist (O-FETCH-1); a
    host that fails is unavailable, never invalid."""
    world, alice, _ = a_world()
    pds = "https://pds.world.example"
    metadata = atwhois.testing.authorization_server_metadata(pds)
    resource = atwhois.testing.protected_resource_metadata(pds, pds)
    documents = {
        "O-ASM-1": ("/.well-known/oauth-authorization-server", {**metadata, "issuer": ENTRYWAY}),
        "O-PRM-2": (
            "/.well-known/oauth-protected-resource",
            {**resource, "authorization_servers": [pds, ENTRYWAY]},
        ),
        "O-ASM-3": (
            "/.well-known/oauth-authorization-server",
            {**metadata, "dpop_signing_alg_values_supported": ["RS256"]},
        ),
        "O-PRM-1": ("/.well-known/oauth-protected-resource", None),
    }
    for rule, (path, document) in documents.items():
        world.oauth_documents = {pds + path: document}
        found = await atwhois.aoauth_server(alice, directory=world)
        assert (found.outcome, found.rule) == ("invalid", rule), found.reason
    big = {**resource, "padding": "x" * 65536}  # past the cap (O-FETCH-1)
    world.oauth_documents = {f"{pds}/.well-known/oauth-protected-resource": big}
    over = await atwhois.aoauth_server(alice, directory=world)
    assert (over.outcome, over.rule) == ("invalid", "O-FETCH-1"), over.reason
    world.oauth_documents = {}
    world.fail("pds.world.example", "nxdomain")  # no host there, confirmed: no server
    nowhere = await atwhois.aoauth_server(alice, directory=world)
    assert (nowhere.outcome, nowhere.rule) == ("invalid", "O-FETCH-1"), nowhere.reason
    world.fail("pds.world.example", "5xx")
    down = await atwhois.aoauth_server(alice, directory=world)
    assert down.outcome == "unavailable" and "503" in (down.reason or "")
    world.heal("pds.world.example")
    world.fail("alice.example.org", "timeout")
    assert (await atwhois.aoauth_server("alice.example.org", directory=world)).outcome == (
        "unavailable"
    )


async def test_an_identity_that_does_not_verify_is_passed_through() -> None:
    """O-FLOW-1: a handle whose DID declares another is not verified (its status), no
    server asked; its DID is still an account, whose document names its PDS; a DID whose
    document names no PDS leaves nothing to ask (O-FLOW-2); a URL is no account."""
    world, alice, _ = a_world()
    world.change_handle(alice, "alice.example.net")
    world.txt["_atproto.alice.example.org"] = [f"did={alice}"]  # the old name still points
    asked = world.asked["https"]
    found = await atwhois.aoauth_server("alice.example.org", directory=world)
    assert (found.outcome, found.status) == ("not_verified", "handle_mismatch"), found.reason
    assert found.issuer is None and world.asked["https"] - asked <= 2  # the well-known file
    assert (await atwhois.aoauth_server(alice, directory=world)).outcome == "ok"
    nowhere = world.add("carol.example.org", pds="not a url")
    lost = await atwhois.aoauth_server(nowhere, directory=world)
    assert (lost.outcome, lost.rule) == ("invalid", "O-FLOW-2"), lost.reason
    with pytest.raises(atwhois.InvalidInput):
        await atwhois.aoauth_server("https://example.org/", directory=world)


async def test_a_cache_keeps_the_documents_five_minutes_on_its_clock() -> None:
    """O-CACHE-1: asked again within five minutes, the documents are the ones kept (the
    PDS and server not asked); past that, asked again; an identity the cache kept longer
    is resolved afresh for the flow; a token's check uses nothing kept."""
    world, alice, _ = a_world()
    clock = Clock()
    async with world.cached(clock=clock) as cached:
        first = await atwhois.aoauth_server(alice, directory=cached)
        assert (first.outcome, first.kept_s) == ("ok", None)
        asked = world.asked["https"]
        clock.now += 299
        again = await atwhois.aoauth_server(alice, directory=cached)
        assert (again.outcome, again.kept_s) == ("ok", 299.0)
        assert world.asked["https"] == asked  # the identity kept, the documents kept
        assert again.identity is not None and again.identity.cache is not None
        assert again.identity.cache.age_s == 299
        assert again.authorization_server is not None
        again.authorization_server["issuer"] = "changed by a caller"
        told = await atwhois.aoauth_server(alice, directory=cached)
        assert told.authorization_server == first.authorization_server  # not the caller's
        world.oauth_documents = {f"{first.pds}/.well-known/oauth-authorization-server": None}
        clock.now += 2
        gone = await atwhois.aoauth_server(alice, directory=cached)
        assert (gone.outcome, gone.rule, gone.kept_s) == ("invalid", "O-ASM-1", None)
        assert gone.identity is not None and gone.identity.cache is not None
        assert gone.identity.cache.age_s == 0  # kept 301 s: resolved afresh
        world.oauth_documents = {}
        kept = await atwhois.aoauth_server(alice, directory=cached)
        assert kept.outcome == "ok"
        world.oauth_documents = {f"{first.pds}/.well-known/oauth-authorization-server": None}
        still = await atwhois.aoauth_server(alice, directory=cached)
        assert (still.outcome, still.kept_s) == ("ok", 0.0)  # what is kept, as it was
        check = await atwhois.acheck_token_response(
            world.token_response(alice), issuer=kept.issuer or "", did=alice, directory=cached
        )
        assert (check.outcome, check.rule) == ("invalid", "O-TOK-5")  # nothing kept used


async def test_the_daemon_serves_the_route_over_the_world() -> None:
    """`World.daemon()`: `GET /v1/oauth/{identifier}` answers 200 with the verdict (ok,
    invalid with its rule), the documents kept beside its cache (O-CACHE-1), 400 for input
    that names no account, 502 with Retry-After when unavailable; `/openapi.json` describes
    it."""
    world, alice, bob = a_world()
    broken = world.add("carol.example.org", pds="https://pds3.world.example")
    down = world.add("dave.example.org", pds="https://pds4.world.example")
    world.oauth_documents = {"https://pds3.world.example/.well-known/oauth-protected-resource": {}}
    world.fail("pds4.world.example", "5xx")
    async with TestClient(TestServer(world.daemon())) as client:
        answer = await client.get("/v1/oauth/bob.example.org")
        body = await answer.json()
        assert answer.status == 200 and answer.headers["Cache-Control"] == "no-store"
        assert (body["outcome"], body["issuer"], body["did"]) == ("ok", ENTRYWAY, bob)
        assert body["identity"]["status"] == "verified" and body["kept_s"] is None
        assert (await (await client.get(f"/v1/oauth/{alice}")).json())["outcome"] == "ok"
        world.fail("pds.world.example", "5xx")  # kept: not asked again
        kept = await (await client.get(f"/v1/oauth/{alice}")).json()
        assert kept["outcome"] == "ok" and kept["kept_s"] is not None
        refused = await client.get(f"/v1/oauth/{broken}")
        assert refused.status == 200
        assert ((await refused.json())["outcome"], (await refused.json())["rule"]) == (
            "invalid",
            "O-PRM-1",
        )
        bad = await client.get("/v1/oauth/not%20a%20handle")
        assert bad.status == 400 and (await bad.json())["error"] == "InvalidRequest"
        unavailable = await client.get(f"/v1/oauth/{down}")
        assert unavailable.status == 502 and unavailable.headers["Retry-After"]
        assert (await unavailable.json())["outcome"] == "unavailable"
        paths = (await (await client.get("/openapi.json")).json())["paths"]
        assert "/v1/oauth/{identifier}" in paths
