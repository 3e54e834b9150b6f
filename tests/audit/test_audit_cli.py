"""Audits as an operator runs them: `atwhois audit` and `watch` on the command line, the
daemon's scheduled runs and API, worker processes, and the report's formats."""

from __future__ import annotations

import contextlib
import csv
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

from atwhois.audit import Finding, RunReport
from atwhois.audit.findings import Severity
from atwhois.audit.report import COLUMNS, Report, Row
from devnet.atwhois import ATWHOIS, running_daemon
from devnet.network import DevnetState
from devnet.plc_ops import PlcAccount, new_handle
from devnet.process import open_sockets
from tests.support import metrics
from tests.support.cli import run_here as run_cli
from tests.support.waiting import until
from tests.support.webhook_receiver import SECRET, Receiver, signed_by


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
    # three checks (the file run's too) that found nothing new keep one row: the last
    assert code == 0 and out.startswith("alice.test: 1 check kept")
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
        # its lookups under way: a worker holds no socket until it asks the network
        until(lambda: open_sockets(workers_seen[0]) > 0, 20)
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


def test_audit_input_mistakes_say_where_and_what_to_do(tmp_path: Path) -> None:
    """Issue 31, item 8: a bad line of an audit file is named by its file and line number
    (every bad line, nothing audited); an empty watch-list points at how to fill it."""
    run = run_cli
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    listing = tmp_path / "handles.txt"
    listing.write_text("# ours\nalice.test\n\nnot valid!\nbob.test\nat://also bad\n")
    audit_db = ("--audit-db", str(tmp_path / "audit.db"))
    code, out, err = run(["audit", str(listing), "--dev", *audit_db], env)
    assert code == 2 and out == ""
    assert f"{listing}:4: 'not valid!' is not a valid handle [H-SYN-2]" in err
    assert f"{listing}:6: " in err and "nothing audited" in err
    code, out, err = run(["audit", *audit_db], env)
    assert code == 0 and out == ""
    assert "the watch-list is empty" in err and "atwhois watch add" in err
    assert "atwhois watch import" in err


def test_a_watch_label_over_the_cap_is_refused_by_the_command_too(tmp_path: Path) -> None:
    """The label cap (`audit.store.check_label`) on the command line: `watch add` and
    `watch import` (named by its line) refuse it and change nothing."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    audit_db = ("--audit-db", str(tmp_path / "audit.db"))
    code, _, err = run_cli(
        ["watch", "add", "alice.test", "--dev", "--label", "x" * 201, *audit_db], env
    )
    assert code == 2 and "a label of 201 characters; at most 200" in err
    listing = tmp_path / "watch.csv"
    listing.write_text("alice.test,ours\nbob.test," + "y" * 300 + "\n")
    code, _, err = run_cli(["watch", "import", str(listing), "--dev", *audit_db], env)
    assert code == 2 and "line 2: a label of 300 characters; at most 200" in err
    code, out, _ = run_cli(["watch", "list", *audit_db], env)
    assert code == 0 and out == ""
