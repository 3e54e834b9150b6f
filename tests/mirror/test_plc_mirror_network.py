"""The PLC mirror on the test network: `atwhois plc mirror` following the reference PLC
directory, read by real clients that know nothing of it (@atproto/identity from npm, the
Python SDK), changed under it by new operations, lied to by a tampering stand-in, and
inside `atwhois serve --plc-mirror`."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from atproto import IdResolver

from atwhois.resolver.plc.document import compare_state, state_from_data
from devnet.atwhois import ATWHOIS, Daemon, running_daemon
from devnet.forwarder import PlcStandIn
from devnet.network import DevnetState
from devnet.plc_ops import PlcAccount, new_handle
from devnet.postgres import scratch_database
from tests.support import metrics
from tests.support.waiting import until

NODE_CLIENT = Path(__file__).parents[2] / "devnet" / "pds" / "resolve.js"
INTERVAL = 0.5
PATHS = ("", "/data", "/log", "/log/audit", "/log/last")


@contextlib.contextmanager
def mirror_process(
    env: dict[str, str], tmp_path: Path, *args: str, name: str = "mirror", port: int = 0
) -> Iterator[Daemon]:
    """`atwhois plc mirror`, its store kept in `tmp_path` under `name` (across restarts);
    on `port` when given (a mirror followed by another must come back where it was)."""
    with running_daemon(
        env,
        tmp_path / f"{name}.log",
        "--plc-db",
        str(tmp_path / f"{name}.db"),
        "--plc-mirror-interval",
        str(INTERVAL),
        *args,
        command=("plc", "mirror", "--listen", f"127.0.0.1:{port}"),
    ) as daemon:
        yield daemon


def export_cids(url: str) -> list[str]:
    """Every op an export lists, paged by time (both the reference and the mirror)."""
    cids: list[str] = []
    after = "2000-01-01T00:00:00.000Z"
    while True:
        lines = httpx.get(f"{url}/export", params={"after": after}, timeout=10).text.split("\n")
        entries = [json.loads(line) for line in lines if line]
        cids += [entry["cid"] for entry in entries]
        if len(entries) < 1000:
            return cids
        after = entries[-1]["createdAt"]


def world_dids(devnet: DevnetState, dids: list[str]) -> list[str]:
    """Of `dids`, the test network's own: the seeded world (tombstoned and recovered ones
    among them) and the PDS's accounts, not what other tests created meanwhile."""
    world = {*devnet.dids.values(), *devnet.live.values()}
    return [did for did in dids if did in world]


def caught_up(mirror: str, upstream: str, timeout: float = 30) -> list[str]:
    """Waits until the mirror holds every op the upstream lists and has said it caught up
    (it answers about DIDs from then on); the upstream's DIDs."""
    deadline = time.monotonic() + timeout
    wanted = export_cids(upstream)
    while set(wanted) - set(export_cids(mirror)) or _behind(mirror) is None:
        assert time.monotonic() < deadline, "the mirror did not catch up"
        time.sleep(0.1)
    lines = httpx.get(f"{upstream}/export", timeout=10).text.split("\n")
    return sorted({json.loads(line)["did"] for line in lines if line})


def _behind(url: str) -> float | None:
    health = httpx.get(f"{url}/_health", timeout=10).json()
    behind: float | None = health.get("plc_mirror", health)["behind_s"]  # serve's, or its own
    return behind


@pytest.fixture
def reference_mirror(devnet: DevnetState, tmp_path: Path) -> Iterator[Daemon]:
    with mirror_process(devnet.env(), tmp_path, "--plc-mirror-profile", "reference") as daemon:
        yield daemon


def node_resolve(plc_url: str, dids: list[str]) -> dict[str, Any]:
    result = subprocess.run(
        ["node", str(NODE_CLIENT), plc_url],
        input=json.dumps(dids).encode(),
        capture_output=True,
        timeout=120,
        check=True,
    )
    answers: dict[str, Any] = json.loads(result.stdout)
    return answers


def sdk_resolve(plc_url: str, dids: list[str]) -> dict[str, Any]:
    resolver = IdResolver(plc_url=plc_url, timeout=10)
    answers = {}
    for did in dids:
        document = resolver.did.resolve(did)
        answers[did] = document.model_dump() if document is not None else None
    return answers


def test_real_clients_get_what_the_reference_directory_gives(
    devnet: DevnetState, reference_mirror: Daemon
) -> None:
    mirror, upstream = reference_mirror.url, devnet.plc_url
    dids = world_dids(devnet, caught_up(mirror, upstream))
    tombstoned, recovered = devnet.did("erin"), devnet.did("frank")
    assert {tombstoned, recovered} <= set(dids)
    live = set()
    for did in [*dids, "did:plc:" + "z" * 24]:
        for path in PATHS:
            theirs = httpx.get(f"{upstream}/{did}{path}", timeout=10)
            if path == "" and theirs.status_code == 200:
                live.add(did)
            ours = httpx.get(f"{mirror}/{did}{path}", timeout=10)
            assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json()), (
                did + path
            )
    audit = httpx.get(f"{mirror}/{recovered}/log/audit", timeout=10).json()
    assert [entry["nullified"] for entry in audit] == [False, True, False]
    assert httpx.get(f"{mirror}/{tombstoned}", timeout=10).status_code == 404  # as it does
    node_theirs, node_ours = node_resolve(upstream, dids), node_resolve(mirror, dids)
    assert node_ours == node_theirs
    assert node_ours[tombstoned] is None and node_ours[recovered] is not None
    sdk_theirs, sdk_ours = sdk_resolve(upstream, dids), sdk_resolve(mirror, dids)
    assert sdk_ours == sdk_theirs
    assert sdk_ours[tombstoned] is None
    assert {did for did, document in sdk_ours.items() if document is not None} == live


def test_the_directory_profile_answers_as_plc_directory(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """Multikey documents that mean what the reference's legacy ones mean, and 410 for a
    tombstone (which @atproto/identity reports as an error, as it does for plc.directory)."""
    with mirror_process(devnet.env(), tmp_path) as daemon:
        dids = world_dids(devnet, caught_up(daemon.url, devnet.plc_url))
        data = {did: httpx.get(f"{devnet.plc_url}/{did}/data", timeout=10) for did in dids}
        live = [did for did, answer in data.items() if answer.status_code == 200]
        gone = [did for did, answer in data.items() if "not available" in answer.text]
        assert devnet.did("erin") in gone and len(live) + len(gone) == len(dids)
        sdk = sdk_resolve(daemon.url, live)
        for did in live:
            served = httpx.get(f"{daemon.url}/{did}", timeout=10).json()
            assert served["verificationMethod"][0]["type"] == "Multikey"
            assert compare_state(did, state_from_data(data[did].json()), served) == []
            assert sdk[did] is not None and sdk[did]["id"] == did
        for did in gone:
            answer = httpx.get(f"{daemon.url}/{did}", timeout=10)
            assert (answer.status_code, answer.json()) == (
                410,
                {"message": f"DID not available: {did}"},
            )
        assert {answer["status"] for answer in node_resolve(daemon.url, gone).values()} == {410}


def test_new_operations_show_within_one_polling_interval(
    devnet: DevnetState, reference_mirror: Daemon
) -> None:
    mirror = reference_mirror.url
    caught_up(mirror, devnet.plc_url)
    seen: dict[str, float] = {}

    def document() -> httpx.Response:
        return httpx.get(f"{mirror}/{account.did}", timeout=10)

    handle = new_handle("mirrored")
    account = PlcAccount(devnet.plc_url, handle)
    seen["create"] = until(lambda: document().status_code == 200, 5)
    moved = new_handle("moved")
    account.set_handle(moved)
    seen["handle change"] = until(lambda: document().json()["alsoKnownAs"] == [f"at://{moved}"], 5)
    new_key = account.rotate_key(f"rotated-{uuid.uuid4().hex}")
    seen["key rotation"] = until(
        lambda: (
            httpx.get(f"{mirror}/{account.did}/data", timeout=10).json()["rotationKeys"]
            == [new_key.did_key]
        ),
        5,
    )
    account.tombstone()
    seen["tombstone"] = until(lambda: document().status_code == 404, 5)
    for step, seconds in seen.items():
        # one interval, plus the page's fetch and verification and this test's own poll
        assert seconds < INTERVAL + 1.0, f"{step}: {seconds:.2f} s"
    log = httpx.get(f"{mirror}/{account.did}/log/audit", timeout=10).json()
    assert [entry["operation"]["type"] for entry in log][-1] == "plc_tombstone"
    assert len(log) == 4
    health = httpx.get(f"{mirror}/_health", timeout=10).json()
    assert health["ok"] and health["behind_s"] is not None and health["rejected"] == {}


def test_a_tampering_upstream_is_refused_and_reported(devnet: DevnetState, tmp_path: Path) -> None:
    victim = PlcAccount(devnet.plc_url, new_handle("victim"))
    victim.set_handle(new_handle("victim-moved"))
    victim_log = httpx.get(f"{devnet.plc_url}/{victim.did}/log/audit", timeout=10).json()
    tampered_cid = victim_log[1]["cid"]

    def tamper(entry: dict[str, Any]) -> dict[str, Any]:
        if entry["cid"] == tampered_cid:  # a field changed, the cid and signature kept
            entry["operation"]["alsoKnownAs"] = ["at://mallory.test"]
        return entry

    with PlcStandIn(devnet.plc_url) as stand_in:
        stand_in.export_edit = tamper
        env = {**devnet.env(), "ATWHOIS_PLC_URL": stand_in.url}
        db = tmp_path / "tampered.db"

        def mirror(*args: str) -> subprocess.CompletedProcess[str]:
            command = [ATWHOIS, "plc", "mirror", *args, "--plc-db", str(db)]
            return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

        once = mirror("--once", "--json")
        assert once.returncode == 1, once.stderr  # the upstream served what the rules refuse
        summary = json.loads(once.stdout)
        assert summary["rejected"] == {"P-CID-1": 1}
        assert summary["ops_applied"] >= 30 and summary["store"]["rejected"] == 1
        assert summary["dids_created"] == summary["store"]["dids"]
        assert summary["replays_rebuilt"] == 0  # every DID's replay stayed in memory
        again = mirror("--once", "--json")
        assert again.returncode == 0, again.stderr
        resumed = json.loads(again.stdout)  # from the stored cursor, not from the start
        assert resumed["ops_applied"] == 0 and resumed["duplicates"] <= 2, resumed
        # a restart: the DIDs of the page served again are rebuilt to tell it is kept
        assert resumed["replays_rebuilt"] <= resumed["duplicates"], resumed
        assert (resumed["replays_rebuilt"] > 0) == (resumed["duplicates"] > 0), resumed
        assert resumed["rejected"] == {} and resumed["store"] == summary["store"]
        listed = mirror("--report")
        assert listed.returncode == 0, listed.stderr
        report = listed.stdout
        assert f"refused {victim.did} {tampered_cid}" in report and "[P-CID-1]" in report
        assert f"flagged {victim.did}" in report
        # The mirror, serving, keeps the DID at its last verified state and says why.
        with mirror_process(env, tmp_path, name="tampered") as daemon:
            served = httpx.get(f"{daemon.url}/{victim.did}", timeout=10).json()
            assert served["alsoKnownAs"] == victim_log[0]["operation"]["alsoKnownAs"]
            full = httpx.get(f"{daemon.url}/_mirror", timeout=10).json()
            assert [r["cid"] for r in full["rejected"]] == [tampered_cid]
            assert full["rejected"][0]["rule"] == "P-CID-1"
            assert "mallory" in full["rejected"][0]["entry"]


def test_a_lying_upstream_document_is_flagged(devnet: DevnetState, tmp_path: Path) -> None:
    with PlcStandIn(devnet.plc_url) as stand_in:
        env = {**devnet.env(), "ATWHOIS_PLC_URL": stand_in.url}
        with mirror_process(env, tmp_path, name="lied-to") as daemon:
            caught_up(daemon.url, devnet.plc_url)
            account = PlcAccount(devnet.plc_url, new_handle("liedabout"))

            def lie(document: Any) -> Any:
                document["alsoKnownAs"] = ["at://someone-else.test"]
                return document

            stand_in.edits[f"/{account.did}"] = lie

            def flagged() -> bool:
                report = httpx.get(f"{daemon.url}/_mirror", timeout=10).json()
                return account.did in [f["did"] for f in report["flagged"]]

            until(flagged, 10)
            report = httpx.get(f"{daemon.url}/_mirror", timeout=10).json()
            reason = next(f["reason"] for f in report["flagged"] if f["did"] == account.did)
            assert "disagrees" in reason and "alsoKnownAs" in reason
            assert report["mirror"]["disagreements"] >= 1
            # what the mirror serves is still what the log proves
            served = httpx.get(f"{daemon.url}/{account.did}", timeout=10).json()
            assert served["alsoKnownAs"][0].startswith("at://liedabout-")


def test_serve_resolves_did_plc_from_its_own_mirror(devnet: DevnetState, tmp_path: Path) -> None:
    with running_daemon(
        devnet.env(),
        tmp_path / "serve.log",
        "--plc-mirror",
        "--plc-db",
        str(tmp_path / "serve-mirror.db"),
        "--plc-mirror-interval",
        str(INTERVAL),
        "--cache",
        "memory:",
    ) as daemon:
        caught_up(daemon.url, devnet.plc_url)
        alice = devnet.did("alice")
        served = httpx.get(f"{daemon.url}/{alice}", timeout=10)
        assert served.status_code == 200 and served.headers["Atwhois-Plc-Mirror"].startswith(
            "verified; upstream=" + devnet.plc_url
        )
        report = httpx.get(f"{daemon.url}/v1/identity/alice.test", timeout=10).json()
        assert report["status"] == "verified"
        via = report["evidence"]["did_doc"]["via"]
        assert via.startswith(f"verified PLC mirror of {devnet.plc_url}") and "behind" in via
        account = PlcAccount(devnet.plc_url, new_handle("served"))
        until(lambda: httpx.get(f"{daemon.url}/{account.did}", timeout=10).status_code == 200, 5)
        health = httpx.get(f"{daemon.url}/_health", timeout=10).json()
        assert health["plc_mirror"]["ops_applied"] >= 33
        exposition = httpx.get(f"{daemon.url}/metrics", timeout=10).text
        ops = metrics.value(exposition, "atwhois_plc_mirror_ops_total", upstream=devnet.plc_url)
        assert ops >= 33
        refused = httpx.post(f"{daemon.url}/{alice}", json={}, timeout=10)
        assert refused.status_code == 405 and devnet.plc_url in refused.json()["message"]


def test_daemons_share_one_postgresql_mirror(devnet: DevnetState, tmp_path: Path) -> None:
    """One writes (it holds the lock), another reads the same database: a new operation
    upstream is served by both, and each says which it is."""
    with scratch_database("atwhois_mirror") as url:
        args = ("--plc-db", url, "--plc-mirror-interval", str(INTERVAL))
        listen = ("plc", "mirror", "--listen", "127.0.0.1:0")
        with (
            running_daemon(devnet.env(), tmp_path / "w.log", *args, command=listen) as writer,
            running_daemon(devnet.env(), tmp_path / "r.log", *args, command=listen) as reader,
        ):
            roles = {
                httpx.get(f"{d.url}/_health", timeout=10).json()["role"] for d in (writer, reader)
            }
            assert roles == {"writer", "reader"}
            caught_up(writer.url, devnet.plc_url)
            account = PlcAccount(devnet.plc_url, new_handle("shared"))
            for daemon in (writer, reader):
                until(
                    lambda d=daemon: (
                        httpx.get(f"{d.url}/{account.did}", timeout=10).status_code == 200
                    ),
                    5,
                )
            header = httpx.get(f"{reader.url}/{account.did}", timeout=10).headers
            assert "behind=backfilling" not in header["Atwhois-Plc-Mirror"]  # the writer's lag


def test_an_upstream_outage_is_a_failure_not_an_absence(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """While the upstream answers 503 or cuts its pages, the mirror serves what it verified,
    says in /_health and /metrics that it cannot reach the upstream, and catches up when it
    is back."""
    with PlcStandIn(devnet.plc_url) as stand_in:
        env = {**devnet.env(), "ATWHOIS_PLC_URL": stand_in.url}
        with mirror_process(env, tmp_path, name="outage") as daemon:
            caught_up(daemon.url, devnet.plc_url)
            alice = devnet.did("alice")
            for fault in ("status:503", "cut"):
                stand_in.set_fault(fault)
                account = PlcAccount(devnet.plc_url, new_handle("during"))

                def failing() -> bool:
                    health = httpx.get(f"{daemon.url}/_health", timeout=10).json()
                    return not health["ok"] and health["errors"] > 0

                until(failing, 10)
                health = httpx.get(f"{daemon.url}/_health", timeout=10).json()
                assert health["last_error"], health
                assert httpx.get(f"{daemon.url}/{alice}", timeout=10).status_code == 200
                assert httpx.get(f"{daemon.url}/{account.did}", timeout=10).status_code == 404
                exposition = httpx.get(f"{daemon.url}/metrics", timeout=10).text
                errors = metrics.value(
                    exposition, "atwhois_plc_mirror_upstream_errors_total", upstream=stand_in.url
                )
                assert errors >= 1 and "process_resident_memory_bytes" in exposition
                stand_in.set_fault(None)
                until(
                    lambda a=account: (
                        httpx.get(f"{daemon.url}/{a.did}", timeout=10).status_code == 200
                    ),
                    15,
                )
                until(lambda: httpx.get(f"{daemon.url}/_health", timeout=10).json()["ok"], 10)
