"""`make run`: the test network, and `atwhois serve` on the embedded SQLite cache in front of
it; a few requests to show what it answers, then it serves until Ctrl-C (when run from a
terminal; otherwise it stops after the demonstration).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from devnet.atwhois import running_daemon

from .network import running_devnet

DEMO = [
    ("resolveHandle", "/xrpc/com.atproto.identity.resolveHandle?handle=alice.test"),
    ("not verified both ways", "/xrpc/com.atproto.identity.resolveHandle?handle=bob-old.test"),
    ("resolveIdentity", "/xrpc/com.atproto.identity.resolveIdentity?identifier=conflict.test"),
    ("a tombstoned DID", "/xrpc/com.atproto.identity.resolveIdentity?identifier=erin.test"),
    ("mini document", "/xrpc/com.bad-example.identity.resolveMiniDoc?identifier=quinn.test"),
]


def main() -> None:
    # `make run` stopped with SIGTERM unwinds like Ctrl-C: the daemon and the test network
    # stop and the temporary folder goes, instead of outliving the run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-run-") as workdir,
        running_devnet(Path(workdir)) as devnet,
        running_daemon(
            devnet.env(), Path(workdir) / "serve.log", "--cache", f"sqlite://{workdir}/cache.db"
        ) as daemon,
    ):
        print(f"test network up in {devnet.startup_seconds}s; atwhois serve at {daemon.url}")
        print(f"(cache: {workdir}/cache.db, log: {workdir}/serve.log)\n")
        for what, path in DEMO:
            response = httpx.get(daemon.url + path, timeout=30)
            print(f"# {what}\n$ curl '{daemon.url}{path}'")
            print(f"{response.status_code} {response.text}\n")
        print("$ atwhois conflict.test   # the same resolver, as a command")
        atwhois = str(Path(sys.executable).with_name("atwhois"))
        subprocess.run([atwhois, "conflict.test"], env={**os.environ, **devnet.env()}, check=False)
        if sys.stdin.isatty():
            print(
                f"\nserving at {daemon.url} until Ctrl-C: open {daemon.url}/id/alice.test in "
                f"a browser on this machine (or /v1/identity/alice.test, /metrics, /openapi.json)"
            )
            try:
                while daemon.process.poll() is None:
                    time.sleep(1)
            except KeyboardInterrupt:
                pass


if __name__ == "__main__":
    main()
