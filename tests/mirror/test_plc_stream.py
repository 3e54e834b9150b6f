"""`/export/stream` both ways (`mirror.stream`, the follower's `mirror.upstream_stream`), on
the test network: an atwhois mirror follows the reference directory by polling (it has no
stream), a second mirror follows the first one's stream; either end is killed and started
again; a cursor too old for the stream is sent to `/export` and comes back; a cursor in the
upstream's future is refused loudly; a consumer that stops reading is closed while the
serving mirror's memory stays put (P-API-3)."""

from __future__ import annotations

import contextlib
import json
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import websockets
from websockets.sync.client import connect

from atwhois.mirror import Follower, Replica, Upstream
from atwhois.mirror.backends import SqliteMirrorStore
from atwhois.mirror.upstream import UpstreamFault
from atwhois.mirror.upstream_stream import OUTDATED, UpstreamStream
from atwhois.resolver.did import mirror_fields
from devnet.atwhois import Daemon
from devnet.network import DevnetState
from devnet.pds import free_port
from devnet.plc_ops import PlcAccount, new_handle
from devnet.synthetic_plc import export_lines
from tests.mirror.test_plc_mirror_network import caught_up, mirror_process
from tests.support import metrics
from tests.support.waiting import until


def mirror(
    env: dict[str, str], tmp_path: Path, name: str, port: int, *args: str
) -> contextlib.AbstractContextManager[Daemon]:
    return mirror_process(env, tmp_path, *args, name=name, port=port)


def ops(url: str) -> list[tuple[int, str, str]]:
    """(seq, DID, CID) of every operation, in the mirror's seq order (`/export?after=`)."""
    found: list[tuple[int, str, str]] = []
    while True:
        after = found[-1][0] if found else 0
        body = httpx.get(f"{url}/export", params={"after": str(after)}, timeout=10).text
        page = [json.loads(line) for line in body.split("\n") if line]
        found += [(entry["seq"], entry["did"], entry["cid"]) for entry in page]
        if len(page) < 1000:
            return found


def health(url: str) -> dict[str, object]:
    answer: dict[str, object] = httpx.get(f"{url}/_health", timeout=10).json()
    return answer


def the_same(follower: str, upstream: str) -> bool:
    """The follower holds exactly the upstream's operations, in its order, none twice, and
    its cursor is the upstream's newest seq, which its health says it saw (P-CMP-3)."""
    mine, theirs = ops(follower), ops(upstream)
    cids = [cid for _, _, cid in mine]
    said = health(follower)
    return (
        cids == [cid for _, _, cid in theirs]
        and len(set(cids)) == len(cids)
        and said["cursor"] == str(theirs[-1][0])
        and said["upstream_seq"] == theirs[-1][0]
    )


def closes(url: str, reason: str) -> float:
    """How many consumers the mirror at `url` closed its stream on for `reason`."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return metrics.value(text, "atwhois_plc_stream_closed_total", missing=0.0, reason=reason)


def new_account(devnet: DevnetState) -> str:
    return PlcAccount(devnet.plc_url, new_handle("streamed")).did


def test_a_mirror_follows_another_mirrors_stream_through_restarts_of_either(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """New operations reach the second mirror within 1 s of the first storing them; the
    second killed, or the first, and started again: nothing lost, nothing twice, the same
    order and cursor as the first."""
    a_port, b_port = free_port(), free_port()
    a_url = f"http://127.0.0.1:{a_port}"
    following_a = {**devnet.env(), "ATWHOIS_PLC_URL": a_url}
    with mirror(devnet.env(), tmp_path, "a", a_port) as a:
        caught_up(a.url, devnet.plc_url)
        assert health(a.url)["source"] == "poll"  # the reference directory has no stream
        with mirror(following_a, tmp_path, "b", b_port) as b:
            until(lambda: health(b.url)["source"] == "stream", 20)
            until(lambda: the_same(b.url, a_url), 20)
            for _ in range(3):
                did = new_account(devnet)
                until(lambda did=did: did in {d for _, d, _ in ops(a_url)}, 10)
                # how soon (under a second here) is `python -m bench`'s to say
                until(lambda did=did: did in {d for _, d, _ in ops(b.url)}, 10)
            b.process.kill()  # no goodbye: what it stored is what it has
            b.process.wait()
        meanwhile = [new_account(devnet) for _ in range(2)]
        until(lambda: set(meanwhile) <= {d for _, d, _ in ops(a_url)}, 10)
        with mirror(following_a, tmp_path, "b", b_port) as b:
            until(lambda: the_same(b.url, a_url), 20)
            a.process.kill()
            a.process.wait()
            while_down = new_account(devnet)
            with mirror(devnet.env(), tmp_path, "a", a_port):
                until(lambda: while_down in {d for _, d, _ in ops(a_url)}, 20)
                until(lambda: the_same(b.url, a_url), 30)  # reconnected, with back-off
                assert health(b.url)["source"] == "stream"
                assert health(b.url)["rejected"] == {} and health(b.url)["faults"] == 0


def test_a_cursor_too_old_for_the_stream_pages_through_export_and_comes_back(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """The first mirror streams only the last 3 operations back: the second, stopped while
    5 were made, is closed with OutdatedCursor, reads /export from its cursor, and follows
    the stream again; it holds what the first holds."""
    a_port, b_port = free_port(), free_port()
    a_url = f"http://127.0.0.1:{a_port}"
    following_a = {**devnet.env(), "ATWHOIS_PLC_URL": a_url}
    with mirror(devnet.env(), tmp_path, "a", a_port, "--plc-mirror-stream-backlog", "3") as a:
        caught_up(a.url, devnet.plc_url)
        with mirror(following_a, tmp_path, "b", b_port) as b:
            until(lambda: health(b.url)["source"] == "stream", 20)
        made = [new_account(devnet) for _ in range(5)]
        until(lambda: set(made) <= {d for _, d, _ in ops(a_url)}, 10)
        with mirror(following_a, tmp_path, "b", b_port) as b:
            until(lambda: the_same(b.url, a_url), 20)
            until(lambda: health(b.url)["source"] == "stream", 20)
            closed = closes(a.url, OUTDATED)
            assert closed >= 1
            assert health(b.url)["stream_errors"] == 0  # a notice, not a failure


def test_a_cursor_in_the_upstreams_future_is_refused_and_stays(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """A follower whose cursor is past everything the upstream has: the stream's
    FutureCursor is a fault of the upstream's, said with the cursor, and the cursor is not
    moved back."""
    port = free_port()
    with mirror(devnet.env(), tmp_path, "a", port) as a:
        caught_up(a.url, devnet.plc_url)
        store = SqliteMirrorStore(tmp_path / "ahead.db")
        from atwhois.mirror.records import Batch

        store.write(Batch(meta={"cursor": "999999", "cursor_time": ""}))
        follower = Follower(Replica(store), Upstream(a.url), stream=UpstreamStream(a.url))
        try:
            with pytest.raises(UpstreamFault, match="cursor 999999"):
                follower._follow_stream()
            assert follower.state.cursor == "999999" == store.meta()["cursor"]
            assert follower.state.stream_errors == 1
        finally:
            follower.stop()
        closed = closes(a.url, "FutureCursor")
        assert closed == 1


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_consumer_that_stops_reading_is_closed_and_costs_no_memory(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """20,000 operations (about 12 MB as messages) for a consumer that reads none: it is
    closed with ConsumerTooSlow after the 1 s it may take per message, and the serving
    mirror's resident memory grows by less than 10 MB meanwhile (nothing is buffered
    for it but one page)."""
    store = SqliteMirrorStore(tmp_path / "a.db")
    Replica(store).apply(list(export_lines(5000, 4)))
    store.close()
    port = free_port()
    args = ("--plc-mirror-stream-timeout", "1")
    with mirror(devnet.env(), tmp_path, "a", port, *args) as a:
        until(lambda: len(ops(a.url)) >= 20_000, 30)
        until(lambda: health(a.url)["behind_s"] is not None, 30)  # its own backfill done
        before = _rss_kib(a.process.pid)
        slow = _silent_consumer(port)
        try:
            took = until(lambda: closes(a.url, "ConsumerTooSlow") == 1, 30)
            grown = _rss_kib(a.process.pid) - before
            assert grown < 10 * 1024, (
                f"the mirror grew {grown} KiB for a consumer that reads nothing"
            )
            assert health(a.url)["stream"]["consumers"] == 0  # type: ignore[index]
            assert took > 0.5  # it was given its second to read
            slow.settimeout(10)
            received = 0
            with contextlib.suppress(ConnectionError):
                while chunk := slow.recv(65536):  # what was in flight, then the end
                    received += len(chunk)
            assert 0 < received < 4 * 1024 * 1024  # a fraction of the 12 MB it asked for
        finally:
            slow.close()


def _silent_consumer(port: int) -> socket.socket:
    """A consumer that asks for the stream from the start, then reads nothing."""
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(("127.0.0.1", port))
    slow.sendall(
        b"GET /export/stream?cursor=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    return slow


def test_consumers_past_the_bound_are_refused_and_each_holds_little(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """Issue 55, item 2: consumers of the stream are bounded by a setting (here 20): the
    21st is answered 503 before its upgrade, and counted; 20 that read nothing of 20,000
    operations grow the mirror by less than 2 MiB in all (a page of 32 operations each;
    with pages of 256, ~360 KiB each); once they are gone a new consumer is served."""
    store = SqliteMirrorStore(tmp_path / "a.db")
    Replica(store).apply(list(export_lines(5000, 4)))
    store.close()
    port = free_port()
    args = ("--plc-mirror-stream-consumers", "20", "--plc-mirror-stream-timeout", "60")
    with mirror(devnet.env(), tmp_path, "a", port, *args) as a:
        until(lambda: len(ops(a.url)) >= 20_000, 30)
        until(lambda: health(a.url)["behind_s"] is not None, 30)
        before = _rss_kib(a.process.pid)
        silent = [_silent_consumer(port) for _ in range(20)]
        try:
            until(lambda: health(a.url)["stream"]["consumers"] == 20, 20)  # type: ignore[index]
            grown = _rss_kib(a.process.pid) - before
            assert grown < 2 * 1024, f"20 silent consumers cost {grown} KiB"
            refused = httpx.get(
                f"{a.url}/export/stream",
                headers={
                    "Upgrade": "websocket", "Connection": "Upgrade",
                    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13",
                },
                timeout=10,
            )  # fmt: skip
            assert refused.status_code == 503 and refused.headers["retry-after"]
            assert closes(a.url, "full") == 1
        finally:
            for consumer in silent:
                consumer.close()
        until(lambda: health(a.url)["stream"]["consumers"] == 0, 20)  # type: ignore[index]
        with connect(f"ws://127.0.0.1:{port}/export/stream?cursor=0", open_timeout=10) as ws:
            assert json.loads(ws.recv(timeout=10))["seq"] >= 1


def test_a_cursor_that_is_not_a_number_is_a_400_not_a_hang(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """The reference hangs the handshake here (issue 33); the mirror answers at once."""
    port = free_port()
    with mirror(devnet.env(), tmp_path, "a", port) as a:
        caught_up(a.url, devnet.plc_url)
        for cursor in ("abc", "-1", "1e3", "٣", "9" * 40):
            with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
                connect(f"ws://127.0.0.1:{port}/export/stream?cursor={cursor}", open_timeout=5)
            assert refused.value.response.status_code == 400, cursor
        answer = httpx.get(f"{a.url}/export/stream", timeout=5)
        assert answer.status_code == 426  # not a WebSocket handshake
        with connect(f"ws://127.0.0.1:{port}/export/stream", open_timeout=5) as live:
            did = new_account(devnet)
            message = json.loads(live.recv(timeout=10))
            assert message["type"] == "sequenced_op" and message["did"] == did
            assert "nullified" not in message and isinstance(message["seq"], int)


def test_the_stream_sends_what_export_sends(devnet: DevnetState, tmp_path: Path) -> None:
    """From a cursor, the stream's messages are /export?after='s lines, one by one."""
    port = free_port()
    with mirror(devnet.env(), tmp_path, "a", port) as a:
        caught_up(a.url, devnet.plc_url)
        lines = httpx.get(f"{a.url}/export", params={"after": "5"}, timeout=10).text.split("\n")
        with connect(f"ws://127.0.0.1:{port}/export/stream?cursor=5", open_timeout=5) as stream:
            got = [stream.recv(timeout=10) for _ in lines]
            # offered (websockets offers permessage-deflate), not taken: a compressor is
            # ~186 KiB a consumer, held as long as it stays
            assert stream.response is not None
            assert "Sec-WebSocket-Extensions" not in stream.response.headers
        assert got == lines


def test_a_stream_that_stalls_while_the_upstream_moves_is_not_current(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """P-API-2, P-API-3, P-API-4: mirror B follows the stream of a stand-in in front of
    mirror A; the stand-in then sends nothing more, while A's export grows and the stand-in
    answers pings. A ping proves nothing stored: B looks at the export past its cursor
    while the stream is quiet, finds an operation the stream did not send, names the stall
    in its health and reconnects (still stalled, it stays not current). No answer of B's
    about the new DID is a 404 that says current=yes (which a resolver keeps as a confirmed
    absence); once the stream flows again, B has it."""
    from devnet.stalling_stream import StallingStream
    from tests.mirror.test_plc_mirror_network import INTERVAL

    with mirror(devnet.env(), tmp_path, "a", free_port()) as a:
        caught_up(a.url, devnet.plc_url)
        stand_in = StallingStream(a.url)
        try:
            following = {**devnet.env(), "ATWHOIS_PLC_URL": stand_in.url}
            with mirror(following, tmp_path, "b", free_port()) as b:
                until(lambda: health(b.url)["source"] == "stream", 20)
                until(lambda: the_same(b.url, a.url), 20)
                stand_in.flowing = False
                stalls = int(health(b.url)["stream_stalls"])  # type: ignore[call-overload]
                did = new_account(devnet)
                until(lambda: did in {d for _, d, _ in ops(a.url)}, 10)

                def answered(wanted: int) -> bool:
                    """B's answer about the DID: never a 404 that says current=yes."""
                    answer = httpx.get(f"{b.url}/{did}", timeout=10)
                    assert answer.status_code in (200, 404), answer.text
                    if answer.status_code == 404:
                        assert "current=no" in answer.headers["atwhois-plc-mirror"]
                    return answer.status_code == wanted

                took = until(lambda: int(health(b.url)["stream_stalls"]) > stalls, 10)  # type: ignore[call-overload]
                print(f"stall named {took:.2f} s after A had the operation (interval {INTERVAL} s)")
                assert "is stalled" in str(health(b.url)["problem"] or health(b.url)["last_error"])
                assert stand_in.withheld > 0  # the stream did stall: it withheld the op
                assert answered(404)
                stand_in.flowing = True
                until(lambda: answered(200), 20)
        finally:
            stand_in.stop()


@pytest.mark.parametrize("follows", ["auto", "off"], ids=["stream", "poll"])
def test_a_new_did_asked_at_once_is_served_not_denied(
    devnet: DevnetState, tmp_path: Path, follows: str
) -> None:
    """P-API-2, P-API-4, read after write: mirror A polls the reference directory; mirror B
    follows A's stream (or polls A), resting 5 s between reads. A DID is made at the
    directory, A asked about it (which reads the directory for it), and B asked three times
    at once the moment A has answered: the operation is in B's upstream, on its way. Every
    answer of B's is a 200: a 404 is allowed only when B did not hold the operation even
    after it answered (its cursor, read right after, before the operation's seq at A),
    which a question held until the operation is applied never gives. Then B, quiet, says
    it is current, and how old the look that proves it is (stream), within its bound."""
    interval = 5.0
    a_port = free_port()
    a_url = f"http://127.0.0.1:{a_port}"
    following_a = {**devnet.env(), "ATWHOIS_PLC_URL": a_url}
    b_args = ("--plc-mirror-stream", follows, "--plc-mirror-interval", str(interval))
    with mirror(devnet.env(), tmp_path, "a", a_port) as a:
        caught_up(a.url, devnet.plc_url)
        with mirror(following_a, tmp_path, "b", free_port(), *b_args) as b:
            caught_up(b.url, a_url)
            source = "stream" if follows == "auto" else "poll"
            until(lambda: health(b.url)["source"] == source, 20)
            statuses: list[int] = []
            for _ in range(6):
                did = new_account(devnet)
                assert httpx.get(f"{a.url}/{did}", timeout=10).status_code == 200
                with ThreadPoolExecutor(3) as pool:
                    asked = [pool.submit(httpx.get, f"{b.url}/{did}", timeout=10) for _ in "abc"]
                    answers = [question.result() for question in asked]
                held = int(str(health(b.url)["cursor"]))
                seq = next(s for s, d, _ in ops(a_url) if d == did)
                for answer in answers:
                    statuses.append(answer.status_code)
                    if answer.status_code == 404:  # a wrong answer if B held it, even after
                        assert held < seq, (did, held, seq, answer.headers)
                        assert "current=no" in answer.headers["atwhois-plc-mirror"]
            assert statuses == [200] * 18, statuses  # and B never took its whole bound
            if follows == "auto":  # P-API-4: a proven stream, quiet, says it is current
                known = f"{b.url}/{did}"
                until(
                    lambda: (
                        "current=yes" in httpx.get(known, timeout=10).headers["atwhois-plc-mirror"]
                    ),
                    3 * interval,
                )
                said = mirror_fields(httpx.get(known, timeout=10).headers["atwhois-plc-mirror"])
                assert float(said["behind"].removesuffix("s")) <= 2 * interval, said
