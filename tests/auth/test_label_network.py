"""Moderation labels on the test network (L-*): a labeler is a did:plc created on the
reference PLC directory with an `#atproto_label` verification method and an
`#atproto_labeler` service (devnet/plc_ops.py), its labels signed as the reference labeler
signs them (devnet/labels.py, held to the reference's bytes by
tests/resolver/test_label_rules.py), and
verified through the library, the daemon, its client and the command line, as JSON and as
the `subscribeLabels` frames a labeler sends; a label key rotated by a real PLC operation
while the old document is kept verifies after one refresh, counted at the daemon, and a
label of the old key is then invalid; a repository key is never a label key; a directory
that is down makes the outcome unavailable."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

import atwhois
from atwhois.cache import CachedResolver, MemoryStore
from atwhois.resolver import Resolver
from atwhois.resolver.remote import Client
from atwhois.stream import LabelsEvent, decode_labels
from devnet.atwhois import ATWHOIS, Daemon, running_daemon
from devnet.labels import labels_frame, sign_fields, sign_label
from devnet.network import DevnetState
from devnet.pds import free_port
from devnet.plc_ops import Key, PlcAccount
from tests.support import metrics
from tests.support.waiting import until

POST = "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/app.bsky.feed.post/3l6oveex3ii2l"
ACCOUNT = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
PATH = "/v1/verify/label"


@pytest.fixture
def labeler(devnet: DevnetState) -> tuple[PlcAccount, Key]:
    """A labeler of the reference directory's: its DID and its `#atproto_label` key."""
    account = PlcAccount(devnet.plc_url, None)
    return account, account.label_with(uuid.uuid4().hex, "https://labeler.test")


def label(account: PlcAccount, key: Key, val: str = "spam", **fields: Any) -> dict[str, Any]:
    now = "2026-12-06T12:00:00.000Z"
    return sign_label(key, {"src": account.did, "uri": POST, "val": val, "cts": now, **fields})


def verify(daemon: Daemon, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(daemon.url + PATH, json=body, timeout=30)


def documents(daemon: Daemon) -> float:
    """DID documents the daemon resolved upstream, ever (its /metrics)."""
    text = httpx.get(f"{daemon.url}/metrics", timeout=10).text
    return metrics.value(text, "atwhois_upstream_resolutions_total", kind="documents")


def cli(
    devnet: DevnetState, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ATWHOIS, "verify-label", *args],
        env={**(env or devnet.env()), "PATH": "/usr/bin:/bin"},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_labelers_labels_verify_as_json_and_as_its_frames(
    devnet: DevnetState, labeler: tuple[PlcAccount, Key]
) -> None:
    """L-KEY-1, L-SIG-3 against the real directory's document: a label, a negation and an
    expired one (verified, not in force), each as JSON and from a `#labels` frame (L-FRAME-1);
    a tampered one invalid; the labeler's document is its, with its service."""
    account, key = labeler
    labels = [
        label(account, key),
        label(account, key, neg=True),
        label(account, key, exp="2026-01-01T00:00:00.000Z"),
        label(account, key, cid="bafyreifxykqhed72s26cr4i64rxvrtofeqrly3j4vjzbkvo3ckkjbxjqtq"),
    ]
    tampered = {**labels[0], "uri": ACCOUNT}
    frames = [labels_frame(seq, [item]) for seq, item in enumerate(labels, 1)]
    async with Resolver(devnet.config()) as resolver:
        identity = await resolver.document(account.did)
        verifier = atwhois.LabelVerifier(resolver)
        as_json = await verifier.verify_many([*labels, tampered])
        events = [decode_labels(frame) for frame in frames]
        assert all(isinstance(event, LabelsEvent) for event in events)
        from_frames = await verifier.verify_many(
            [event.labels[0] for event in events if isinstance(event, LabelsEvent)]
        )
    assert ("#atproto_labeler", "AtprotoLabeler", "https://labeler.test") in identity.services
    for verdicts in (as_json[:4], from_frames):
        assert [v.outcome for v in verdicts] == ["verified"] * 4
        assert [v.in_force for v in verdicts] == [True, False, False, True]
        assert {v.key for v in verdicts} == {key.did_key} != {identity.signing_key}
    assert (as_json[4].outcome, as_json[4].rule) == ("invalid", "L-SIG-3")


async def test_a_repository_key_is_never_a_label_key(devnet: DevnetState) -> None:
    """L-KEY-1: an account with no `#atproto_label` signs a label with its `#atproto` key
    (the one its document holds): refused, the key it holds not tried; neg:false signed by a
    signer that keeps it verifies as received (L-SIG-1)."""
    account = PlcAccount(devnet.plc_url, None)
    fields = {"ver": 1, "src": account.did, "uri": POST, "val": "spam"}
    fields["cts"] = "2026-12-06T12:00:00.000Z"
    signed = sign_fields(account.key, fields)
    config = devnet.config()
    verdict = await atwhois.averify_label(signed, config=config)
    assert (verdict.outcome, verdict.rule) == ("invalid", "L-KEY-1")
    key = account.label_with(uuid.uuid4().hex)
    with_false = sign_fields(key, {**fields, "neg": False})
    assert (await atwhois.averify_label(with_false, config=config)).in_force
    without = {k: v for k, v in with_false.items() if k != "neg"}
    refused = await atwhois.averify_label(without, config=config)
    assert (refused.outcome, refused.rule) == ("invalid", "L-SIG-3")


def test_a_rotated_label_key_verifies_after_one_refresh_at_the_daemon(
    devnet: DevnetState, labeler: tuple[PlcAccount, Key], tmp_path: Path
) -> None:
    """L-KEY-3 end to end: the daemon keeps the labeler's document; the labeler rotates its
    label key (a real operation at the directory); a label of the new key fails under the
    kept document, which is resolved once more (a document resolved within the last
    seconds is not: the label verifies once it is older), and verifies; a label of the old
    key is then invalid, and a flood of them costs the directory no more."""
    account, old_key = labeler
    old = label(account, old_key)
    with running_daemon(devnet.env(), tmp_path / "d.log", "--cache", "memory:") as daemon:
        assert verify(daemon, {"label": old}).json()["in_force"] is True  # the document kept
        before = documents(daemon)
        new_key = account.label_with(uuid.uuid4().hex)
        new = label(account, new_key, "rude")
        until(lambda: verify(daemon, {"label": new}).json()["document"]["refreshed"], 15)
        assert documents(daemon) == before + 1  # exactly one refresh
        assert verify(daemon, {"label": new}).json()["in_force"] is True
        answer = verify(daemon, {"labels": [old] * 500}).json()
        assert {(v["outcome"], v["rule"]) for v in answer["verdicts"]} == {("invalid", "L-SIG-3")}
        assert documents(daemon) == before + 1
        text = httpx.get(f"{daemon.url}/metrics", timeout=10).text
        assert metrics.value(text, "atwhois_label_refreshes_total") == 1
        assert "Traceback" not in daemon.log.read_text()


async def test_the_daemon_its_client_and_a_cache_give_one_verdict(
    devnet: DevnetState, daemon: Daemon, labeler: tuple[PlcAccount, Key]
) -> None:
    """`POST /v1/verify/label` (one, many; 400 for a body with no labels), `Client` (through
    `averify_label` and `verify_labels`), and a `CachedResolver` here: the same verdicts;
    `/openapi.json` describes the route."""
    account, key = labeler
    good, negation = label(account, key), label(account, key, neg=True)
    one = verify(daemon, {"label": good})
    assert one.status_code == 200 and one.headers["Cache-Control"] == "no-store"
    assert (one.json()["outcome"], one.json()["key"]) == ("verified", key.did_key)
    many = verify(daemon, {"labels": [good, negation, {**good, "val": "ham"}]}).json()
    shown = [(v["outcome"], v["in_force"], v["rule"]) for v in many["verdicts"]]
    assert shown == [
        ("verified", True, None),
        ("verified", False, None),
        ("invalid", False, "L-SIG-3"),
    ]
    for body in ({"labels": "x"}, {"label": good, "labels": [good]}):
        refused = verify(daemon, body)
        assert (refused.status_code, refused.json()["error"]) == (400, "InvalidRequest")
    there = await atwhois.averify_label(good, directory=Client(daemon.url))
    listed = await Client(daemon.url).verify_labels([good, b"not a label", negation])
    async with CachedResolver(Resolver(devnet.config()), MemoryStore()) as cached:
        kept = await atwhois.averify_label(good, directory=cached)
    assert there.in_force and kept.in_force and there.key == kept.key == key.did_key
    assert [(v.outcome, v.rule) for v in listed] == [
        ("verified", None),
        ("invalid", "L-SYN-1"),
        ("verified", None),
    ]
    assert PATH in httpx.get(f"{daemon.url}/openapi.json", timeout=10).json()["paths"]


def test_the_command_line_says_the_worst_verdict_in_its_exit_code(
    devnet: DevnetState, daemon: Daemon, labeler: tuple[PlcAccount, Key], tmp_path: Path
) -> None:
    """`atwhois verify-label` (L-IN-1): 0 every label verified and in force (one, a list,
    JSON lines, standard input, --server); 1 one negated, expired or invalid; 2 a file that
    holds no labels, or none at all; 3 a directory that is down."""
    account, key = labeler
    good, negation = label(account, key), label(account, key, neg=True)
    one = tmp_path / "one.json"
    one.write_text(json.dumps(good))
    lines = tmp_path / "lines.jsonl"
    lines.write_text(json.dumps(good) + "\n" + json.dumps(label(account, key, "rude")) + "\n")
    done = cli(devnet, str(one))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("verified, in force\n") and key.did_key in done.stdout
    done = cli(devnet, str(lines), "--json")
    assert done.returncode == 0 and [v["val"] for v in json.loads(done.stdout)] == ["spam", "rude"]
    done = cli(devnet, "-", "--server", daemon.url, "--json", stdin=json.dumps([good, good]))
    assert done.returncode == 0 and len(json.loads(done.stdout)) == 2
    done = cli(devnet, "-", stdin=json.dumps([good, negation]))
    assert done.returncode == 1 and "verified, NOT in force (a negation)" in done.stdout
    done = cli(devnet, "-", "--json", stdin=json.dumps({**good, "val": "ham"}))
    assert done.returncode == 1 and json.loads(done.stdout)["rule"] == "L-SIG-3"
    for stdin, said in (("[1]", "not a JSON object"), ("", "no label"), ("{", "not JSON")):
        done = cli(devnet, "-", stdin=stdin)
        assert done.returncode == 2 and said in done.stderr and "L-IN-1" in done.stderr, stdin
    done = cli(devnet, str(tmp_path / "none.json"))
    assert done.returncode == 2 and "cannot read the labels" in done.stderr
    down = {**devnet.env(), "ATWHOIS_PLC_URL": f"http://127.0.0.1:{free_port()}"}
    done = cli(devnet, "-", stdin=json.dumps([good, negation]), env=down)
    assert done.returncode == 3 and done.stdout.startswith("UNAVAILABLE")


def test_a_labeler_unreachable_is_unavailable_and_a_tombstoned_one_invalid(
    devnet: DevnetState, labeler: tuple[PlcAccount, Key], tmp_path: Path
) -> None:
    """L-KEY-2 at the daemon: a 502 with Retry-After and the verdict; then invalid, naming
    the labeler's status."""
    account, key = labeler
    good = label(account, key)
    down = {**devnet.env(), "ATWHOIS_PLC_URL": f"http://127.0.0.1:{free_port()}"}
    with running_daemon(down, tmp_path / "down.log", "--cache", "memory:") as daemon:
        answer = verify(daemon, {"label": good})
        assert answer.status_code == 502 and answer.headers["Retry-After"]
        assert (answer.json()["outcome"], answer.json()["rule"]) == ("unavailable", None)
    account.tombstone()
    with running_daemon(devnet.env(), tmp_path / "up.log", "--cache", "memory:") as daemon:
        report = verify(daemon, {"label": good}).json()
        assert (report["outcome"], report["rule"]) == ("invalid", "L-KEY-2")
        assert "did_deactivated" in report["reason"]
