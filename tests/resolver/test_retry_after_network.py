"""A `Retry-After` nobody can read (POL-RA-1, issue 66), from the PLC directory and from a
stranger's host (a did:web, a handle's well-known): `²` is a digit to `str.isdigit()` and
not to `float()`, and a date in the year 99999999999 overflows. Each made the daemon
answer 500 on every route that asked the host, the command line print a traceback, and a
batch line read "failed to resolve this: ValueError". Now it is read as no Retry-After:
the 429 is a transient failure like any other, classified on every face."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devnet.atwhois import ATWHOIS, Daemon, daemon_here
from devnet.counting_directory import PlcStandIn
from devnet.network import DevnetState
from devnet.tokens import AUDIENCE, forged_token

UNREADABLE = ["²", "Mon, 01 Jan 99999999999 00:00:00 GMT"]


@pytest.fixture(params=UNREADABLE, ids=["superscript-two", "year-99999999999"])
def unreadable(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def standin(devnet: DevnetState, tmp_path: Path, unreadable: str) -> Iterator[PlcStandIn]:
    """The directory, answering every request 429 with the unreadable Retry-After."""
    plc = PlcStandIn(devnet.plc_url, tmp_path / "standin.log")
    plc.refuse(10_000, retry_after=unreadable)
    yield plc
    plc.stop()


@pytest.fixture
def stranger(devnet: DevnetState, unreadable: str) -> Iterator[str]:
    """A host of a stranger's (a did:web, a handle's well-known) answering the same."""
    host = f"ra{os.urandom(4).hex()}.bulk.test"
    devnet.set_https_faults({host: {"status": 429, "headers": {"Retry-After": unreadable}}})
    yield host
    devnet.set_https_faults({})


def _faces(daemon: Daemon, did: str, handle: str) -> dict[str, httpx.Response]:
    """What every route that asks the host answers."""
    with httpx.Client(base_url=daemon.url, timeout=30) as client:
        return {
            "resolveDid": client.get("/xrpc/com.atproto.identity.resolveDid", params={"did": did}),
            "resolveHandle": client.get(
                "/xrpc/com.atproto.identity.resolveHandle", params={"handle": handle}
            ),
            "identity": client.get(f"/v1/identity/{did}"),
            "verify": client.post(
                "/v1/verify/service-auth", json={"token": forged_token(did), "audience": AUDIENCE}
            ),
        }


def _assert_transient(faces: dict[str, httpx.Response]) -> None:
    """Every face says the upstream failed for now (502, Retry-After), none crashed (500)."""
    for face, answer in faces.items():
        assert answer.status_code == 502, (face, answer.status_code, answer.text)
        assert answer.headers["Retry-After"], face
    assert faces["identity"].json()["status"] == "unavailable"
    assert faces["verify"].json()["outcome"] == "unavailable"
    for face in ("resolveDid", "resolveHandle"):
        assert faces[face].json()["error"] == "UpstreamFailure", faces[face].text


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ATWHOIS, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_from_the_directory_every_face_answers_a_transient_failure(
    devnet: DevnetState, standin: PlcStandIn, tmp_path: Path
) -> None:
    """POL-RA-1: the directory's unreadable Retry-After is none: lookups unavailable (its
    429), the command line and `plc compare` without a traceback, a batch line that is
    the directory's failure, not atwhois's."""
    env = {**devnet.env(), "ATWHOIS_PLC_URL": standin.url, "ATWHOIS_CACHE": "memory:"}
    alice = devnet.did("alice")
    with daemon_here(env, tmp_path / "d.log") as daemon:
        _assert_transient(_faces(daemon, alice, "alice.test"))
        assert "Traceback" not in daemon.log.read_text()
    single = _cli(env, "lookup", alice, "--json")
    assert single.returncode == 3 and "Traceback" not in single.stderr, single.stderr
    assert json.loads(single.stdout)["status"] == "unavailable"
    identifiers = tmp_path / "ids.txt"
    identifiers.write_text(f"{alice}\n{devnet.did('bob')}\n")
    batch = _cli(env, "lookup", "--file", str(identifiers), "--json")
    assert "Traceback" not in batch.stderr, batch.stderr
    lines = [json.loads(line) for line in batch.stdout.splitlines() if line.startswith("{")]
    assert [line["status"] for line in lines] == ["unavailable", "unavailable"], batch.stdout
    assert all("HTTP 429" in line["error"] for line in lines), lines
    compare = _cli(env, "plc", "compare", alice, "--plc-db", str(tmp_path / "mirror.sqlite"))
    assert compare.returncode == 3 and "Traceback" not in compare.stderr, compare.stderr


def test_from_a_strangers_host_every_face_answers_a_transient_failure(
    devnet: DevnetState, stranger: str, tmp_path: Path
) -> None:
    """POL-RA-1: a did:web host and a handle's well-known answering 429 with a Retry-After
    nobody can read: the did:web unavailable on every face, the handle never absent."""
    env = {**devnet.env(), "ATWHOIS_CACHE": "memory:"}
    did = f"did:web:{stranger}"
    with daemon_here(env, tmp_path / "d.log") as daemon:
        faces = _faces(daemon, did, stranger)
        assert "Traceback" not in daemon.log.read_text()
    _assert_transient(faces)
    single = _cli(env, "lookup", did, "--json")
    assert single.returncode == 3 and "Traceback" not in single.stderr, single.stderr
    report = json.loads(single.stdout)
    assert report["status"] == "unavailable" and "HTTP 429" in report["error"], report
