"""Audits on the test network: change the world between runs, assert the exact findings."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from audit import Auditor, AuditStore, Check, Watched, compare
from audit.webhook import Webhook
from cache import CachedResolver, MemoryStore
from resolver import Config, Resolver, Status
from tests import metrics
from tests.daemon import running_daemon
from tests.devnet import world
from tests.devnet.network import DevnetState

ATWHOIS = str(Path(sys.executable).with_name("atwhois"))


def _config(devnet: DevnetState) -> Config:
    return devnet.config(verify_plc=True, per_host_limit=4)


@pytest.fixture
def store(tmp_path: Path) -> AuditStore:
    return AuditStore(tmp_path / "audit.db")


def kinds(store: AuditStore, run_id: int) -> set[tuple[str, str]]:
    return {(f.identifier, f.kind) for f in store.run_findings(run_id)}


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[str, list[dict[str, object]]]]:
    """A webhook endpoint that fails each delivery once (500) before accepting it."""
    received: list[dict[str, object]] = []
    attempts: dict[str, int] = {}

    async def hook(request: web.Request) -> web.Response:
        body = await request.json()
        key = f"{body['identifier']}/{body['kind']}"
        attempts[key] = attempts.get(key, 0) + 1
        if attempts[key] == 1:
            return web.Response(status=500)
        received.append(body)
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/hook", received
    await runner.cleanup()


async def test_the_world_changes_between_runs(
    devnet: DevnetState, store: AuditStore, receiver: tuple[str, list[dict[str, object]]]
) -> None:
    url, received = receiver
    targets = [Watched(h) for h in ("victor.test", "wendy.test", "xavier.test", "yvonne.test")]
    webhook = Webhook(url, backoff=0.05)
    async with CachedResolver(Resolver(_config(devnet)), MemoryStore()) as cached:
        auditor = Auditor(cached, store, concurrency=4, webhook=webhook)
        first = await auditor.run(targets)
        assert first.by_status == {"verified": 4} and not kinds(store, first.run_id)
        assert {c.method for c in store.run_checks(first.run_id)} == {"dns"}

        devnet.submit("victor", "handle", handle="victor2.test")  # a handle change op
        devnet.submit("wendy", "tombstone")  # a tombstone
        devnet.set_txt("xavier.test", [f"did={devnet.did('alice')}"])  # TXT edited, reloaded
        devnet.set_txt("yvonne.test", [])  # DNS record removed ...
        devnet.set_file("yvonne.test", world.WELL_KNOWN, devnet.did("yvonne"))  # ... HTTPS added
        second = await auditor.run(targets)
        assert kinds(store, second.run_id) == {
            ("victor.test", "became_invalid"),
            ("victor.test", "handle_changed"),
            ("wendy.test", "became_invalid"),
            ("wendy.test", "deactivated"),
            ("xavier.test", "became_invalid"),
            ("xavier.test", "did_changed"),
            ("xavier.test", "handle_changed"),
            ("xavier.test", "signing_key_rotated"),
            ("xavier.test", "rotation_keys_changed"),
            ("yvonne.test", "method_changed"),
        }
        details = {(f.identifier, f.kind): f.detail for f in store.run_findings(second.run_id)}
        assert details[("victor.test", "handle_changed")] == "victor.test -> victor2.test"
        assert details[("yvonne.test", "method_changed")] == "dns -> https"
        assert details[("xavier.test", "did_changed")] == (
            f"{devnet.did('xavier')} -> {devnet.did('alice')}"
        )

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
    delivered = {(str(f["identifier"]), str(f["kind"])) for f in received}
    assert delivered == kinds(store, second.run_id) | kinds(store, third.run_id) | kinds(
        store, fourth.run_id
    ) | kinds(store, fifth.run_id)
    assert webhook.delivered == len(received) and webhook.failed == 0
    history = store.history("victor.test")
    assert [c.status for c in history] == ["verified", "handle_mismatch"]


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
    assert [f.kind for f in findings] == ["became_invalid"] and failures == 0
    findings, _ = compare(None, base, 0, 3)
    assert findings == []  # a first check has nothing to compare with


def test_cli_audit_of_a_file_and_the_watch_list(devnet: DevnetState, tmp_path: Path) -> None:
    env = {
        **devnet.env(),
        "ATWHOIS_AUDIT_DB": str(tmp_path / "audit.db"),
        "ATWHOIS_CACHE": "memory:",
    }

    def run(*args: str) -> tuple[int, str]:
        done = subprocess.run(
            [ATWHOIS, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        return done.returncode, done.stdout + done.stderr

    listing = tmp_path / "handles.txt"
    listing.write_text("# audited without a watch-list\nalice.test\n@Carol.Test\nnobody.test\n")
    code, out = run("audit", str(listing), "--format", "csv")
    rows = out.splitlines()
    assert code == 0 and rows[0] == "identifier,status,did,handle,method,pds,ms,findings"
    assert sorted(r.split(",")[:2] for r in rows[1:]) == [
        ["alice.test", "verified"],
        ["carol.test", "verified"],
        ["nobody.test", "handle_not_found"],
    ]
    assert run("watch", "list")[1] == ""  # the file did not become a watch-list
    assert run("watch", "add", "alice.test", "bob.test", "--label", "team")[1].split() == [
        "added",
        "alice.test",
        "added",
        "bob.test",
    ]
    code, out = run("audit", "--format", "json")
    report = json.loads(out)
    assert code == 0 and report["total"] == 2 and report["by_status"] == {"verified": 2}
    code, out = run("audit", "--format", "markdown")
    assert out.splitlines()[0].startswith("| identifier | status |") and "| bob.test |" in out
    code, out = run("audit", "history", "alice.test")
    assert code == 0 and out.startswith("alice.test: 3 checks")  # the file run counts too
    assert run("watch", "remove", "bob.test")[1].strip() == "removed bob.test"
    assert run("audit", "history", "nobody-ever.test")[0] == 1
    assert run("watch", "add", "bad..handle")[0] == 2


def test_the_daemon_schedules_audits_and_serves_them(devnet: DevnetState, tmp_path: Path) -> None:
    env = {**devnet.env(), "ATWHOIS_AUDIT_DB": str(tmp_path / "audit.db")}
    args = ("--cache", "memory:", "--refresh-token", "t0k", "--audit-interval", "0.5")
    with running_daemon(env, tmp_path / "serve.log", *args) as daemon:
        auth = {"Authorization": "Bearer t0k"}
        assert (
            httpx.post(daemon.url + "/v1/watch", json={"identifier": "grace.test"}).status_code
            == 401
        )
        added = httpx.post(
            daemon.url + "/v1/watch", headers=auth, json={"identifier": "Grace.Test", "label": "x"}
        )
        assert added.status_code == 201 and added.json()["identifier"] == "grace.test"
        httpx.post(daemon.url + "/v1/watch", headers=auth, json={"identifier": "nobody.test"})
        assert [w["identifier"] for w in httpx.get(daemon.url + "/v1/watch").json()] == [
            "grace.test",
            "nobody.test",
        ]
        since = time.time()
        deadline = time.monotonic() + 20
        while True:
            runs = httpx.get(daemon.url + "/v1/audit/runs").json()
            if any(r["summary"] and r["summary"]["total"] == 2 for r in runs):
                break
            assert time.monotonic() < deadline, runs
            time.sleep(0.2)
        text = httpx.get(daemon.url + "/metrics").text
        assert metrics.value(text, "atwhois_watched", status="verified") == 1
        assert metrics.value(text, "atwhois_watched", status="handle_not_found") == 1
        assert metrics.value(text, "atwhois_audit_run_seconds") > 0
        assert httpx.get(daemon.url + "/v1/audit/findings", params={"since": since}).json() == []
        bad = httpx.get(daemon.url + "/v1/audit/findings", params={"since": "yesterday"})
        assert bad.status_code == 400
        removed = httpx.delete(daemon.url + "/v1/watch/nobody.test", headers=auth)
        assert removed.status_code == 200
        assert httpx.delete(daemon.url + "/v1/watch/nobody.test", headers=auth).status_code == 404
