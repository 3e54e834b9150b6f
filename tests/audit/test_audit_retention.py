"""What the audit store keeps over many runs, on SQLite and on PostgreSQL: each change, each
identity's last check and the last that reached its upstream, every finding until it was
delivered; what changed nothing is one row, and the rest goes after `audit_keep_days`.

The checks come from a script (the store's rules are what is under test here); audits of
the test network keep the same rows (test_audit: a handle change's history; test_audit_cli:
three unchanged checks kept as one)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from atwhois.audit import Auditor, AuditStore, Check
from atwhois.audit.store import DAY
from atwhois.audit.webhook import Webhook
from devnet.identities import scripted, verified_check
from devnet.postgres import database
from tests.support.webhook_receiver import Receiver


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with database(request.param, tmp_path, "atwhois_audit") as url:
        yield url


def _unavailable(identifier: str) -> Check:
    return dataclasses.replace(
        verified_check(identifier, ""),
        status="unavailable",
        did=None,
        method="none",
        error="connect timeout",
        upstream="pds.c.test",
    )


def statuses(store: AuditStore, identifier: str) -> list[str]:
    return [c.status for c in store.history(identifier)]


async def test_retention_keeps_changes_last_checks_and_undelivered_findings(
    where: str, receiver: Receiver
) -> None:
    world = {
        "a.test": verified_check("a.test", "did:plc:a"),
        "b.test": verified_check("b.test", "did:plc:b"),
        "c.test": verified_check("c.test", "did:plc:c"),
    }
    store = AuditStore(where)
    store.watch_import([(name, None) for name in world])
    receiver.down = True
    webhook = Webhook(receiver.url, attempts=1)
    # No pruning at the end of a run: this test prunes as of later dates itself.
    auditor = Auditor(None, store, check=scripted(world), webhook=webhook, keep_days=0)  # type: ignore[arg-type]
    try:
        runs = [await auditor.run() for _ in range(2)]  # nothing changes
        assert [r.by_status for r in runs] == [{"verified": 3}] * 2
        assert [len(store.history(name)) for name in world] == [1, 1, 1]  # one row each
        assert {c.identifier for c in store.run_checks(runs[1].run_id)} == set(world)

        world["b.test"] = verified_check("b.test", "did:plc:other")  # a takeover
        world["c.test"] = _unavailable("c.test")  # its upstream stops answering
        runs.append(await auditor.run())  # run 3: b's change, c's first failure
        assert {f.kind for f in store.run_findings(runs[2].run_id)} == {"did_changed"}
        runs.append(await auditor.run())  # run 4: the same
        runs.append(await auditor.run())  # run 5: c's third failure in a row
        assert {f.kind for f in store.run_findings(runs[4].run_id)} == {"unreachable"}
        assert [r.delivered for r in runs] == [None, None, False, False, False]
        owed = [body["run_id"] for _, body in store.outbox()]
        assert owed == [runs[2].run_id, runs[4].run_id]

        assert statuses(store, "a.test") == ["verified"]  # five checks, one row
        # b: its first check, the change, the last (runs 4 and 5 in one row)
        assert [c.did for c in store.history("b.test")] == [
            "did:plc:b",
            "did:plc:other",
            "did:plc:other",
        ]
        # c: verified, the first failure (a change of status), run 4's (replaced by no one:
        # run 5 found something), run 5's
        assert statuses(store, "c.test") == ["verified", *["unavailable"] * 3]

        # 10 days on, keeping 1: what changed nothing goes, unless it is an identity's last
        # check or the last that reached its upstream; owed findings and their runs stay.
        later = time.time() + 10 * DAY
        assert store.prune(1, now=later) == {"checks": 2, "findings": 0, "runs": 3}
        assert statuses(store, "a.test") == ["verified"]
        assert [c.did for c in store.history("b.test")] == ["did:plc:other"] * 2
        assert statuses(store, "c.test") == ["verified", "unavailable", "unavailable"]
        previous, failures = store.previous(["c.test"])["c.test"]
        assert previous is not None and previous.status == "verified" and failures == 3
        assert {r["id"] for r in store.runs()} == {runs[2].run_id, runs[4].run_id}
        assert (
            len(store.run_findings(runs[2].run_id)) == len(store.run_findings(runs[4].run_id)) == 1
        )

        receiver.down = False
        sixth = await auditor.run()  # finds nothing new; delivers what was owed, in order
        assert sixth.delivered is True and store.outbox() == []
        assert [p["run_id"] for p in receiver.payloads()] == owed
        # delivered: now they may go, with their runs; the changes stay
        assert store.prune(1, now=later + 2 * DAY)["findings"] == 2
        assert store.findings() == [] and store.runs() == []
        assert [c.did for c in store.history("b.test")] == ["did:plc:other"] * 2
        assert statuses(store, "c.test")[:2] == ["verified", "unavailable"]
        assert store.prune(0, now=later + 100 * DAY) == {}  # 0: keep everything
    finally:
        await webhook.aclose()
        store.close()


async def test_an_identity_that_stays_the_same_costs_one_row(where: str) -> None:
    """Many runs over identities that do not change: the checks table holds one row per
    identity (the store does not grow with the number of runs)."""
    world = {f"u{i}.test": verified_check(f"u{i}.test", f"did:plc:u{i}") for i in range(50)}
    store = AuditStore(where)
    store.watch_import([(name, None) for name in world])
    auditor = Auditor(None, store, check=scripted(world), concurrency=8)  # type: ignore[arg-type]
    try:
        for _ in range(6):
            report = await auditor.run()
            assert report.by_status == {"verified": 50} and report.total == 50
        rows = store.db.one("SELECT count(*) FROM checks")
        assert rows is not None and rows[0] == 50
        assert store.db.one("SELECT count(*) FROM run_items") == (0,)  # work rows are gone
    finally:
        store.close()
