"""Audits on the test network: change the world between runs, assert the exact findings."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import hashlib
import hmac
import io
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from audit import Auditor, AuditStore, Check, Finding, RunReport, Watched, compare
from audit.findings import Severity
from audit.report import COLUMNS, Report, Row
from audit.webhook import Webhook
from cache import CachedResolver, MemoryStore
from devnet import world
from devnet.atwhois import ATWHOIS, running_daemon
from devnet.atwhois import run as run_cli
from devnet.forwarder import PlcStandIn
from devnet.network import DevnetState
from devnet.plc_ops import PlcAccount, new_handle
from resolver import Config, Resolver, Status
from tests.support import metrics
from tests.support.webhook_receiver import Receiver


def _config(devnet: DevnetState) -> Config:
    return devnet.config(verify_plc=True, per_host_limit=4)


@pytest.fixture
def store(tmp_path: Path) -> AuditStore:
    return AuditStore(tmp_path / "audit.db")


def kinds(store: AuditStore, run_id: int) -> set[tuple[str, str]]:
    return {(f.identifier, f.kind) for f in store.run_findings(run_id)}


SECRET = "s3cret-hook-key"


def signed_by(secret: str, headers: dict[str, str], body: bytes) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["X-Atwhois-Signature"], expected)


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
        assert await webhook.deliver(store, report, found) is True
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
            assert all(store.previous(t.identifier)[1] == 0 for t in targets)  # no streak
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


def _cli(env: dict[str, str]) -> Callable[..., tuple[int, str, str]]:
    """`atwhois ARGS` with this environment: exit code, stdout, stderr."""
    return lambda *args, stdin=None: run_cli(list(args), env, stdin)


def test_cli_audit_of_a_file_and_the_watch_list(devnet: DevnetState, tmp_path: Path) -> None:
    env = {
        **devnet.env(),
        "ATWHOIS_AUDIT_DB": str(tmp_path / "audit.db"),
        "ATWHOIS_CACHE": "memory:",
    }
    run = _cli(env)
    listing = tmp_path / "handles.txt"
    listing.write_text("# audited without a watch-list\nalice.test\n@Carol.Test\nnobody.test\n")
    code, out, _ = run("audit", str(listing), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and list(rows[0]) == list(COLUMNS)
    # sorted by severity, then name: the handle that does not resolve first
    assert [(r["identifier"], r["status"], r["severity"]) for r in rows] == [
        ("nobody.test", "handle_not_found", "warning"),
        ("alice.test", "verified", "ok"),
        ("carol.test", "verified", "ok"),
    ]
    assert rows[0]["reason"] and rows[0]["since"].endswith("Z")
    assert run("watch", "list")[1] == ""  # the file did not become a watch-list
    assert run("watch", "add", "alice.test", "bob.test", "--label", "team")[1].split() == [
        "added",
        "alice.test",
        "added",
        "bob.test",
    ]
    assert run("watch", "add", "alice.test")[1].strip() == "updated alice.test"
    code, out, _ = run("watch", "export")
    assert out == "identifier,label\nalice.test,team\nbob.test,team\n"  # the label was kept
    code, out, _ = run("audit", "--format", "json")
    report = json.loads(out)
    assert code == 0 and report["total"] == 2 and report["by_status"] == {"verified": 2}
    assert {r["label"] for r in report["rows"]} == {"team"}
    code, out, _ = run("audit", "--format", "markdown")
    assert out.splitlines()[0].startswith("| severity | identifier | label |")
    assert "| ok | bob.test | team |" in out
    code, out, _ = run("audit", "history", "alice.test")
    assert code == 0 and out.startswith("alice.test: 3 checks")  # the file run counts too
    assert run("watch", "remove", "bob.test")[1].strip() == "removed bob.test"
    assert run("audit", "history", "nobody-ever.test")[0] == 1
    assert run("watch", "add", "bad..handle")[0] == 2


def test_watch_import_is_all_or_nothing_and_export_reads_back(
    devnet: DevnetState, tmp_path: Path
) -> None:
    run = _cli({**devnet.env(), "ATWHOIS_AUDIT_DB": str(tmp_path / "audit.db")})
    bad = "alice.test,ours\n# a comment\n\nbad..handle\ncarol.test,x,y\n"
    code, _, err = run("watch", "import", "-", stdin=bad)
    assert code == 2 and "line 4:" in err and "line 5: 3 columns" in err
    assert run("watch", "export")[1] == "identifier,label\n"  # nothing was added
    code, out, _ = run("watch", "import", "-", stdin='alice.test,"ours, the PDS"\n@Carol.Test\n')
    assert code == 0 and out.strip() == "imported 2 identifiers: 2 new, 0 already watched"
    exported = run("watch", "export")[1]
    assert exported == 'identifier,label\nalice.test,"ours, the PDS"\ncarol.test,\n'
    again = tmp_path / "again.db"
    code, out, _ = _cli({**devnet.env(), "ATWHOIS_AUDIT_DB": str(again)})(
        "watch", "import", "-", stdin=exported
    )
    assert code == 0 and "2 new" in out
    assert _cli({**devnet.env(), "ATWHOIS_AUDIT_DB": str(again)})("watch", "export")[1] == exported


def test_an_audit_an_operator_can_act_on(
    devnet: DevnetState, tmp_path: Path, receiver: Receiver
) -> None:
    """Cron's view: the world changes between runs; the summary names who is broken, the
    exit code follows --fail-on, and each run that found something is delivered once,
    signed, also when the receiver fails twice, and on the next run when it was down."""
    names = [new_handle(tag) for tag in ("stays", "moves", "goes")]
    stays, moves, goes = (PlcAccount(devnet.plc_url, name) for name in names)
    handles = dict(zip((stays, moves, goes), names, strict=True))
    devnet.set_txts({h: [f"did={a.did}"] for a, h in handles.items()})
    env = {
        **devnet.env(),
        "ATWHOIS_AUDIT_DB": str(tmp_path / "audit.db"),
        "ATWHOIS_CACHE": "memory:",
        "ATWHOIS_WEBHOOK": receiver.url,
        "ATWHOIS_WEBHOOK_SECRET": SECRET,
    }
    run = _cli(env)
    listing = "".join(
        f"{h},{label}\n" for h, label in zip(handles.values(), ("a", "b", "c"), strict=True)
    )
    assert run("watch", "import", "-", stdin=listing)[0] == 0
    code, out, _ = run("audit")
    assert code == 0 and "3 identities" in out and "0 critical, 0 warning" in out
    assert receiver.received == []  # nothing found, nothing sent

    goes.tombstone()
    moves.set_handle(new_handle("elsewhere"))
    receiver.failures = 2  # refused twice, then taken
    code, out, _ = run("audit")
    assert code == 1  # a critical identity, --fail-on critical by default
    lines = out.splitlines()
    critical, warning = lines.index("critical:"), lines.index("warning:")
    assert lines[critical + 1].startswith(
        f"  {handles[goes]} [c]: deactivated; did_deactivated since "
    )
    assert lines[critical + 1].endswith("(was verified)")
    assert lines[warning + 1].startswith(
        f"  {handles[moves]} [b]: became_unverified, handle_changed"
    )
    assert handles[stays] not in out  # nothing to say about it
    assert len(receiver.received) == 1 and receiver.attempts.total() == 3
    headers, body = receiver.received[0]
    assert signed_by(SECRET, headers, body)
    delivered = json.loads(body)
    assert [
        (f["identifier"], f["kind"], f["severity"], f["label"]) for f in delivered["findings"]
    ] == [
        (handles[goes], "deactivated", "critical", "c"),
        (handles[moves], "became_unverified", "warning", "b"),
        (handles[moves], "handle_changed", "warning", "b"),
    ]
    assert (
        delivered["findings"][0]["old"] == "verified"
        and delivered["findings"][0]["new"] == "did_deactivated"
    )

    # Nothing new: no delivery; the state still decides the exit code, level by level.
    code, out, _ = run("audit", "--format", "json")
    report = json.loads(out)
    assert code == 1 and report["findings_by_severity"] == {} and len(receiver.received) == 1
    assert [(r["identifier"], r["severity"], r["previous"]) for r in report["rows"]] == [
        (handles[goes], "critical", "verified"),
        (handles[moves], "warning", "verified"),
        (handles[stays], "ok", None),
    ]
    just = {name: tmp_path / f"{name}.txt" for name in ("moves", "stays")}
    just["moves"].write_text(handles[moves] + "\n")
    just["stays"].write_text(handles[stays] + "\n")
    for target, fail_on, expected in [
        ("moves", "critical", 0),
        ("moves", "warning", 1),
        ("moves", "any", 1),
        ("stays", "any", 0),
    ]:
        code, _, _ = run("audit", str(just[target]), "--fail-on", fail_on)
        assert code == expected, (target, fail_on)

    # The receiver is down for a whole run: exit 3, the payload kept; the next run sends it.
    receiver.down = True
    stays.set_handle(new_handle("renamed"))
    code, out, _ = run("audit")
    assert code == 3 and "webhook: NOT delivered" in out
    owed = max(int(r) for r in receiver.attempts)
    receiver.down = False
    code, _, _ = run("audit")
    assert code == 1
    assert [p["run_id"] for p in receiver.payloads()][1:] == [owed]  # once, late, complete
    assert {f["identifier"] for f in receiver.payloads()[1]["findings"]} == {handles[stays]}


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


def _spawned_children(pid: int) -> list[int]:
    """The worker processes `multiprocessing` spawned for `pid` (not its resource tracker)."""
    found = []
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        with contextlib.suppress(FileNotFoundError):
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(int(child))
    return found


def test_audit_workers_report_what_one_process_does_and_a_dead_one_fails_the_run(
    devnet: DevnetState, tmp_path: Path
) -> None:
    listing = tmp_path / "handles.txt"
    listing.write_text("alice.test\n@Carol.Test\nnobody.test\nbob-old.test\nerror.test\n")
    reports = {}
    for workers in ("1", "2"):
        env = {
            **devnet.env(),
            "ATWHOIS_AUDIT_DB": str(tmp_path / f"audit-{workers}.db"),
            "ATWHOIS_CACHE": f"sqlite://{tmp_path}/cache-{workers}.db",
        }
        code, out, err = _cli(env)("audit", str(listing), "--format", "csv", "--workers", workers)
        assert code == 0, err
        reports[workers] = [
            {k: v for k, v in row.items() if k not in ("since", "ms")}  # times
            for row in csv.DictReader(io.StringIO(out))
        ]
    assert reports["2"] == reports["1"] and len(reports["2"]) == 5
    assert {row["status"] for row in reports["2"]} >= {"verified", "handle_not_found"}

    code, _, err = _cli(env)("audit", str(listing), "--workers", "3", "--per-host", "2")
    assert code == 2 and "--per-host" in err  # three workers cannot share two requests a host

    # Lookups that take seconds (headers after 30 s): a worker killed meanwhile fails the run.
    listing.write_text("slow-headers.test\n" * 4)
    audit = subprocess.Popen(
        [ATWHOIS, "audit", str(listing), "--workers", "2", "--concurrency", "4"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while len(workers_seen := _spawned_children(audit.pid)) < 2:
            assert time.monotonic() < deadline and audit.poll() is None, "no workers started"
            time.sleep(0.05)
        time.sleep(1.0)  # their lookups under way
        os.kill(workers_seen[0], signal.SIGKILL)
        _, err = audit.communicate(timeout=60)
    finally:
        if audit.poll() is None:
            audit.kill()
    assert audit.returncode == 3, err
    assert f"worker {workers_seen[0]} died" in err


@pytest.mark.parametrize("shape", ["rows and outages", "rows only", "nothing"])
def test_a_report_written_a_row_at_a_time_is_the_json_document_it_was(shape: str) -> None:
    """`Report.write` streams the JSON report: byte for byte what `json.dumps(indent=2)` of
    the whole report wrote, so that readers of the old output see no change."""
    run = RunReport(7, "watch-list", 1000.0, 1010.0, "finished", 2)
    changed = Finding("b.test", "did_changed", "did:plc:a -> did:plc:b", 1005.0, "a", "b")
    rows = [
        Row(
            Severity.CRITICAL,
            "b.test",
            "team",
            "handle_mismatch",
            'says "c"\n',
            None,
            "verified",
            "did:plc:b",
            "handle.invalid",
            None,
            "dns",
            12.5,
            (changed,),
        ),
        Row(
            Severity.OK,
            "a.test",
            None,
            "verified",
            None,
            "2025-01-01T00:00:00.000Z",
            None,
            "did:plc:a",
            "a.test",
            "https://pds.test",
            "both",
            3.0,
            (),
        ),
    ]
    outage = Finding("https://plc.directory", "upstream_unavailable", "503", 1006.0, None, "3")
    report = {
        "rows and outages": Report(run, rows, [outage]),
        "rows only": Report(run, rows, []),
        "nothing": Report(run, [], []),
    }[shape]
    out = io.StringIO()
    report.write(out, "json")
    whole = {
        **report.run.to_json(),
        "rows_by_severity": report.counts(),
        "rows": [r.to_json() for r in report.rows],
        "upstreams": [f.to_json() for f in report.upstreams],
    }
    assert out.getvalue() == json.dumps(whole, indent=2) + "\n"
