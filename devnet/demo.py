"""`make run`: the test network, and `atwhois serve` on the embedded SQLite cache in front of
it (port 2584 when it is free, else one the system picks: the line that says so gives the
URL); a few requests to show what it answers, the lines that point the command line at the
same network, then it serves in the foreground until SIGINT (Ctrl-C) or SIGTERM, with or
without a terminal. Everything it keeps (cache, audit database, logs) is in a temporary
folder that goes with it: a user's own watch-list is never touched.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

from atwhois.foundation import defaults
from devnet.atwhois import running_daemon

from .network import running_devnet

DEMO = [
    ("resolveHandle", "/xrpc/com.atproto.identity.resolveHandle?handle=alice.test"),
    ("not verified both ways", "/xrpc/com.atproto.identity.resolveHandle?handle=bob-old.test"),
    ("resolveIdentity", "/xrpc/com.atproto.identity.resolveIdentity?identifier=conflict.test"),
    ("a tombstoned DID", "/xrpc/com.atproto.identity.resolveIdentity?identifier=erin.test"),
    ("mini document", "/xrpc/com.bad-example.identity.resolveMiniDoc?identifier=quinn.test"),
]


def free_port(port: int) -> int:
    """`port` when nothing listens there, else 0 (any)."""
    with socket.socket() as probe:
        try:
            probe.bind((defaults.HOST, port))
        except OSError:
            return 0
    return port


def main() -> None:
    # `make run` stopped with SIGTERM unwinds like Ctrl-C: the daemon and the test network
    # stop and the temporary folder goes, instead of outliving the run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a pipe reads along
    port = free_port(defaults.PORT)
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-run-") as workdir,
        running_devnet(Path(workdir)) as devnet,
        running_daemon(
            devnet.env(),
            Path(workdir) / "serve.log",
            *("--cache", f"sqlite://{workdir}/cache.db", "--port", str(port)),
            *("--audit-db", f"{workdir}/audit.db"),
        ) as daemon,
    ):
        print(f"test network up in {devnet.startup_seconds}s; atwhois serve at {daemon.url}")
        if port == 0:
            print(f"(port {defaults.PORT} is taken: the examples below use {daemon.url})")
        print(f"(cache: {workdir}/cache.db, audits: {workdir}/audit.db, log: {workdir}/serve.log)")
        print()
        for what, path in DEMO:
            response = httpx.get(daemon.url + path, timeout=30)
            print(f"# {what}\n$ curl '{daemon.url}{path}'")
            print(f"{response.status_code} {response.text}\n")
        print("$ atwhois conflict.test   # the same resolver, as a command")
        sys.stdout.flush()
        atwhois = str(Path(sys.executable).with_name("atwhois"))
        subprocess.run([atwhois, "conflict.test"], env={**os.environ, **devnet.env()}, check=False)
        print("\nPoint atwhois at this test network from another shell (paste these lines):")
        print(textwrap.indent(devnet.exports(), "  "))
        print("  atwhois alice.test")
        print(
            f"\nserving at {daemon.url} until Ctrl-C (or SIGTERM): open {daemon.url}/id/alice.test"
            f" in a browser on this machine (or /v1/identity/alice.test, /metrics, /openapi.json)"
        )
        try:
            while daemon.process.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
