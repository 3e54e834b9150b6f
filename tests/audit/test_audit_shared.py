"""Audits across processes: `atwhois audit` processes sharing one audit database (the
PostgreSQL that `make test` starts, as several hosts would; and a SQLite file, as several
processes of one host would) share one watch-list run. Every identity is checked once
whoever checks it; a process killed mid-run has what it claimed taken over once its lease
ran out; the run is finished once, with one webhook delivery."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from atwhois.audit import AuditStore, Check
from devnet import world
from devnet.atwhois import ATWHOIS, running_daemon
from devnet.atwhois import run as run_cli
from devnet.identities import verified_check
from devnet.network import DevnetState
from devnet.postgres import database
from tests.support.waiting import until
from tests.support.webhook_receiver import Receiver

IDENTITIES = 1200  # generated did:web hosts: enough that a run outlasts two start-ups


def _serve_did_web(devnet: DevnetState, host: str) -> None:
    devnet.set_file(host, world.WELL_KNOWN, f"did:web:{host}")
    devnet.set_file(host, world.DID_JSON, json.dumps(world.did_web_document(host)))


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_processes_share_a_run_and_take_over_from_a_killed_one(
    devnet: DevnetState, tmp_path: Path, receiver: Receiver, backend: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    breaking = [f"shared-{i}-{tag}{world.BULK_SUFFIX}" for i in range(2)]
    for host in breaking:
        _serve_did_web(devnet, host)
    with database(backend, tmp_path, "atwhois_audit") as where:
        env = {
            **devnet.env(),
            "ATWHOIS_AUDIT_DB": where,
            "ATWHOIS_CACHE": "memory:",
            "ATWHOIS_WEBHOOK": receiver.url,
            "ATWHOIS_AUDIT_LEASE": "2",
        }
        # A first check of the two identities that will break: what the run compares with.
        first = tmp_path / "first.txt"
        first.write_text("\n".join(breaking) + "\n")
        code, out, err = run_cli(["audit", str(first), "--format", "json"], env)
        assert code == 0 and json.loads(out)["by_status"] == {"verified": 2}, err
        for host in breaking:
            devnet.set_file(host, world.WELL_KNOWN, None)  # the handle stops verifying
        names = [world.bulk_host(i) for i in range(IDENTITIES)] + breaking
        code, _, err = run_cli(["watch", "import", "-"], env, "\n".join(names) + "\n")
        assert code == 0, err

        store = AuditStore(where)
        audit = [ATWHOIS, "audit", "--format", "json", "--concurrency", "4", "--per-host", "4"]
        processes: list[subprocess.Popen[str]] = []
        try:
            for _ in range(2):
                processes.append(
                    subprocess.Popen(
                        audit,
                        env={**os.environ, **env},
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                )
            until(lambda: _running_run(store) is not None, timeout=30)
            run_id = _running_run(store)
            assert run_id is not None
            owners = {f"{os.uname().nodename}:{p.pid}" for p in processes}
            # both take part, and checks are being recorded
            until(lambda: _workers(store, run_id) == owners and _checked(store, run_id) >= 50, 30)
            # the one killed holds identities it claimed: between two batches a process
            # holds none, and one killed then leaves nothing to take over
            until(lambda: _holding(store, run_id, processes) is not None, 30)
            killed = _holding(store, run_id, processes) or processes[0]
            survivor = processes[1] if killed is processes[0] else processes[0]
            killed.send_signal(signal.SIGKILL)
            killed.wait(timeout=10)
            assert store.runs_shared.status(run_id) == "running"  # killed mid-run ...
            held = store.db.one(
                "SELECT count(*) FROM run_items WHERE run_id=? AND owner=?",
                (run_id, f"{os.uname().nodename}:{killed.pid}"),
            )
            assert held is not None and held[0] > 0  # ... holding identities it claimed
            out, err = survivor.communicate(timeout=120)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
        assert survivor.returncode == 0, err  # warnings only: below --fail-on critical
        report = json.loads(out)
        assert report["run_id"] == run_id and report["total"] == IDENTITIES + 2
        assert report["by_status"]["verified"] == IDENTITIES
        assert sum(report["by_status"].values()) == IDENTITIES + 2
        assert report["findings_by_kind"] == {"became_unverified": 2}

        # Every identity checked once in the run: none lost with the killed process, none
        # checked twice by the process that took its identities over.
        per_identity = store.db.rows(
            "SELECT identifier, count(*) FROM checks WHERE run_id=? GROUP BY identifier",
            (run_id,),
        )
        assert sorted(identifier for identifier, _ in per_identity) == sorted(names)
        assert {count for _, count in per_identity} == {1}
        assert store.runs(1)[0]["status"] == "finished"
        assert store.db.one("SELECT count(*) FROM run_items") == (0,)
        # One delivery for the run, by the process that finished it.
        runs_delivered = [p["run_id"] for p in receiver.payloads()]
        assert runs_delivered == [run_id]
        assert {f["identifier"] for f in receiver.payloads()[0]["findings"]} == set(breaking)
        assert store.outbox() == []
        store.close()


def _running_run(store: AuditStore) -> int | None:
    row = store.db.one("SELECT id FROM runs WHERE status='running' AND source='watch-list'")
    return None if row is None else int(row[0])


def _workers(store: AuditStore, run_id: int) -> set[str]:
    rows = store.db.rows("SELECT owner FROM run_workers WHERE run_id=?", (run_id,))
    return {owner for (owner,) in rows}


def _checked(store: AuditStore, run_id: int) -> int:
    row = store.db.one("SELECT count(*) FROM checks WHERE run_id=?", (run_id,))
    return int(row[0]) if row else 0


def _check(identifier: str) -> Check:
    return dataclasses.replace(
        verified_check(identifier, f"did:web:{identifier}"), checked_at=time.time()
    )


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_a_claim_taken_over_is_not_recorded_by_the_process_that_lost_it(
    tmp_path: Path, backend: str
) -> None:
    """The rules under the run: a watch-list run going on is joined; a claim lasts its
    lease, then another process takes it; a check whose claim was lost is not kept; a run
    whose processes all fell silent is closed as interrupted."""
    with database(backend, tmp_path, "atwhois_audit") as where:
        mine, theirs = AuditStore(where), AuditStore(where)
        theirs.runs_shared.owner = "elsewhere.example:1"  # another host's process
        mine.watch_import([("a.test", None), ("b.test", None)])
        run = mine.runs_shared.open("watch-list", None, lease=0.5)
        joined = theirs.runs_shared.open("watch-list", None, lease=0.5)
        assert joined.joined and joined.id == run.id and joined.total == run.total == 2
        assert mine.runs_shared.claim(run, 10) == ["a.test", "b.test"]
        assert theirs.runs_shared.claim(joined, 10) == []  # held: nothing to take
        time.sleep(0.6)  # the lease runs out without a renewal
        assert theirs.runs_shared.claim(joined, 10) == ["a.test", "b.test"]
        assert mine.record(run.id, [(_check("a.test"), [], 0)], claimed=True) == 0
        assert mine.history("a.test") == []  # the late check is not kept
        assert theirs.record(run.id, [(_check("a.test"), [], 0)], claimed=True) == 1
        assert [c.identifier for c in mine.history("a.test")] == ["a.test"]
        assert mine.runs_shared.left(run.id) == 1  # b.test, still theirs

        # Everyone falls silent: the next store to open closes the run.
        mine.db.execute(
            "UPDATE run_workers SET owner='elsewhere.example:2' WHERE owner=?",
            (mine.runs_shared.owner,),
        )
        mine.db.execute("UPDATE run_workers SET seen_at = seen_at - 10")
        assert AuditStore(where).runs(1)[0]["status"] == "interrupted"
        assert mine.db.one("SELECT count(*) FROM run_items") == (0,)
        for store in (mine, theirs):
            store.close()


@pytest.mark.alone  # two daemons waking on a 4 s beat: late on a machine busy elsewhere
def test_daemons_sharing_a_store_keep_one_schedule(devnet: DevnetState, tmp_path: Path) -> None:
    """Two daemons audit the watch-list every 4 s from one PostgreSQL store; the second
    starts after the first one's first run. Each counts the interval from the last run any
    of them started, so they wake together and share each run: runs stay 4 s apart (on
    their own phases there would be two per interval), and the second takes part in them."""
    interval = 4.0
    # a run far shorter than 4 s, and longer than a daemon's wake is late on a busy machine
    # (at 50 identities, 0.4 s: one daemon once missed a run it was late for)
    with _postgres_watching(devnet, tmp_path, 150) as (_, env, store):
        args = ("--cache", "memory:", "--audit-interval", str(interval))
        with running_daemon(env, tmp_path / "first.log", *args):
            until(lambda: _finished_runs(store) >= 1, timeout=30)
            with running_daemon(env, tmp_path / "second.log", *args):
                until(lambda: _finished_runs(store) >= 4, timeout=40)
        rows = store.db.rows(
            "SELECT id, started_at FROM runs WHERE source='watch-list' ORDER BY id", ()
        )
        starts = [float(started) for _, started in rows]
        gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
        assert all(gap >= interval - 0.5 for gap in gaps), gaps
        # both daemons took part in the runs after the second started (the last one's line
        # may be cut short by the stop)
        first, second = (_runs_logged(tmp_path / f"{n}.log") for n in ("first", "second"))
        assert len(first & second) >= 2, (first, second)
        # one check per identity per run, whoever made it
        per_run = store.db.rows(
            "SELECT run_id, count(*), count(DISTINCT identifier) FROM checks GROUP BY run_id", ()
        )
        assert all(total == distinct for _, total, distinct in per_run), per_run


def test_a_schedule_outlives_its_store_dropping_the_connection(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """PostgreSQL drops the daemon's connection between runs (a restart, an administrator
    ending it): the statement that meets the dropped connection fails and is logged, the
    store connects again, and the scheduled runs go on (they used to end silently until
    the daemon was restarted)."""
    import psycopg

    with _postgres_watching(devnet, tmp_path, 5) as (where, env, store):
        log = tmp_path / "daemon.log"
        args = ("--cache", "memory:", "--audit-interval", "1")
        with running_daemon(env, log, *args):
            until(lambda: _finished_runs(store) >= 1, timeout=30)
            own = store.db.one("SELECT pg_backend_pid()")  # the test's, not the daemon's
            with psycopg.connect(where, autocommit=True) as admin:
                ended = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                    "datname = current_database() AND pid <> pg_backend_pid() AND pid <> %s",
                    own,
                ).fetchone()
            assert ended is not None and ended[0] >= 1
            dropped_at = _finished_runs(store)
            until(lambda: _finished_runs(store) >= dropped_at + 2, timeout=30)
        events = [json.loads(line) for line in log.read_text().splitlines() if line[:1] == "{"]
        failed = [event for event in events if event.get("event") == "audit_failed"]
        # the server's notice, or the closed socket when the client read that first
        dropped = ("terminating connection", "server closed the connection unexpectedly")
        assert failed and any(text in failed[0]["error"] for text in dropped), failed


@contextlib.contextmanager
def _postgres_watching(
    devnet: DevnetState, tmp_path: Path, count: int
) -> Iterator[tuple[str, dict[str, str], AuditStore]]:
    """A scratch PostgreSQL audit store watching `count` of the world's bulk hosts: its
    address, the environment that points atwhois at it, and the store opened on it."""
    with database("postgresql", tmp_path, "atwhois_audit") as where:
        env = {**devnet.env(), "ATWHOIS_AUDIT_DB": where}
        names = [world.bulk_host(i) for i in range(count)]
        code, _, err = run_cli(["watch", "import", "-"], env, "\n".join(names) + "\n")
        assert code == 0, err
        store = AuditStore(where)
        try:
            yield where, env, store
        finally:
            store.close()


def _runs_logged(log: Path) -> set[int]:
    """The runs a daemon says it took part in (its log line for each)."""
    events = (json.loads(line) for line in log.read_text().splitlines() if line.startswith("{"))
    return {event["run_id"] for event in events if event.get("event") == "audit"}


def _finished_runs(store: AuditStore) -> int:
    row = store.db.one("SELECT count(*) FROM runs WHERE status='finished'")
    return int(row[0]) if row else 0


def _holding(
    store: AuditStore, run_id: int, processes: list[subprocess.Popen[str]]
) -> subprocess.Popen[str] | None:
    """One of `processes` that holds identities of the run now (None: neither does)."""
    for process in processes:
        held = store.db.one(
            "SELECT count(*) FROM run_items WHERE run_id=? AND owner=?",
            (run_id, f"{os.uname().nodename}:{process.pid}"),
        )
        if held is not None and held[0] > 0:
            return process
    return None
