"""Handle and document rules end to end, on the test network: each test is built so that
a resolver with the rule switched off (any alias binds, HTTPS may outvote an ambiguous DNS
answer, only 200 counts, a looser redirect or size cap) gives a different answer."""

from __future__ import annotations

import pytest

from atwhois.resolver import Outcome, Resolver, Status
from atwhois.resolver.handle import WELL_KNOWN_MAX_BYTES
from devnet import world
from devnet.network import DevnetState


async def test_doc_aka_1_only_the_first_valid_alias_binds(
    resolver: Resolver, devnet: DevnetState
) -> None:
    """grace declares under_score.test (invalid), grace.test, grace-alt.test: the handle is
    grace.test. grace-alt.test pointing at grace in DNS is not verified by its alias."""
    grace = devnet.did("grace")
    devnet.set_txts({"grace-alt.test": [f"did={grace}"]})
    try:
        alt = await resolver.lookup("grace-alt.test")
        first = await resolver.lookup("grace.test")
    finally:
        devnet.set_txts({"grace-alt.test": []})
    assert alt.did == grace and alt.status is Status.HANDLE_MISMATCH
    assert alt.declared_handle == "grace.test"
    assert first.status is Status.VERIFIED


async def test_h_dns_3_an_ambiguous_dns_answer_beats_an_https_success(
    resolver: Resolver, devnet: DevnetState
) -> None:
    """H-RES-2 lets the first success win, but H-DNS-3 fails a handle whose TXT records
    name two DIDs, whatever HTTPS says: the owner of the zone has said two things."""
    host = "ambiguous" + world.BULK_SUFFIX
    alice, bob = devnet.did("alice"), devnet.did("bob")
    devnet.set_file(host, world.WELL_KNOWN, alice)
    devnet.set_txts({host: [f"did={alice}", f"did={bob}"]})
    try:
        identity = await resolver.lookup(host)
    finally:
        devnet.set_txts({host: []})
    assert identity.https.outcome is Outcome.OK and identity.https.did == alice
    assert identity.status is Status.AMBIGUOUS and identity.did is None


@pytest.mark.parametrize(("status", "ok"), [(200, True), (203, True), (299, True), (404, False)])
async def test_h_wk_2_any_2xx_is_an_answer(
    resolver: Resolver, devnet: DevnetState, status: int, ok: bool
) -> None:
    host = f"status{status}-x{world.BULK_SUFFIX}"
    devnet.set_file(host, world.WELL_KNOWN, devnet.did("alice"))
    evidence = (await resolver.resolve_handle(host)).https
    assert (evidence.outcome is Outcome.OK) is ok, evidence
    if ok:
        assert evidence.did == devnet.did("alice")


async def test_h_wk_6_redirects_are_followed_up_to_the_cap(
    resolver: Resolver, devnet: DevnetState
) -> None:
    cap = resolver.config.max_redirects
    for hops, ok in ((cap, True), (cap + 1, False)):
        host = f"hops{hops}-x{world.BULK_SUFFIX}"
        devnet.set_file(host, world.WELL_KNOWN, devnet.did("alice"))
        evidence = (await resolver.resolve_handle(host)).https
        assert (evidence.outcome is Outcome.OK) is ok, (hops, evidence)
        if not ok:
            assert evidence.outcome is Outcome.INVALID and "H-WK-6" in (evidence.error or "")
    assert cap == 5


async def test_h_wk_7_the_body_cap_is_exact(resolver: Resolver, devnet: DevnetState) -> None:
    """A DID padded with whitespace (allowed, H-WK-4) to the cap passes; a byte more fails."""
    alice = devnet.did("alice")
    host = "padded" + world.BULK_SUFFIX
    for size, ok in ((WELL_KNOWN_MAX_BYTES, True), (WELL_KNOWN_MAX_BYTES + 1, False)):
        devnet.set_file(host, world.WELL_KNOWN, alice + " " * (size - len(alice)))
        evidence = (await resolver.resolve_handle(host)).https
        assert (evidence.outcome is Outcome.OK) is ok, (size, evidence)
        if not ok:
            assert evidence.error_kind == "ResponseTooLarge"
    assert WELL_KNOWN_MAX_BYTES == 2048
