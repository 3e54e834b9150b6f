"""--verify-plc against the reference PLC directory, and against a lying mirror of it."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from atwhois.resolver import Config, Outcome, Resolver, Status
from devnet.forwarder import Edit, PlcStandIn
from devnet.network import DevnetState

NAMES = [
    "alice",
    "bob",
    "carol",
    "dave",
    "erin",
    "frank",
    "grace",
    "henry",
    "ivan",
    "judy",
    "kate",
    "leo",
    "mallory",
    "nina",
    "olivia",
    "peggy",
    "quinn",
    "trent",
    "uma",
    # the DNSSEC zones' handles (their DNS changes during the session, their logs do not)
    "sam",
    "nora",
    "ursula",
    "otto",
    "bruno",
    "dana",
]


@pytest.fixture
async def verifying(devnet: DevnetState) -> AsyncIterator[Resolver]:
    async with Resolver(devnet.config(verify_plc=True)) as resolver:
        yield resolver


async def test_every_seeded_log_verifies(verifying: Resolver, devnet: DevnetState) -> None:
    # The audit identities (victor, wendy, xavier, yvonne) change during the session.
    assert set(devnet.dids) - set(NAMES) == {"victor", "wendy", "xavier", "yvonne"}
    for name in NAMES:
        audit = await verifying.audit_log(devnet.did(name))
        assert audit.valid, (name, [str(f) for f in audit.findings])
        assert audit.deactivated is (name == "erin")


async def test_recovery_shows_the_nullified_op_and_the_key_that_won(
    verifying: Resolver, devnet: DevnetState
) -> None:
    audit = await verifying.audit_log(devnet.did("frank"))
    genesis, hijack, recovery = audit.ops
    assert hijack.nullified and hijack.nullified_by == recovery.cid
    assert hijack.changes == ("handle frank.test -> evil.test",)
    assert (hijack.signer_index, recovery.signer_index) == (1, 0)  # hot key vs recovery key
    assert recovery.prev == genesis.cid
    assert audit.state is not None and audit.state.also_known_as == ("at://frank.test",)


async def test_verified_lookups(verifying: Resolver, devnet: DevnetState) -> None:
    for query, status in [
        ("alice.test", Status.VERIFIED),
        ("frank.test", Status.VERIFIED),
        ("dave.test", Status.VERIFIED),
        ("erin.test", Status.DID_DEACTIVATED),
        ("ghost.test", Status.DID_NOT_FOUND),
        (devnet.did("quinn"), Status.VERIFIED),
    ]:
        identity = await verifying.lookup(query)
        assert identity.status is status, (query, identity.error)
        expected = Outcome.NOT_FOUND if query == "ghost.test" else Outcome.OK
        assert identity.plc_log.outcome is expected and identity.plc_findings == ()
    plain = await verifying.lookup("web.test")  # did:web: nothing to replay
    assert plain.plc_log.outcome is Outcome.SKIPPED


def _edit(change: Callable[[Any], None]) -> Edit:
    def tamper(value: Any) -> Any:
        edited = copy.deepcopy(value)
        change(edited)
        return edited

    return tamper


async def test_a_lying_directory_is_caught(devnet: DevnetState) -> None:
    bob, frank, alice = devnet.did("bob"), devnet.did("frank"), devnet.did("alice")

    def changed_field(log: Any) -> None:  # a changed field in a logged op
        log[1]["operation"]["alsoKnownAs"] = ["at://mallory.test"]

    def dropped_recovery(log: Any) -> None:  # hides the recovery: the hijack looks current
        del log[2]

    def doc_lie(doc: Any) -> None:  # the document says something nobody signed
        doc["alsoKnownAs"] = ["at://evil.test"]

    stand_in = PlcStandIn(
        devnet.plc_url,
        {
            f"/{bob}/log/audit": _edit(changed_field),
            f"/{frank}/log/audit": _edit(dropped_recovery),
            f"/{alice}": _edit(doc_lie),
        },
    )
    mirror = stand_in.url
    config: Config = devnet.config(verify_plc=True, plc_url=mirror)
    try:
        async with Resolver(config) as resolver:
            bob_identity = await resolver.lookup("bob.test")
            frank_identity = await resolver.lookup("frank.test")
            alice_identity = await resolver.lookup(alice)
        async with Resolver(devnet.config(plc_url=mirror)) as trusting_resolver:
            trusting = await trusting_resolver.lookup(alice)
    finally:
        stand_in.stop()
    assert bob_identity.status is Status.PLC_LOG_INVALID
    assert bob_identity.plc_log.outcome is Outcome.INVALID
    assert any("[P-CID-1]" in f for f in bob_identity.plc_findings)
    assert frank_identity.status is Status.PLC_LOG_INVALID
    assert any("nullified=True, the replay says False" in f for f in frank_identity.plc_findings)
    assert any("alsoKnownAs" in f for f in frank_identity.plc_findings)
    assert alice_identity.status is Status.PLC_LOG_INVALID
    assert alice_identity.error is not None and "[§11]" in alice_identity.error
    # Without --verify-plc the lie goes through: the directory is trusted.
    assert trusting.status is Status.HANDLE_NOT_FOUND and trusting.declared_handle == "evil.test"


async def test_a_tombstone_answer_on_the_audit_log(devnet: DevnetState) -> None:
    """The directory refuses the log as tombstoned (410): for a live DID that contradicts
    the document it serves; for a tombstoned one it agrees. Neither may raise."""
    alice, erin = devnet.did("alice"), devnet.did("erin")
    with PlcStandIn(devnet.plc_url) as stand_in:
        stand_in.path_faults[f"/{alice}/log/audit"] = "status:410"
        stand_in.path_faults[f"/{erin}/log/audit"] = "status:410"
        config = devnet.config(verify_plc=True, plc_url=stand_in.url)
        async with Resolver(config) as resolver:
            live = await resolver.lookup(alice)
            dead = await resolver.lookup(erin)
    assert live.status is Status.PLC_LOG_INVALID and live.plc_log.error_kind == "DidDeactivated"
    assert dead.status is Status.DID_DEACTIVATED
