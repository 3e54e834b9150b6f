"""Moderation labels checked against their labelers' identities (`atwhois.auth.labels`, L-*)
in the world in memory (`atwhois.testing`), written as a service author would write them:
against the public API and the world alone, importing nothing from the test network
(devnet/). A labeler's document decides, its handle never asked; a negation and an
expired label are verified and not in force; a key rotated is refreshed once, and a label
of the old key is then invalid; a labeler that cannot be resolved is unavailable; many
labels ask each labeler once; the library's calls and the daemon's route in process. The
same on the test network's real PLC directory: test_label_network.py."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import coincurve
import libipld
from aiohttp.test_utils import TestClient, TestServer

import atwhois
from atwhois.testing import World

POST = "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/app.bsky.feed.post/3l6oveex3ii2l"
EVERY = 5.0  # the verifier's spacing of refreshes for one labeler


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def labeler(world: World, handle: str = "mod.example.org") -> str:
    return world.add_labeler(handle)


async def test_a_label_verifies_by_its_labelers_document_alone() -> None:
    """L-KEY-1, L-KEY-2: the `#atproto_label` key of the labeler's document decides; its
    handle is not resolved (neither DNS nor its host is asked)."""
    world = World()
    did = labeler(world)
    label = world.label(did, POST, "spam")
    async with world.cached() as cached:
        verdict = await atwhois.LabelVerifier(cached).verify(label)
        document = (await cached.document(did)).did_document
    assert verdict.verified and verdict.in_force, verdict.reason
    assert (verdict.src, verdict.uri, verdict.val, verdict.neg) == (did, POST, "spam", None)
    assert document is not None
    held = {m["id"]: m["publicKeyMultibase"] for m in document["verificationMethod"]}
    assert verdict.key == "did:key:" + held[f"{did}#atproto_label"]
    assert verdict.key != "did:key:" + held[f"{did}#atproto"]  # a key of its own
    assert {"id": "#atproto_labeler", "type": "AtprotoLabeler"}.items() <= (
        document["service"][1].items()
    )
    assert world.asked["plc"] == 1 and world.asked["dns"] == world.asked["https"] == 0


async def test_a_negation_and_an_expired_label_are_verified_and_not_in_force() -> None:
    """L-NEG-1, L-EXP-1, as a label's consumer meets them."""
    world = World()
    did = labeler(world)
    labels = [
        world.label(did, POST, "spam", neg=True),
        world.label(did, POST, "spam", exp="2020-01-01T00:00:00.000Z"),
        world.label(did, POST, "spam", exp="2999-01-01T00:00:00.000Z"),
    ]
    verdicts = await atwhois.LabelVerifier(world).verify_many(labels)
    assert [v.outcome for v in verdicts] == ["verified"] * 3
    assert [(v.negated, v.expired, v.in_force) for v in verdicts] == [
        (True, False, False),
        (False, True, False),
        (False, False, True),
    ]
    assert "neg" in labels[0] and "neg" not in labels[1]  # as the reference signs them


async def test_after_a_rotation_one_refresh_verifies_the_new_key_and_refuses_the_old() -> None:
    """L-KEY-3: the old document is kept; a label of the new key fails under it, the
    labeler is resolved once more, and it verifies; a label of the old key is then
    invalid (L-SIG-3), and asks nothing more within the refresh's spacing."""
    world, clock = World(), Clock()
    did = labeler(world)
    old = world.label(did, POST, "spam")
    async with world.cached(clock=clock) as cached:
        verifier = atwhois.LabelVerifier(cached, clock=clock, refresh_every=EVERY)
        assert (await verifier.verify(old)).in_force  # the document kept
        world.rotate_label_key(did)
        clock.now += EVERY
        asked = world.asked["plc"]
        new = await verifier.verify(world.label(did, POST, "rude"))
        assert (new.outcome, new.refreshed) == ("verified", True)
        assert world.asked["plc"] == asked + 1 and verifier.refreshes == 1
        refused = await verifier.verify(old)
        assert (refused.outcome, refused.rule, refused.refreshed) == ("invalid", "L-SIG-3", False)
        assert world.asked["plc"] == asked + 1


async def test_a_batch_is_judged_by_the_labelers_document_as_it_is_after_a_refresh() -> None:
    """L-KEY-3: labels of the old key and the new one in one batch, the old document kept:
    the new one's failure refreshes it, and then both are judged by the new document (the
    old key's label, which the kept document verified, is invalid)."""
    world, clock = World(), Clock()
    did = labeler(world)
    old = world.label(did, POST, "spam")
    async with world.cached(clock=clock) as cached:
        verifier = atwhois.LabelVerifier(cached, clock=clock, refresh_every=EVERY)
        assert (await verifier.verify(old)).in_force
        world.rotate_label_key(did)
        clock.now += EVERY
        verdicts = await verifier.verify_many([old, world.label(did, POST, "rude")])
    assert [(v.outcome, v.rule, v.refreshed) for v in verdicts] == [
        ("invalid", "L-SIG-3", True),
        ("verified", None, True),
    ]


async def test_a_flood_of_bad_labels_for_one_labeler_costs_one_refresh() -> None:
    world, clock = World(), Clock()
    did = labeler(world)
    good = world.label(did, POST, "spam")
    async with world.cached(clock=clock) as cached:
        verifier = atwhois.LabelVerifier(cached, clock=clock, refresh_every=EVERY)
        assert (await verifier.verify(good)).verified
        clock.now += EVERY
        asked = world.asked["plc"]
        bad = {**good, "val": "ham"}
        verdicts = await asyncio.gather(*(verifier.verify(bad) for _ in range(1000)))
    assert {(v.outcome, v.rule) for v in verdicts} == {("invalid", "L-SIG-3")}
    assert world.asked["plc"] - asked == 1 and verifier.refreshes == 1


def _signed_with(secret: bytes, fields: dict[str, Any]) -> dict[str, Any]:
    signature = coincurve.PrivateKey(secret).sign_recoverable(libipld.encode_dag_cbor(fields))
    return {**fields, "sig": {"$bytes": base64.b64encode(signature[:64]).decode()}}


async def test_an_account_with_no_label_key_signs_no_label_with_its_repository_key() -> None:
    """L-KEY-1: a label signed with the `#atproto` key of an account that is no labeler."""
    world = World()
    did = world.add("alice.example.org")
    fields = {"ver": 1, "src": did, "uri": POST, "val": "spam", "cts": "2026-12-06T00:00:00Z"}
    label = _signed_with(world.accounts[did].secret, fields)
    verdict = await atwhois.averify_label(label, directory=world)
    assert (verdict.outcome, verdict.rule) == ("invalid", "L-KEY-1")


async def test_a_labeler_unresolved_is_unavailable_and_a_tombstoned_one_invalid() -> None:
    """L-KEY-2: unavailable is never invalid; a deactivated labeler vouches for nothing."""
    world = World()
    did = labeler(world)
    label = world.label(did, POST, "spam")
    world.fail(did, "5xx")
    down = await atwhois.averify_label(label, directory=world)
    assert (down.outcome, down.rule) == ("unavailable", None) and down.reason
    world.heal(did)
    world.tombstone(did)
    gone = await atwhois.averify_label(label, directory=world)
    assert (gone.outcome, gone.rule) == ("invalid", "L-KEY-2")
    assert "did_deactivated" in (gone.reason or "")


async def test_many_labels_ask_each_labeler_once_and_keep_their_order() -> None:
    """A batch: each labeler's document once for all its labels; a label that cannot be
    read costs nothing and is refused where it stands."""
    world = World()
    first, second = labeler(world, "mod.example.org"), labeler(world, "other.example.org")
    labels: list[Any] = [world.label(first, POST, f"v{n}") for n in range(5)]
    labels += [world.label(second, POST, f"w{n}") for n in range(5)]
    labels.insert(3, {"ver": 1, "src": first})
    verdicts = await atwhois.LabelVerifier(world).verify_many(labels)
    assert [v.val for v in verdicts] == [label.get("val") for label in labels]
    assert verdicts[3].rule == "L-SYN-4" and sum(v.in_force for v in verdicts) == 10
    assert world.asked["plc"] == 2


async def test_the_library_and_the_daemon_verify_labels_from_the_world() -> None:
    """`atwhois.verify_label` (the library's loop, while this one runs) and
    `averify_label`; `POST /v1/verify/label` of `World.daemon()`: one label, many (a page
    of 300, some 100 KiB), a body with no labels (400, L-IN-1) or over a mebibyte (413), a
    labeler that cannot be resolved (502, the verdicts)."""
    world = World()
    did = labeler(world)
    label = world.label(did, POST, "spam")
    assert atwhois.verify_label(label, directory=world).in_force
    assert (await atwhois.averify_label(json.dumps(label), directory=world)).in_force
    async with TestClient(TestServer(world.daemon())) as client:
        one = await client.post("/v1/verify/label", json={"label": label})
        assert one.status == 200 and (await one.json())["in_force"] is True
        bad = {**label, "val": "ham"}
        many = await client.post("/v1/verify/label", json={"labels": [label, bad]})
        verdicts = (await many.json())["verdicts"]
        assert [(v["outcome"], v["rule"]) for v in verdicts] == [
            ("verified", None),
            ("invalid", "L-SIG-3"),
        ]
        for body in ({}, {"label": "x"}, {"labels": []}, {"labels": [label, 3]}):
            refused = await client.post("/v1/verify/label", json=body)
            assert refused.status == 400, body
        page = [world.label(did, POST, f"v{n}") for n in range(300)]  # past other bodies' 16 KiB
        answer = await client.post("/v1/verify/label", json={"labels": page})
        assert answer.status == 200 and len((await answer.json())["verdicts"]) == 300
        too_large = b'{"labels": [' + b" " * (1 << 20) + b"]}"
        refused = await client.post("/v1/verify/label", data=too_large)
        assert refused.status == 413
        labeler_down = labeler(world, "down.example.org")
        world.fail(labeler_down, "5xx")
        unresolved = world.label(labeler_down, POST, "spam")
        down = await client.post("/v1/verify/label", json={"labels": [label, unresolved]})
        assert down.status == 502 and down.headers["Retry-After"]
        outcomes = [v["outcome"] for v in (await down.json())["verdicts"]]
        assert outcomes == ["verified", "unavailable"]
