"""Every HTTP surface against hostile clients (issue 36, items 5-7 and 12, and the smaller
ones): malformed parameters are a 400 in the surface's own JSON shape, never a 500; HEAD is
GET without a body; unknown paths answer in JSON; idle and trickling connections are closed
and bounded in number while real clients are served; `/_health` recovers by itself after a
shared store comes back."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from atwhois.cache.stores.memory import MemoryStore
from atwhois.cache.stores.redis import RedisStore
from atwhois.cache.stores.tiered import TieredStore
from devnet.atwhois import Daemon, running_daemon
from devnet.forwarder import PlcStandIn
from devnet.network import DevnetState
from devnet.process import open_sockets
from devnet.redis_server import RedisServer
from tests.mirror.test_plc_mirror_network import caught_up, mirror_process
from tests.support.http import TOKEN, XRPC, get, xrpc_error
from tests.support.waiting import until

MALFORMED_EXPORTS = [
    "after=99999999999999999999",
    "after=%C2%B2",
    "after=%D9%A3",  # an Arabic-Indic digit
    "after=9999-12-31T23:59:59.999-12:00",
    "after=0001-01-01T00:00:00.000%2B14:00",
    "count=abc",
    "count=-1",
    "count=99999999999999999999",
]


@pytest.fixture(scope="module")
def mirror(devnet: DevnetState, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with mirror_process(devnet.env(), tmp_path_factory.mktemp("mirror")) as daemon:
        caught_up(daemon.url, devnet.plc_url)
        yield daemon


def test_the_mirror_refuses_malformed_parameters_with_400_json(
    mirror: Daemon, devnet: DevnetState
) -> None:
    """Item 5 and the smaller ones: never a 500, always the directory's `{message}`."""
    for query in MALFORMED_EXPORTS:
        answer = httpx.get(f"{mirror.url}/export?{query}", timeout=10)
        assert answer.status_code == 400, (query, answer.text)
        assert answer.headers["Content-Type"].startswith("application/json")
        assert "Invalid" in answer.json()["message"]
    for limit in ("abc", "-1", "%D9%A3", "99999999999999999999", "10001"):
        answer = httpx.get(f"{mirror.url}/_mirror?limit={limit}", timeout=10)
        assert answer.status_code == 400, (limit, answer.text)
        assert "limit must be a whole number" in answer.json()["message"]
    assert httpx.get(f"{mirror.url}/_mirror?limit=5", timeout=10).status_code == 200
    for path, status in (("/nowhere", 404), ("/export/more", 404)):
        answer = httpx.get(mirror.url + path, timeout=10)
        assert answer.status_code == status and "message" in answer.json()
    posted = httpx.post(f"{mirror.url}/export", timeout=10)
    assert posted.status_code == 405 and "message" in posted.json()
    alice = devnet.did("alice")
    for path in ("/export", f"/{alice}", f"/{alice}/log/audit"):
        head = httpx.head(mirror.url + path, timeout=10)
        whole = httpx.get(mirror.url + path, timeout=10)
        assert (head.status_code, head.content) == (200, b""), path
        assert whole.status_code == 200 and whole.content
    assert "Traceback" not in mirror.log.read_text()


def test_the_daemon_refuses_malformed_parameters_with_400_json(daemon: Daemon) -> None:
    """Item 6: `/v1` parameters that passed `str.isdigit()` or overflowed a clock."""
    for query in ("limit=%C2%B2", "limit=99999999999999999999999", "limit=-1", "limit=x"):
        answer = httpx.get(f"{daemon.url}/v1/audit/runs?{query}", timeout=10)
        assert "limit must be a whole number" in xrpc_error(answer, 400, "InvalidRequest")
    for since in (
        "9999-12-31T23:59:59.999-12:00",
        "0001-01-01T00:00:00.000%2B14:00",
        "1e400",
        "nan",
        "%C2%B2",
        "-5",
    ):
        answer = httpx.get(f"{daemon.url}/v1/audit/findings?since={since}", timeout=10)
        assert "since is an ISO 8601 time" in xrpc_error(answer, 400, "InvalidRequest"), since
    assert get(daemon, "/v1/audit/runs", limit="3").status_code == 200
    assert get(daemon, "/v1/audit/findings", since="2026-01-01T00:00:00Z").status_code == 200
    unknown = get(daemon, "/nowhere")
    assert unknown.status_code == 404 and unknown.json()["error"] == "NotFound"
    for path in ("/_health", XRPC + "resolveHandle?handle=alice.test", "/v1/audit/runs"):
        head = httpx.head(daemon.url + path, timeout=10)
        assert (head.status_code, head.content) == (200, b""), path
        assert head.headers["Content-Type"].startswith("application/json"), path
    assert "Traceback" not in daemon.log.read_text()


def test_watch_labels_are_capped_and_the_banner_is_composed_not_echoed(daemon: Daemon) -> None:
    """Smaller items: a 15 KB label is refused (API and page); `/audits?done=` no longer
    echoes a stranger's text; the banner names an identifier the daemon parsed."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    long_label = {"identifier": "alice.test", "label": "x" * 15_000}
    refused = httpx.post(f"{daemon.url}/v1/watch", json=long_label, headers=auth, timeout=10)
    assert "at most 200" in xrpc_error(refused, 400, "InvalidRequest")
    form = {"token": TOKEN, "identifier": "alice.test", "label": "y" * 201, "action": "add"}
    page = httpx.post(f"{daemon.url}/audits/watch", data=form, timeout=10)
    assert page.status_code == 400 and "at most 200" in page.text
    echoed = httpx.get(f"{daemon.url}/audits", params={"done": "PWNED banner"}, timeout=10)
    assert echoed.status_code == 200 and "PWNED" not in echoed.text
    stranger = httpx.get(f"{daemon.url}/audits", params={"watched": "not valid!"}, timeout=10)
    assert stranger.status_code == 200 and "not valid!" not in stranger.text
    named = httpx.get(f"{daemon.url}/audits", params={"watched": "alice.test"}, timeout=10)
    assert "alice.test is watched." in named.text


def test_answers_that_depend_on_the_origin_say_so(devnet: DevnetState, tmp_path: Path) -> None:
    """Smaller item: with a CORS list, an answer to an origin not on it still carries
    `Vary: Origin`, so that a shared cache does not hand it to an allowed origin."""
    args = ("--cache", "memory:", "--cors-origin", "https://app.example")
    with running_daemon(devnet.env(), tmp_path / "cors.log", *args) as served:
        for origin in ("https://app.example", "https://elsewhere.example", None):
            headers = {"Origin": origin} if origin else {}
            answer = httpx.get(
                served.url + XRPC + "resolveHandle",
                params={"handle": "alice.test"},
                headers=headers,
                timeout=10,
            )
            assert answer.status_code == 200 and answer.headers["Vary"] == "Origin", origin
            allowed = answer.headers.get("Access-Control-Allow-Origin")
            assert allowed == ("https://app.example" if origin == "https://app.example" else None)


def _idle(url: str, count: int) -> list[socket.socket]:
    """`count` connections, each with a head that never ends, opened from 16 threads: one
    after another, a connection the full listen queue dropped waits a second for its SYN
    to be sent again, and the first were idle past the timeout before the bound was
    reached (seen: 1,500 took 6 s)."""
    host, port = url.removeprefix("http://").split(":")

    def one(_: int) -> socket.socket:
        conn = socket.create_connection((host, int(port)), timeout=5)
        conn.sendall(b"GET /_health HTTP/1.1\r\nHost: x\r\n")
        return conn

    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(one, range(count)))


def _closed(conn: socket.socket) -> bool:
    conn.settimeout(0.01)
    try:
        return conn.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


IDLE_S = 3.0  # the idle timeout of the test below: past the time its checks take


@pytest.mark.alone
@pytest.mark.parametrize("surface", ["serve", "plc mirror"])
def test_idle_connections_are_bounded_and_clients_are_still_served(
    devnet: DevnetState, tmp_path: Path, surface: str
) -> None:
    """Item 7: 1,500 connections that never finish a request's head, against a bound of 1,000.
    The daemon keeps answering /_health (and XRPC), its open files stay under the bound,
    the idle ones are closed after the idle timeout, and the log says so in a few lines.
    One address may take the whole bound here: the bound's own eviction is under test (the
    per-client share is in test_slow_clients.py)."""
    limits = ("--max-connections", "1000", "--max-connections-per-client", "1000")
    limits += ("--idle-timeout", str(IDLE_S))
    if surface == "serve":
        context = running_daemon(
            devnet.env(), tmp_path / "serve.log", "--cache", "memory:", *limits
        )
    else:
        context = mirror_process(devnet.env(), tmp_path, *limits)
    with context as served:
        if surface == "plc mirror":
            caught_up(served.url, devnet.plc_url)
        before = open_sockets(served.process.pid)
        idle = _idle(served.url, 1500)
        opened = time.monotonic()
        try:
            for _ in range(5):
                health = httpx.get(f"{served.url}/_health", timeout=10)
                assert health.status_code == 200
            if surface == "serve":
                answer = get(served, XRPC + "resolveHandle", handle="alice.test")
                assert answer.status_code == 200
            # an evicted connection's socket is closed by the event loop, a moment later
            until(lambda: open_sockets(served.process.pid) <= before + 1000, 5)
            until(lambda: all(_closed(conn) for conn in idle), 3 * IDLE_S)
            assert time.monotonic() - opened >= IDLE_S - 0.5  # by their idle timeout
        finally:
            for conn in idle:
                conn.close()
        lines = [line for line in served.log.read_text().splitlines() if "connection_limit" in line]
        assert 1 <= len(lines) <= 3, lines
        assert json.loads(lines[0])["evicted"] >= 1
        assert "Traceback" not in served.log.read_text()


class _Failing:
    """The real Redis store, whose next write fails on command (a write that was in flight
    when the outage began), and whose deletes wait for the test (a slow replay)."""

    def __init__(self, inner: RedisStore) -> None:
        self.inner, self.name = inner, inner.name
        self.fail_next_put = False
        self.release = asyncio.Event()
        self.release.set()

    async def get(self, key: str) -> object:
        return await self.inner.get(key)

    async def put(self, key: str, value: bytes, expires_at: float) -> None:
        if self.fail_next_put:
            self.fail_next_put = False
            raise ConnectionError("the write that was in flight")
        await self.inner.put(key, value, expires_at)

    async def delete(self, keys: object) -> None:
        await self.release.wait()
        await self.inner.delete(keys)  # type: ignore[arg-type]

    async def count(self) -> int:
        return await self.inner.count()

    async def scan(self, prefix: str, limit: int) -> list[tuple[str, bytes]]:
        return await self.inner.scan(prefix, limit)

    async def close(self) -> None:
        await self.inner.close()


async def test_health_recovers_by_itself_after_the_store_comes_back(tmp_path: Path) -> None:
    """Item 12: a write fails while the keys missed in the outage are being replayed; the
    replay must not clear that failure, and /_health (the tier's `health`) must become ok
    again by itself, without a request that writes."""
    clock = [0.0]
    with RedisServer(tmp_path) as redis:
        below = _Failing(RedisStore(redis.url))
        tier = TieredStore(MemoryStore(), below, timer=lambda: clock[0])  # type: ignore[arg-type]
        try:
            redis.stop()
            await tier.put("k1", b"v", time.time() + 60)  # missed by the store
            assert await tier.health()
            redis.start()
            clock[0] += 2  # past the retry delay
            below.release.clear()
            replay = asyncio.create_task(tier.get("k0"))  # succeeds, then replays k1
            await asyncio.sleep(0.1)
            below.fail_next_put = True
            await tier.put("k2", b"v", time.time() + 60)  # fails meanwhile
            below.release.set()
            await replay
            assert await tier.health()  # still degraded: k2 is not in the store yet
            for _ in range(20):  # nothing but health checks from here on
                clock[0] += 6
                if not await tier.health():
                    break
            assert await tier.health() == []
        finally:
            await tier.close()


def test_the_daemon_is_not_ok_while_its_mirror_makes_no_progress(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """`serve --plc-mirror` whose upstream fails: the daemon's own /_health says `ok: false`
    with the mirror's problem among its reasons, and `ok` again once the upstream is back."""
    with PlcStandIn(devnet.plc_url) as stand_in:
        env = {**devnet.env(), "ATWHOIS_PLC_URL": stand_in.url}
        args = ("--cache", "memory:", "--plc-mirror", "--plc-db", str(tmp_path / "m.db"))
        with running_daemon(
            env, tmp_path / "serve.log", *args, "--plc-mirror-interval", "0.2"
        ) as d:
            until(lambda: get(d, "/_health").json()["plc_mirror"]["behind_s"] is not None, 30)
            assert get(d, "/_health").json()["ok"]
            stand_in.set_fault("status:503")
            until(lambda: not get(d, "/_health").json()["ok"], 15)
            health = get(d, "/_health").json()
            assert health["status"] == "degraded"
            assert any("HTTP 503" in reason for reason in health["reasons"]), health
            stand_in.set_fault(None)
            until(lambda: get(d, "/_health").json()["ok"], 30)
