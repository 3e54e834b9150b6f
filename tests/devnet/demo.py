"""`make run`: bring up the test network and ask `atwhois` about a few of its identities.

Until the daemon exists (the HTTP cache service), this is the main job: real resolution,
real verification, real servers, on loopback only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .network import running_devnet

SHOWCASE = [
    ["alice.test"],  # verified by DNS and HTTPS
    ["conflict.test"],  # DNS and HTTPS disagree: DNS wins, the conflict is reported
    ["bob-old.test"],  # an old handle still in DNS: the document says otherwise
    ["erin.test"],  # a tombstoned DID
    ["did:web:web.test", "--json"],  # DID first, as the JSON contract
]


def main() -> None:
    atwhois = str(Path(sys.executable).with_name("atwhois"))
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-run-") as workdir,
        running_devnet(Path(workdir)) as devnet,
    ):
        env = {**os.environ, **devnet.env()}
        print(f"test network up in {devnet.startup_seconds}s; configuration:")
        print("  " + " ".join(f"{k}={v}" for k, v in devnet.env().items()) + "\n")
        for args in SHOWCASE:
            print(f"$ atwhois {' '.join(args)}", flush=True)
            code = subprocess.run([atwhois, *args], env=env, check=False).returncode
            print(f"(exit {code})\n", flush=True)


if __name__ == "__main__":
    main()
