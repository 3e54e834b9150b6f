"""Inter-service auth tokens on the test network (SA-*): tokens the real PDS mints
(`com.atproto.server.getServiceAuth`) verify through the daemon, the library and the
command line; tampered and misaddressed ones are refused naming their rule; a key rotated
by a real PLC operation while the old document is cached verifies after one refresh,
counted at the daemon; a token's verdict never waits on its issuer's handle; a directory
that is down makes the outcome unavailable; two daemons on one Redis refuse a replay to
either."""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

import atwhois
from atwhois.resolver.service_auth import mint
from devnet import world
from devnet.atwhois import ATWHOIS, Daemon, daemon_here
from devnet.network import DevnetState
from devnet.pds import create_account, free_port
from devnet.plc_ops import PlcAccount
from devnet.redis_server import RedisServer
from tests.support import metrics
from tests.support.waiting import until

FEED = "did:web:feed.example"
AUDIENCE = FEED + "#bsky_fg"
METHOD = "app.bsky.feed.getFeedSkeleton"
PATH = "/v1/verify/service-auth"
N_K256 = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


def pds_token(devnet: DevnetState, name: str, method: str | None = None) -> str:
    """A token the PDS mints for its account `name` (created here), for the feed."""
    handle = name + world.LIVE_HANDLE_SUFFIX
    session = httpx.post(
        f"{devnet.pds_url}/xrpc/com.atproto.server.createSession",
        json={"identifier": handle, "password": world.live_password(name)},
        timeout=30,
    ).json()
    params = {"aud": FEED, **({"lxm": method} if method else {})}
    answer = httpx.get(
        f"{devnet.pds_url}/xrpc/com.atproto.server.getServiceAuth",
        params=params,
        headers={"Authorization": f"Bearer {session['accessJwt']}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["token"])


def verify(daemon: Daemon, token: str, **fields: Any) -> httpx.Response:
    body = {"token": token, "audience": AUDIENCE, **fields}
    return httpx.post(f"{daemon.url}/v1/verify/service-auth", json=body, timeout=30)


def outcome(daemon: Daemon, token: str, **fields: Any) -> tuple[str, str | None]:
    answer = verify(daemon, token, **fields).json()
    return answer["outcome"], answer["rule"]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def signature_of(token: str) -> bytes:
    text = token.rpartition(".")[2]
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def with_signature(token: str, signature: bytes) -> str:
    return token.rpartition(".")[0] + "." + b64(signature)


def claims(did: str, **changes: Any) -> dict[str, Any]:
    now = int(time.time())
    base = {"iss": did, "aud": AUDIENCE, "iat": now, "exp": now + 60, "jti": uuid.uuid4().hex}
    return {**base, **changes}


def documents(daemon: Daemon) -> float:
    """DID documents the daemon resolved upstream, ever (its /metrics)."""
    return upstream(httpx.get(f"{daemon.url}/metrics", timeout=10).text, "documents")


def upstream(text: str, kind: str) -> float:
    """Resolutions of `kind` (documents, handles) sent upstream, ever, by its /metrics."""
    return metrics.value(text, "atwhois_upstream_resolutions_total", kind=kind)


def cli(devnet: DevnetState, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ATWHOIS, "verify-token", *args, "--json"],
        env={**devnet.env(), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_tokens_the_real_pds_mints_verify_everywhere(devnet: DevnetState, tmp_path: Path) -> None:
    name = f"sa{uuid.uuid4().hex[:8]}"
    did = create_account(devnet.pds_url, name)
    plain, bound = pds_token(devnet, name), pds_token(devnet, name, METHOD)
    with daemon_here(devnet.env(), tmp_path / "d.log", "--cache", "memory:") as daemon:
        answer = verify(daemon, plain)
        report = answer.json()
        assert answer.status_code == 200 and report["outcome"] == "valid", report
        assert (
            report["issuer"] == did and report["declared_handle"] == name + world.LIVE_HANDLE_SUFFIX
        )
        assert report["handle"] is None and report["handle_checked"] is False  # SA-ISS-2
        assert report["key_id"] == "atproto" and report["expires_at"] > time.time()
        assert outcome(daemon, bound, method=METHOD) == ("valid", None)
        assert outcome(daemon, bound) == ("invalid", "SA-LXM-1")  # a method no one named
        served = cli(devnet, plain, "--aud", AUDIENCE, "--server", daemon.url)
        assert served.returncode == 0 and json.loads(served.stdout)["issuer"] == did
    here = cli(devnet, bound, "--aud", AUDIENCE, "--lxm", METHOD)
    assert here.returncode == 0, here.stdout + here.stderr
    assert (
        cli(devnet, bound, "--aud", AUDIENCE, "--lxm", "app.bsky.actor.getProfile").returncode == 1
    )
    assert cli(devnet, "not-a-token", "--aud", AUDIENCE).returncode == 2
    library = atwhois.verify_service_auth(plain, AUDIENCE, config=devnet.config())
    assert library.valid and library.issuer == did


def test_tampered_and_misaddressed_tokens_are_refused_naming_their_rule(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """Tokens of the real PDS altered, and tokens of a did:plc on the real directory whose
    key the test holds (the PDS keeps its accounts' keys, and mints only valid tokens)."""
    name = f"sb{uuid.uuid4().hex[:8]}"
    pds_did = create_account(devnet.pds_url, name)
    token = pds_token(devnet, name)
    signature = signature_of(token)
    s = int.from_bytes(signature[32:], "big")
    account = PlcAccount(devnet.plc_url, None)
    key = account.key.private
    now = int(time.time())
    cases = {
        "a flipped signature byte": (
            with_signature(token, bytes([signature[0] ^ 1]) + signature[1:]), "SA-SIG-1"),
        "a high-S twin": (
            with_signature(token, signature[:32] + (N_K256 - s).to_bytes(32, "big")), "C-SIG-2"),
        "another account's key": (mint(key, claims(pds_did)), "SA-SIG-1"),
        "exp in the past": (mint(key, claims(account.did, iat=now - 200, exp=now - 100)),
                            "SA-TIME-1"),
        "iat in the future": (mint(key, claims(account.did, iat=now + 100, exp=now + 160)),
                              "SA-TIME-1"),
        "another audience": (mint(key, claims(account.did, aud="did:web:other.example#x")),
                             "SA-AUD-1"),
        "another method": (mint(key, claims(account.did, lxm="com.atproto.repo.createRecord")),
                           "SA-LXM-1"),
        "a kid not accepted": (mint(key, claims(account.did), kid="#atproto_label"), "SA-KID-1"),
        "alg not matching the key": (mint(key, claims(account.did), alg="ES256"), "SA-ALG-2"),
        "alg none": (b64(b'{"typ":"JWT","alg":"none"}') + "." + token.split(".")[1] + ".",
                     "SA-ALG-1"),
        "not a JWT": ("definitely not a token", "SA-JWT-1"),
    }  # fmt: skip
    with daemon_here(devnet.env(), tmp_path / "d.log", "--cache", "memory:") as daemon:
        assert outcome(daemon, mint(key, claims(account.did))) == ("valid", None)
        assert outcome(daemon, token) == ("valid", None)  # the PDS's, as minted
        for why, (tampered, rule) in cases.items():
            method = METHOD if why == "another method" else None
            fields = {"method": method} if method else {}
            assert outcome(daemon, tampered, **fields) == ("invalid", rule), why
        assert "Traceback" not in daemon.log.read_text()
    # the PDS mints a bare audience: refused where the legacy form is not allowed
    args = ("--cache", "memory:", "--service-auth-bare-audience", "refuse")
    with daemon_here(devnet.env(), tmp_path / "strict.log", *args) as daemon:
        assert outcome(daemon, token) == ("invalid", "SA-AUD-1")


def test_a_rotated_key_verifies_after_one_refresh_and_a_flood_costs_little(
    devnet: DevnetState, tmp_path: Path
) -> None:
    account = PlcAccount(devnet.plc_url, None)
    old_token = mint(account.key.private, claims(account.did))
    with daemon_here(devnet.env(), tmp_path / "d.log", "--cache", "memory:") as daemon:
        assert outcome(daemon, old_token) == ("valid", None)  # the document cached
        before = documents(daemon)
        new_key = account.rotate_key(uuid.uuid4().hex)  # a real operation at the directory
        new_token = mint(new_key.private, claims(account.did))
        # SA-SIG-2: a document resolved within the last seconds (REFRESH_EVERY) is not
        # resolved again for a refused token; the new key verifies once it is older.
        until(lambda: verify(daemon, new_token).json()["document"]["refreshed"])
        assert documents(daemon) == before + 1  # exactly one refresh
        assert outcome(daemon, new_token) == ("valid", None)
        assert outcome(daemon, old_token) == ("invalid", "SA-SIG-1")
        # A flood for a DID no refresh has touched yet (its document cached)
        victim = PlcAccount(devnet.plc_url, None)
        good = mint(victim.key.private, claims(victim.did))
        assert outcome(daemon, good) == ("valid", None)
        flooded = documents(daemon)
        bad = with_signature(good, bytes(32) + signature_of(good)[32:])
        with httpx.Client(base_url=daemon.url, timeout=30) as client:
            for _ in range(1000):
                body = {"token": bad, "audience": AUDIENCE}
                assert (
                    client.post("/v1/verify/service-auth", json=body).json()["outcome"] == "invalid"
                )
        assert documents(daemon) - flooded <= 2  # at most a handful, not a thousand
        text = httpx.get(f"{daemon.url}/metrics", timeout=10).text
        assert metrics.value(text, "atwhois_service_auth_refreshes_total") <= 3


def test_a_token_never_waits_on_its_issuers_handle(devnet: DevnetState, tmp_path: Path) -> None:
    """SA-ISS-2, issue 66: the issuer declares a handle whose host answers 503 (the identity
    is unavailable as a whole), yet its document and key decide its token; and a refused
    token for an issuer not held, with a deep handle, costs the directory one request (no
    refresh of a document fetched a moment ago) and no handle resolution at all."""
    failing = PlcAccount(devnet.plc_url, "error.test")
    deep = PlcAccount(devnet.plc_url, "a.b.c.d.e.f.g.h.alice.test")
    good = mint(failing.key.private, claims(failing.did))
    bad = with_signature(good, bytes(32) + signature_of(good)[32:])
    anonymous = mint(deep.key.private, claims(deep.did))
    anonymous = with_signature(anonymous, bytes(32) + signature_of(anonymous)[32:])
    with daemon_here(devnet.env(), tmp_path / "d.log", "--cache", "memory:") as daemon:
        answer = verify(daemon, good)
        assert answer.status_code == 200 and answer.json()["outcome"] == "valid", answer.text
        assert answer.json()["declared_handle"] == "error.test"
        assert outcome(daemon, bad) == ("invalid", "SA-SIG-1")
        identity = httpx.get(f"{daemon.url}/v1/identity/{failing.did}", timeout=30).json()
        assert identity["status"] == "unavailable"  # the handle's host: not the token's matter
        text = httpx.get(f"{daemon.url}/metrics", timeout=10).text
        before = {k: upstream(text, k) for k in ("documents", "handles")}
        assert outcome(daemon, anonymous) == ("invalid", "SA-SIG-1")
        text = httpx.get(f"{daemon.url}/metrics", timeout=10).text
        assert upstream(text, "documents") == before["documents"] + 1
        assert upstream(text, "handles") == before["handles"]
        assert metrics.value(text, "atwhois_service_auth_refreshes_total") == 0


def test_an_issuer_unreachable_is_unavailable_and_a_deactivated_one_invalid(
    devnet: DevnetState, tmp_path: Path
) -> None:
    account = PlcAccount(devnet.plc_url, None)
    token = mint(account.key.private, claims(account.did))
    down = {**devnet.env(), "ATWHOIS_PLC_URL": f"http://127.0.0.1:{free_port()}"}
    with daemon_here(down, tmp_path / "down.log", "--cache", "memory:") as daemon:
        answer = verify(daemon, token)
        assert answer.status_code == 502 and answer.headers["Retry-After"]
        assert (answer.json()["outcome"], answer.json()["rule"]) == ("unavailable", None)
    account.tombstone()
    with daemon_here(devnet.env(), tmp_path / "up.log", "--cache", "memory:") as daemon:
        report = verify(daemon, mint(account.key.private, claims(account.did))).json()
        assert (report["outcome"], report["rule"]) == ("invalid", "SA-ISS-2")
        assert "did_deactivated" in report["reason"]


def test_a_replay_is_refused_by_either_of_two_daemons_sharing_redis(
    devnet: DevnetState, tmp_path: Path
) -> None:
    account = PlcAccount(devnet.plc_url, None)
    token = mint(account.key.private, claims(account.did))
    with RedisServer(tmp_path) as redis:
        args = ("--cache", redis.url, "--service-auth-audience", AUDIENCE)
        with (
            daemon_here(devnet.env(), tmp_path / "a.log", *args) as first,
            daemon_here(devnet.env(), tmp_path / "b.log", *args) as second,
        ):
            sidecar = {"token": token, "replay": True}  # the audience is the daemon's
            answer = httpx.post(f"{first.url}/v1/verify/service-auth", json=sidecar, timeout=30)
            assert answer.json()["outcome"] == "valid", answer.text
            again = httpx.post(f"{second.url}/v1/verify/service-auth", json=sidecar, timeout=30)
            assert (again.json()["outcome"], again.json()["rule"]) == ("invalid", "SA-JTI-2")
            text = httpx.get(f"{second.url}/metrics", timeout=10).text
            assert metrics.value(text, "atwhois_service_auth_replays_total") == 1
            other = httpx.post(
                f"{second.url}/v1/verify/service-auth",
                json={**sidecar, "audience": "did:web:other.example#x"},
                timeout=30,
            )
            assert other.status_code == 400  # the settings fix the audience


def signed_bytes(account: PlcAccount, header: bytes, body: bytes) -> str:
    """A token of these very bytes for its header and claims, signed by `account`."""
    text = f"{b64(header)}.{b64(body)}"
    return f"{text}.{b64(account.key.private.sign_recoverable(text.encode())[:64])}"


def test_no_token_field_is_a_500_and_each_form_names_its_rule(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """Issue 66: an `alg` that is a JSON list or object (TypeError: unhashable), a lone
    surrogate in `jti` with the replay check on (UnicodeEncodeError) were a 500 and a
    traceback each; typ spellings of an access token, an nbf an hour ahead, claims in UTF-16
    or with a BOM, and `crit` were accepted. Each is refused naming its rule, signed by a
    real issuer on the directory."""
    account = PlcAccount(devnet.plc_url, None)
    key, body = account.key.private, json.dumps(claims(account.did)).encode()
    cases = {
        "alg a list": (signed_bytes(account, b'{"typ":"JWT","alg":["ES256K"]}', body),
                       "SA-ALG-1"),
        "alg an object": (signed_bytes(account, b'{"typ":"JWT","alg":{"a":1}}', body),
                          "SA-ALG-1"),
        "a lone surrogate in jti": (mint(key, claims(account.did, jti="\ud800")), "SA-JWT-3"),
        "typ application/at+jwt": (mint(key, claims(account.did), typ="application/at+jwt"),
                                   "SA-TYP-1"),
        "typ at+jwt and a space": (mint(key, claims(account.did), typ="at+jwt "), "SA-TYP-1"),
        "nbf an hour ahead": (mint(key, claims(account.did, nbf=int(time.time()) + 3600)),
                              "SA-TIME-3"),
        "claims in UTF-16": (signed_bytes(account, b'{"typ":"JWT","alg":"ES256K"}',
                                          body.decode().encode("utf-16")), "SA-JWT-3"),
        "claims with a BOM": (signed_bytes(account, b'{"typ":"JWT","alg":"ES256K"}',
                                           b"\xef\xbb\xbf" + body), "SA-JWT-3"),
        "crit": (mint(key, claims(account.did), crit=["exp"]), "SA-CRIT-1"),
    }  # fmt: skip
    with daemon_here(devnet.env(), tmp_path / "d.log", "--cache", "memory:") as daemon:
        assert outcome(daemon, mint(key, claims(account.did)), replay=True) == ("valid", None)
        for why, (token, rule) in cases.items():
            answer = verify(daemon, token, replay=True)
            assert answer.status_code == 200, (why, answer.status_code, answer.text)
            assert (answer.json()["outcome"], answer.json()["rule"]) == ("invalid", rule), why
        assert "Traceback" not in daemon.log.read_text()


@pytest.fixture(scope="module")
def issuers(devnet: DevnetState) -> tuple[list[PlcAccount], list[PlcAccount]]:
    """Ten attacker issuers and three honest ones, on the test network's directory."""
    return (
        [PlcAccount(devnet.plc_url, None) for _ in range(10)],
        [PlcAccount(devnet.plc_url, None) for _ in range(3)],
    )


@pytest.mark.parametrize("cache", ["memory", "sqlite", "redis"])
def test_ten_issuers_flooding_a_daemon_leave_every_other_issuers_token_valid(
    devnet: DevnetState,
    tmp_path: Path,
    issuers: tuple[list[PlcAccount], list[PlcAccount]],
    cache: str,
) -> None:
    """Issue 66's target, at the daemon: ten issuers send valid tokens of their own, a new
    jti each, past their share (the bound and the share shrunk by their settings); the
    honest issuers' tokens amid them are all valid, every replay is refused (through the
    other daemon, where the store is shared), the metrics name the issuers at their share,
    and the verdict says where the nonces live. Before, one issuer filled the bound alone,
    and the memory store's LRU forgot nonces early."""
    attackers, honest = issuers
    share, flood = 10, 45  # 450 attacker tokens: past the bound of 200 of either daemon
    with contextlib.ExitStack() as stack:
        if cache == "redis":
            store = stack.enter_context(RedisServer(tmp_path)).url
        else:
            store = "memory:" if cache == "memory" else f"sqlite://{tmp_path}/cache.db"
        bounds = ("--service-auth-nonces", "200", "--service-auth-issuer-nonces", str(share))
        args = ("--cache", store, "--service-auth-audience", AUDIENCE, *bounds)
        count = 1 if cache == "memory" else 2  # daemons on one store
        daemons = [
            stack.enter_context(daemon_here(devnet.env(), tmp_path / f"{n}.log", *args))
            for n in range(count)
        ]
        clients = [stack.enter_context(httpx.Client(base_url=d.url, timeout=30)) for d in daemons]

        def ask(n: int, token: str) -> dict[str, Any]:
            answer = clients[n % count].post(PATH, json={"token": token, "replay": True})
            assert answer.status_code in (200, 502), answer.text
            return dict(answer.json())

        floods = [mint(a.key.private, claims(a.did)) for _ in range(flood) for a in attackers]
        fair = [mint(h.key.private, claims(h.did)) for _ in range(share - 2) for h in honest]
        half, fair_half = len(floods) // 2, len(fair) // 2  # honest amid the flood and after
        sent = floods[:half] + fair[:fair_half] + floods[half:] + fair[fair_half:]
        first = [ask(n, token) for n, token in enumerate(sent)]
        again = [ask(n + 1, token) for n, token in enumerate(sent)]
        text = clients[0].get("/metrics").text
    verdicts = dict(zip(sent, first, strict=True))
    assert {verdicts[t]["outcome"] for t in fair} == {"valid"}
    attacked = Counter(verdicts[t]["outcome"] for t in floods)
    assert attacked == {"valid": 10 * share, "unavailable": 10 * (flood - share)}
    replays = [b for a, b in zip(first, again, strict=True) if a["outcome"] == "valid"]
    assert {(r["outcome"], r["rule"]) for r in replays} == {("invalid", "SA-JTI-2")}
    scope = "process" if cache == "memory" else "shared"
    assert {v["replay"]["scope"] for v in first} == {scope}
    assert all(bool(v["replay"]["warning"]) == (scope == "process") for v in first)
    pressing = {
        labels["issuer"]
        for (name, labels_set), _ in metrics.samples(text).items()
        if name == "atwhois_service_auth_issuers_at_share"
        for labels in [dict(labels_set)]
    }
    assert pressing and pressing <= {a.did for a in attackers}


@pytest.mark.parametrize("field", ["token", "audience"])
def test_a_request_without_what_it_needs_is_a_400(
    devnet: DevnetState, tmp_path: Path, field: str
) -> None:
    with daemon_here(devnet.env(), tmp_path / "d.log", "--cache", "memory:") as daemon:
        body = {"token": "a.b.c", "audience": AUDIENCE}
        del body[field]
        answer = httpx.post(f"{daemon.url}/v1/verify/service-auth", json=body, timeout=30)
        assert answer.status_code == 400 and field in answer.json()["message"]
