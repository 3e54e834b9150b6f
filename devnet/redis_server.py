"""A Redis server of the test's own on a free loopback port, so a test can stop it and start
it again (an outage) without touching the machine's shared Redis."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

# The machine's own Redis (`make test` starts it when it is not running), shared by the
# tests and benchmarks that need no outage of their own: each uses a key prefix of its own.
REDIS_URL = "redis://127.0.0.1:6379/0"
# As a deployment sets it: the cache's buckets (hashes of entries of up to ~100 B) kept
# compact, as listpacks; Redis's default (64 B) keeps a bucket holding a DID document's entry
# as a hash table (`atwhois.cache.stores.redis`).
LISTPACK = ("--hash-max-listpack-value", "1024")


class RedisServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self._process = subprocess.Popen(
            [
                *(binary, "--bind", "127.0.0.1", "--port", str(self.port)),
                *("--save", "", "--appendonly", "no", "--dir", str(self.workdir)),
                *LISTPACK,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(10)
        self._process = None

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
