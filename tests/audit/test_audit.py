"""Audits on the test network: change the world between runs, assert the exact findings
(the runner, its webhook, its judgement; the command line and the daemon: test_audit_cli)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from atwhois.audit import Auditor, AuditStore, Check, Finding, RunReport, Watched, compare
from atwhois.audit.processes import check_one
from atwhois.audit.webhook import Webhook
from atwhois.cache import CachedResolver, MemoryStore
from atwhois.resolver import Config, Identity, Resolver, Status
from devnet import world
from devnet.forwarder import PlcStandIn
from devnet.network import DevnetState
from tests.support.webhook_receiver import SECRET, Receiver, signed_by


def _config(devnet: DevnetState) -> Config:
    return devnet.config(verify_plc=True, per_host_limit=4)


@pytest.fixture
def store(tmp_path: Path) -> AuditStore:
    return AuditStore(tmp_path / "audit.db")


def kinds(store: AuditStore, run_id: int) -> set[tuple[str, str]]:
    return {(f.identifier, f.kind) for f in store.run_findings(run_id)}


async def test_the_world_changes_between_runs(
    devnet: DevnetState, store: AuditStore, receiver: Receiver
) -> None:
    receiver.failures = 1  # every delivery is refused once, then taken
    targets = [Watched(h) for h in ("victor.test", "wendy.test", "xavier.test", "yvonne.test")]
    webhook = Webhook(receiver.url, secret=SECRET, backoff=0.05)
    async with CachedResolver(Resolver(_config(devnet)), MemoryStore()) as cached:
        auditor = Auditor(cached, store, concurrency=4, webhook=webhook)
        first = await auditor.run(targets)
        assert first.by_status == {"verified": 4} and not kinds(store, first.run_id)
        assert first.delivered is None  # nothing found, nothing sent
        assert {c.method for c in store.run_checks(first.run_id)} == {"dns"}

        devnet.submit("victor", "handle", handle="victor2.test")  # a handle change op
        devnet.submit("wendy", "tombstone")  # a tombstone
        devnet.set_txt("xavier.test", [f"did={devnet.did('alice')}"])  # TXT edited, reloaded
        devnet.set_txt("yvonne.test", [])  # DNS record removed ...
        devnet.set_file("yvonne.test", world.WELL_KNOWN, devnet.did("yvonne"))  # ... HTTPS added
        second = await auditor.run(targets)
        assert kinds(store, second.run_id) == {
            ("victor.test", "became_unverified"),
            ("victor.test", "handle_changed"),
            ("wendy.test", "deactivated"),  # one finding for one change of status
            ("xavier.test", "became_unverified"),
            ("xavier.test", "did_changed"),  # another identity: its keys are not "rotated"
            ("yvonne.test", "method_changed"),
        }
        found = {(f.identifier, f.kind): f for f in store.run_findings(second.run_id)}
        assert found[("victor.test", "handle_changed")].detail == "victor.test -> victor2.test"
        assert (
            found[("victor.test", "handle_changed")].old,
            found[("victor.test", "handle_changed")].new,
        ) == ("victor.test", "victor2.test")
        assert found[("yvonne.test", "method_changed")].detail == "dns -> https"
        did_changed = found[("xavier.test", "did_changed")]
        assert (did_changed.old, did_changed.new) == (devnet.did("xavier"), devnet.did("alice"))
        assert (
            did_changed.severity == "critical"
            and found[("wendy.test", "deactivated")].severity == "critical"
        )
        assert found[("yvonne.test", "method_changed")].severity == "info"

        # A well-known body changed: DNS and HTTPS now disagree (DNS wins), then agree again.
        devnet.set_txt("yvonne.test", [f"did={devnet.did('yvonne')}"])
        devnet.set_file("yvonne.test", world.WELL_KNOWN, devnet.did("alice"))
        third = await auditor.run(targets[3:])
        assert kinds(store, third.run_id) == {
            ("yvonne.test", "conflict_appeared"),
            ("yvonne.test", "method_changed"),
        }
        devnet.set_file("yvonne.test", world.WELL_KNOWN, devnet.did("yvonne"))
        fourth = await auditor.run(targets[3:])
        assert kinds(store, fourth.run_id) == {("yvonne.test", "conflict_cleared")}
        devnet.set_txt("xavier.test", [f"did={devnet.did('xavier')}"])
        fifth = await auditor.run(targets[2:3])
        assert ("xavier.test", "recovered") in kinds(store, fifth.run_id)
        # The fresh results updated the cache the daemon would answer from.
        assert (await cached.lookup("wendy.test")).status is Status.DID_DEACTIVATED
    await webhook.aclose()
    # One delivery per run that found something, each once, signed, structured.
    runs = [second, third, fourth, fifth]
    assert [p["run_id"] for p in receiver.payloads()] == [r.run_id for r in runs]
    assert all(r.delivered for r in runs) and webhook.delivered == 4 and webhook.failed == 0
    assert all(receiver.attempts[str(r.run_id)] == 2 for r in runs)  # refused once, then taken
    for (headers, body), run in zip(receiver.received, runs, strict=True):
        assert signed_by(SECRET, headers, body) and not signed_by("another", headers, body)
        payload = json.loads(body)
        assert {(f["identifier"], f["kind"]) for f in payload["findings"]} == kinds(
            store, run.run_id
        )
        assert payload["started_at"].endswith("Z") and payload["finished_at"].endswith("Z")
    second_payload = receiver.payloads()[0]
    assert second_payload["findings"][0]["severity"] == "critical"  # the worst first
    assert second_payload["findings_by_severity"] == {"critical": 2, "warning": 3, "info": 1}
    assert {"kind", "severity", "identifier", "label", "old", "new", "detail", "at"} <= set(
        second_payload["findings"][0]
    )
    history = store.history("victor.test")
    assert [c.status for c in history] == ["verified", "handle_mismatch"]


async def test_a_slack_delivery_is_a_signed_text_message(
    store: AuditStore, receiver: Receiver
) -> None:
    run_id, started = store.start_run("watch-list")
    report = RunReport(run_id, "watch-list", started, started + 1, "finished", total=30)
    found = [
        Finding(f"u{i:02}.test", "became_unverified", "verified -> handle_mismatch", started)
        for i in range(25)
    ] + [Finding("boss.test", "did_changed", "did:plc:a -> did:plc:b", started)]
    report.by_severity.update(str(f.severity) for f in found)
    store.watch_add("boss.test", "the CEO")
    webhook = Webhook(receiver.url, secret=SECRET, format="slack", backoff=0.01)
    try:
        webhook.queue(store, report, found)
        assert await webhook.deliver(store) is True
    finally:
        await webhook.aclose()
    ((headers, body),) = receiver.received
    assert signed_by(SECRET, headers, body)
    text = json.loads(body)["text"].splitlines()
    assert text[0] == f"*atwhois audit run {run_id}* (watch-list): 1 critical, 25 warning"
    assert text[1] == "• *critical* boss.test (the CEO): did_changed: did:plc:a -> did:plc:b"
    assert len(text) == 1 + 20 + 1 and text[-1] == "… and 6 more"
    assert store.outbox() == []


async def test_one_transient_failure_is_not_news_n_in_a_row_are(
    devnet: DevnetState, store: AuditStore
) -> None:
    target = [Watched("dave.test")]
    config = dataclasses.replace(_config(devnet), dns_timeout=0.5)
    try:
        async with CachedResolver(Resolver(config), MemoryStore()) as cached:
            auditor = Auditor(cached, store, unreachable_after=2)
            runs = []

            async def run(fault: bool) -> set[tuple[str, str]]:
                devnet.set_dns_faults({"_atproto.dave.test.": "servfail"} if fault else {})
                report = await auditor.run(target)
                runs.append(report.by_status)
                return kinds(store, report.run_id)

            assert await run(False) == set()
            assert await run(True) == set()  # one failure: nothing to report
            assert await run(False) == set()  # and back: the streak resets, no "recovered"
            assert await run(True) == set()
            assert await run(True) == {("dave.test", "unreachable")}  # the N-th in a row
            assert await run(True) == set()  # said once
            assert await run(False) == {("dave.test", "reachable_again")}
            assert [dict(r) for r in runs] == [
                {"verified": 1},
                {"unavailable": 1},
                {"verified": 1},
                {"unavailable": 1},
                {"unavailable": 1},
                {"unavailable": 1},
                {"verified": 1},
            ]
    finally:
        devnet.set_dns_faults({})


async def test_a_plc_outage_is_one_finding_and_moves_no_one_towards_unreachable(
    devnet: DevnetState, store: AuditStore
) -> None:
    """The directory fails for everyone in one run: one `upstream_unavailable` naming it, no
    `unreachable` even with a streak of one, no `reachable_again` when it is back."""
    targets = [Watched(h) for h in ("alice.test", "bob.test", "carol.test", "dave.test")]
    with PlcStandIn(devnet.plc_url) as plc:
        config = dataclasses.replace(_config(devnet), plc_url=plc.url)
        async with CachedResolver(Resolver(config), MemoryStore()) as cached:
            auditor = Auditor(cached, store, unreachable_after=1)
            first = await auditor.run(targets)
            assert first.by_status == {"verified": 4}
            plc.set_fault("status:503")
            down = await auditor.run(targets)
            assert down.by_status == {"unavailable": 4}
            outage = store.run_findings(down.run_id)
            upstream = plc.url.removeprefix("http://")
            assert [(f.identifier, f.kind, f.new) for f in outage] == [
                (upstream, "upstream_unavailable", "4")
            ]
            assert outage[0].severity == "warning"
            streaks = store.previous(t.identifier for t in targets)
            assert all(failures == 0 for _, failures in streaks.values())  # no streak
            plc.set_fault(None)
            back = await auditor.run(targets)
            assert back.by_status == {"verified": 4} and store.run_findings(back.run_id) == []


def test_compare_is_pure_and_ignores_fields_that_vanish() -> None:
    base = Check(
        "a.test",
        1.0,
        "verified",
        "did:plc:a",
        "a.test",
        "a.test",
        "https://p",
        "did:key:k",
        ("did:key:r",),
        "dns",
        False,
        1.0,
    )
    gone = dataclasses.replace(
        base,
        status="did_not_found",
        did=None,
        pds=None,
        signing_key=None,
        rotation_keys=(),
        method="none",
        declared_handle=None,
        handle="handle.invalid",
    )
    findings, failures = compare(base, gone, 0, 3)
    assert [f.kind for f in findings] == ["became_unverified"] and failures == 0
    findings, _ = compare(None, base, 0, 3)
    assert findings == []  # a first check has nothing to compare with


async def test_a_lookup_that_fails_inside_atwhois_is_that_identity_s_transient_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug met by one identity (an exception no rule classified) ends neither the run nor
    the others' checks: that identity's check is unavailable, saying what failed, and the
    failure is logged with its traceback."""

    class Breaking:
        """A directory that resolves every identity but one, and fails inside on that one."""

        config = Config()

        async def refresh(self, identifier: str) -> Identity:
            if identifier == "broken.example":
                raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
            return Identity(
                query=identifier, status=Status.VERIFIED, did="did:plc:x", checked_at=""
            )

    broken = await check_one(Breaking(), "broken.example")  # type: ignore[arg-type]
    fine = await check_one(Breaking(), "fine.example")  # type: ignore[arg-type]
    assert (broken.status, fine.status) == ("unavailable", "verified")
    assert broken.transient and "UnicodeDecodeError" in (broken.error or "")
    assert "audit_check_failed broken.example" in caplog.text
