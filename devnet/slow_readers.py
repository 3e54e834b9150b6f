"""Clients that ask and never read: each connection sends a batch of pipelined requests and
then reads nothing, so that every answer waits in the server's buffers (issue 55, item 1);
and, to tell them from, a client that asks as much and reads it slowly (`ReadingSlowly`).
A connection the server closes is opened again a second later while the hold lasts, so the
pressure stays (a second, not at once: a client that reconnects as fast as it can is a
connection flood, which is the network's to stop, not a slow reader).
Run in a process of its own by benchmarks (`python -m devnet.slow_readers URL COUNT SECONDS`),
or on a thread by tests (`SlowReaders`)."""

from __future__ import annotations

import select
import socket
import sys
import threading
import time

REOPEN_AFTER = 1.0  # seconds before the connections the server closed are opened again
PIPELINED = 1000  # requests sent at once on each connection: their answers fill every buffer
REQUEST = (
    b"GET /xrpc/com.atproto.identity.resolveHandle?handle=alice.test HTTP/1.1\r\nHost: slow\r\n\r\n"
)


def _open(address: tuple[str, int]) -> socket.socket | None:
    conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # small, so that it fills at once; set before connecting: set after, the window the
        # handshake offered is the default's, the server sends more than this buffer keeps,
        # and its reset, numbered past what was kept, falls outside the window and is dropped
        # (in one run, 113 of 300 connections the server had closed were never seen closed,
        # nor opened again: the pressure faded)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn.settimeout(2)
        conn.connect(address)
        conn.sendall(REQUEST * PIPELINED)
        conn.setblocking(False)
        return conn
    except OSError:
        conn.close()
        return None


class SlowReaders:
    """`count` connections to `url` that ask and never read, until `stop`; `closed` counts
    those the server was seen to close (each replaced by a new one; one closed without a
    reset while its answers fill our receive buffer is never seen: its end waits behind
    them)."""

    def __init__(self, url: str, count: int) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.address = (host, int(port))
        self.count = count
        self.closed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)

    def __enter__(self) -> SlowReaders:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _hold(self) -> None:
        held: list[socket.socket] = []
        poller = select.poll()
        by_fd: dict[int, socket.socket] = {}
        reopen_at = 0.0
        while not self._stop.is_set():
            while (
                len(held) < self.count and time.monotonic() >= reopen_at and not self._stop.is_set()
            ):
                conn = _open(self.address)
                if conn is None:
                    time.sleep(0.01)
                    continue
                held.append(conn)
                by_fd[conn.fileno()] = conn
                poller.register(conn, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
            for fd, _ in poller.poll(200):  # closed by the server: never read, replaced
                conn = by_fd.pop(fd)
                poller.unregister(fd)
                held.remove(conn)
                conn.close()
                self.closed += 1
                reopen_at = time.monotonic() + REOPEN_AFTER
        for conn in held:
            conn.close()


class ReadingSlowly:
    """One connection that asks `count` times at once, as a slow reader does, then reads the
    answers at `rate` bytes a second, a little at a time (a client on a slow link, or one
    working through a long answer): the server waits for it most of the time, but it reads.
    `run()` returns the complete answers it got, once it has all, or the server closed the
    connection, or nothing came for `TIMEOUT` seconds."""

    CHUNK = 512  # bytes read at a time: small reads, each making a little room
    TIMEOUT = 30.0
    STATUS = b"HTTP/1.1 200 OK\r\n"

    def __init__(self, url: str, count: int, rate: float) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.address = (host, int(port))
        self.count, self.rate = count, rate

    def run(self) -> int:
        answers, tail = 0, b""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as conn:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # as the slow readers'
            conn.settimeout(self.TIMEOUT)
            conn.connect(self.address)
            conn.sendall(REQUEST * self.count)
            while answers < self.count:
                try:
                    data = conn.recv(self.CHUNK)
                except OSError:  # reset, or nothing for the timeout
                    break
                if not data:
                    break
                seen = tail + data  # a status line may straddle two reads
                answers += seen.count(self.STATUS)
                tail = seen[-(len(self.STATUS) - 1) :]
                time.sleep(len(data) / self.rate)
        return answers


if __name__ == "__main__":
    url, count, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    with SlowReaders(url, count):
        time.sleep(seconds)
