"""The audit's rules as data: every pair of statuses, every field change, the severity
table (the documentation's is made from it), and the store's promises (labels kept,
interrupted runs closed, a version-1 database upgraded in place)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from atwhois.audit import KINDS, AuditStore, Check, Severity, compare
from atwhois.audit.findings import CHECKED, STATE_SEVERITY, TRANSITIONS
from atwhois.resolver import Status

ROOT = Path(__file__).resolve().parents[2]
BASE = Check(
    identifier="a.test",
    checked_at=1_700_000_000.0,
    status="verified",
    did="did:plc:aaaaaaaaaaaaaaaaaaaaaaaa",
    handle="a.test",
    declared_handle="a.test",
    pds="https://pds.a",
    signing_key="did:key:zA",
    rotation_keys=("did:key:zR1",),
    method="dns",
    conflict=False,
    duration_ms=1.0,
    evidence={"dns": "ok", "https": "not_found", "did_doc": "ok", "plc_log": "ok"},
)


def later(**changes: object) -> Check:
    return dataclasses.replace(BASE, checked_at=BASE.checked_at + 60, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(("before", "after"), list(itertools.product(CHECKED, CHECKED)))
def test_every_change_of_status_is_exactly_one_finding(before: Status, after: Status) -> None:
    """The fields stay the same: only the status moves, and it is said once, or not at all."""
    findings, failures = compare(later(status=str(before)), later(status=str(after)), 0, 3)
    assert failures == 0
    if before is after:
        assert findings == []
        return
    assert [f.kind for f in findings] == [TRANSITIONS[(before, after)]]
    finding = findings[0]
    assert (finding.old, finding.new) == (str(before), str(after))
    assert finding.severity == KINDS[finding.kind][0]


def test_the_transitions_say_what_matters() -> None:
    assert TRANSITIONS[(Status.HANDLE_NOT_FOUND, Status.HANDLE_MISMATCH)] == "status_changed"
    assert TRANSITIONS[(Status.VERIFIED, Status.AMBIGUOUS)] == "became_unverified"
    assert TRANSITIONS[(Status.HANDLE_MISMATCH, Status.VERIFIED)] == "recovered"
    assert TRANSITIONS[(Status.VERIFIED, Status.DID_DEACTIVATED)] == "deactivated"
    assert TRANSITIONS[(Status.INVALID_DOCUMENT, Status.PLC_LOG_INVALID)] == "plc_log_invalid"
    assert {KINDS[k][0] for k in ("deactivated", "plc_log_invalid", "did_changed")} == {
        Severity.CRITICAL
    }
    assert STATE_SEVERITY[Status.VERIFIED] is Severity.OK
    assert STATE_SEVERITY[Status.UNAVAILABLE] is Severity.WARNING
    assert set(TRANSITIONS.values()) <= set(KINDS)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"pds": "https://pds.b"},
            [
                (
                    "pds_changed",
                    "info",
                    "https://pds.a -> https://pds.b",
                    "https://pds.a",
                    "https://pds.b",
                )
            ],
        ),
        (
            {"signing_key": "did:key:zB"},  # the replayed log vouches for it
            [
                (
                    "signing_key_rotated",
                    "info",
                    "did:key:zA -> did:key:zB",
                    "did:key:zA",
                    "did:key:zB",
                )
            ],
        ),
        (
            {"signing_key": "did:key:zB", "evidence": {**BASE.evidence, "plc_log": "skipped"}},
            [
                (
                    "signing_key_changed",
                    "critical",
                    "did:key:zA -> did:key:zB",
                    "did:key:zA",
                    "did:key:zB",
                )
            ],
        ),
        (
            {"rotation_keys": ("did:key:zR1", "did:key:zR2")},
            [
                (
                    "rotation_keys_changed",
                    "info",
                    "1 added, 0 removed",
                    "did:key:zR1",
                    "did:key:zR1 did:key:zR2",
                )
            ],
        ),
        (
            {"rotation_keys": ("did:key:zR3",)},
            [("rotation_keys_changed", "info", "1 added, 1 removed", "did:key:zR1", "did:key:zR3")],
        ),
        (
            {"declared_handle": "b.test"},
            [("handle_changed", "warning", "a.test -> b.test", "a.test", "b.test")],
        ),
        ({"method": "both"}, [("method_changed", "info", "dns -> both", "dns", "both")]),
        ({"method": "none"}, []),  # no method answered: the status says why
        (
            {"conflict": True, "method": "both"},
            [
                ("method_changed", "info", "dns -> both", "dns", "both"),
                (
                    "conflict_appeared",
                    "warning",
                    "DNS and HTTPS name different DIDs",
                    "False",
                    "True",
                ),
            ],
        ),
        (  # another DID: the other identity's keys and PDS are not changes of this one
            {"did": "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb", "pds": "https://pds.b", "signing_key": "x"},
            [
                (
                    "did_changed",
                    "critical",
                    f"{BASE.did} -> did:plc:bbbbbbbbbbbbbbbbbbbbbbbb",
                    BASE.did,
                    "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb",
                )
            ],
        ),
        ({"pds": None, "signing_key": None, "rotation_keys": ()}, []),  # vanished: no claim
        ({"declared_handle": None, "did": None}, []),
    ],
)
def test_field_changes(changes: dict[str, object], expected: list[tuple[str, ...]] | None) -> None:
    findings, failures = compare(BASE, later(**changes), 0, 3)
    found = [(f.kind, str(f.severity), f.detail, f.old, f.new) for f in findings]
    if expected is None:  # the reverse change: the keys went from two to one
        back, _ = compare(later(**changes), BASE, 0, 3)
        assert [(f.kind, f.detail) for f in back] == [
            ("rotation_keys_changed", "0 added, 1 removed")
        ]
        return
    assert found == expected and failures == 0
    assert all(f.identifier == "a.test" and f.at == BASE.checked_at + 60 for f in findings)


def test_rotation_keys_removed_or_reordered() -> None:
    two = later(rotation_keys=("did:key:zR1", "did:key:zR2"))
    swapped = later(rotation_keys=("did:key:zR2", "did:key:zR1"))
    assert [(f.kind, f.detail) for f in compare(two, swapped, 0, 3)[0]] == [
        ("rotation_keys_changed", "reordered")
    ]
    assert [(f.kind, f.detail, f.old, f.new) for f in compare(two, BASE, 0, 3)[0]] == [
        ("rotation_keys_changed", "0 added, 1 removed", "did:key:zR1 did:key:zR2", "did:key:zR1")
    ]


def test_transient_failures_count_to_unreachable_once_then_back() -> None:
    failing = later(status="unavailable", error="DNS timed out", method="none")
    streak = 0
    said = []
    for _ in range(5):
        findings, streak = compare(BASE, failing, streak, 3)
        said.append([(f.kind, f.detail, f.old, f.new) for f in findings])
    assert said == [
        [],
        [],
        [("unreachable", "3 checks in a row failed: DNS timed out", None, "3")],
        [],
        [],
    ]
    assert streak == 5
    findings, streak = compare(BASE, later(), streak, 3)
    assert [(f.kind, f.detail, f.old, f.new) for f in findings] == [
        ("reachable_again", "after 5 failed checks", "5", "0")
    ] and streak == 0
    findings, streak = compare(BASE, later(), 2, 3)  # fewer than N: nothing to say
    assert findings == [] and streak == 0
    findings, streak = compare(BASE, later(), 3, 3)  # exactly N: it was said, so is this
    assert [f.kind for f in findings] == ["reachable_again"] and streak == 0
    assert compare(None, BASE, 2, 3) == ([], 0)  # a first check that reached: streak over
    assert compare(None, failing, 0, 1)[0][0].kind == "unreachable"  # even with no past


def test_a_change_of_status_says_why_when_there_is_a_reason() -> None:
    failing = later(status="handle_mismatch", error="the document declares b.test")
    assert compare(BASE, failing, 0, 3)[0][0].detail == (
        "verified -> handle_mismatch: the document declares b.test"
    )
    assert compare(failing, later(), 0, 3)[0][0].detail == "handle_mismatch -> verified"


def test_a_finding_in_json_has_its_severity_and_an_iso_time() -> None:
    finding = compare(BASE, later(status="did_deactivated", error="tombstoned"), 0, 3)[0][0]
    assert finding.to_json() == {
        "identifier": "a.test",
        "kind": "deactivated",
        "severity": "critical",
        "detail": "verified -> did_deactivated: tombstoned",
        "old": "verified",
        "new": "did_deactivated",
        "at": "2023-11-14T22:14:20.000Z",
    }


def test_conflict_cleared_only_when_both_agree_again() -> None:
    conflicted = later(conflict=True, method="both")
    agree = later(conflict=False, method="both")
    assert [(f.kind, f.detail, f.old, f.new) for f in compare(conflicted, agree, 0, 3)[0]] == [
        ("conflict_cleared", "DNS and HTTPS agree again", "True", "False")
    ]
    ambiguous = later(conflict=False, method="none", status="ambiguous")
    kinds = [f.kind for f in compare(conflicted, ambiguous, 0, 3)[0]]
    assert kinds == ["became_unverified"]  # not "DNS and HTTPS agree again"
    https_gone = later(conflict=False, method="dns")
    assert "conflict_cleared" not in [f.kind for f in compare(conflicted, https_gone, 0, 3)[0]]


def test_a_label_is_kept_unless_a_new_one_is_given(tmp_path: Path) -> None:
    store = AuditStore(tmp_path / "a.db")
    assert store.watch_add("a.test", "ours") is True
    assert store.watch_add("a.test") is False
    assert store.labels() == {"a.test": "ours"}
    store.watch_add("a.test", "theirs")
    assert store.labels() == {"a.test": "theirs"}


def test_a_run_whose_process_died_is_closed_as_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    script = (
        "import os, sys; from pathlib import Path; from atwhois.audit import AuditStore; "
        f"s = AuditStore(Path({str(path)!r})); print(s.start_run('watch-list')[0]); "
        "sys.stdout.flush(); os._exit(0)"  # no finish_run: as if killed mid-way
    )
    run_id = int(
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout
    )
    mine = AuditStore(path)  # opening it closes what a dead process left running
    own, _ = mine.start_run("watch-list")
    runs = {r["id"]: r for r in mine.runs()}
    assert runs[run_id]["status"] == "interrupted" and runs[run_id]["finished_at"]
    assert runs[own]["status"] == "running"  # a live process's run is left alone
    assert AuditStore(path).runs()[0]["status"] == "running"


def test_a_version_1_database_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema_version', '1');
        CREATE TABLE watch (identifier TEXT PRIMARY KEY, label TEXT, added_at REAL NOT NULL);
        CREATE TABLE runs (id INTEGER PRIMARY KEY, started_at REAL NOT NULL, finished_at REAL,
            source TEXT NOT NULL, summary TEXT);
        CREATE TABLE checks (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL,
            identifier TEXT NOT NULL, checked_at REAL NOT NULL, status TEXT NOT NULL,
            data TEXT NOT NULL);
        CREATE TABLE findings (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL,
            identifier TEXT NOT NULL, at REAL NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL);
        CREATE TABLE streaks (identifier TEXT PRIMARY KEY, failures INTEGER NOT NULL,
            last_reached INTEGER);
        INSERT INTO watch VALUES ('a.test', 'ours', 1700000000);
        INSERT INTO runs VALUES (1, 1700000000, 1700000010, 'watch-list', '{}');
        INSERT INTO runs VALUES (2, 1700000100, NULL, 'watch-list', NULL);
        INSERT INTO findings VALUES (1, 1, 'a.test', 1700000005, 'did_changed', 'x -> y');
        INSERT INTO findings VALUES (2, 1, 'a.test', 1700000005, 'became_invalid', 'gone');
        """
    )
    db.execute(
        "INSERT INTO checks VALUES (1, 1, 'a.test', 1700000005, 'verified', ?)",
        (json.dumps({**BASE.to_json(), "checked_at": 1700000005.0}),),
    )
    db.commit()
    db.close()
    store = AuditStore(path)
    found = store.run_findings(1)
    assert [(f.kind, str(f.severity)) for f in found] == [
        ("did_changed", "critical"),
        ("became_unverified", "warning"),
    ]
    assert {r["id"]: r["status"] for r in store.runs()} == {1: "finished", 2: "interrupted"}
    assert store.states(["a.test"])["a.test"].status == "verified"
    assert store.labels() == {"a.test": "ours"}
    AuditStore(path)  # opened again: already version 2, nothing to do


def test_progress_shows_done_total_rate_and_time_left(capsys: pytest.CaptureFixture[str]) -> None:
    from atwhois.cli.audit import progress_line

    now = iter([100.0, 102.0, 104.0])
    show = progress_line(clock=lambda: next(now))
    show(10, 40)  # 10 in 2 s: 5/s, 30 left: 6 s
    show(40, 40)
    err = capsys.readouterr().err
    assert err == "\r\x1b[K  10/40  5.0/s  ETA 6 s\r\x1b[K  40/40  10.0/s  ETA 0 s\n"
