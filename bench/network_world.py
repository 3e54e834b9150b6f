"""The network-shaped world: a million identities (or any number) shaped as the network's
(`devnet.world.shaped_handle`): did:plc with handles under a few PDS domains, one far larger
than the others, whose host answers the well-known file of every handle under it; a
minority with a domain of their own and a DNS TXT record; a few did:web. Latency is added at
the edge, from 20 to 80 ms by default, fixed per name (servers near and far).

- The identities are made once and kept in the user's cache directory: their handles and
  DIDs, and the genesis operations of the did:plc ones, signed for real (K-256).
- The test network serves them: Knot the zone (a TXT record for each handle on a domain of
  its own), the TLS server each PDS domain's well-known files.
- The PLC directory is an atwhois mirror (`atwhois plc mirror`, the `directory` profile: it
  answers as plc.directory does), backfilled once from the operations, verifying each, and
  kept beside them; each run reads a copy of it.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from bench.plc_mirror import backfill, cache_file
from bench.serve_load import free_port, wait_for
from devnet.atwhois import ATWHOIS
from devnet.network import DevnetState, read_shaped, running_devnet
from devnet.synthetic_plc import network_world


class NetworkWorld(NamedTuple):
    devnet: DevnetState
    plc_url: str  # the mirror serving the world's did:plc documents
    dids: dict[str, str]  # each handle's DID

    def env(self) -> dict[str, str]:
        """atwhois's settings for this world."""
        return {**self.devnet.env(), "ATWHOIS_PLC_URL": self.plc_url}


def _made(identities: int) -> tuple[Path, Path]:
    """The world's handles (a line each: handle, tab, DID) and its export (JSON Lines),
    made once."""
    handles = cache_file(f"network-{identities}-handles.tsv")
    export = cache_file(f"network-{identities}-export.jsonl")
    if handles.exists() and export.exists():
        return handles, export
    started = time.perf_counter()
    partial = handles.with_suffix(".partial"), export.with_suffix(".partial")
    with partial[0].open("w") as names, partial[1].open("w") as lines:
        for handle, did, line in network_world(identities):
            names.write(f"{handle}\t{did}\n")
            if line is not None:
                lines.write(line + "\n")
    partial[1].rename(export)
    partial[0].rename(handles)
    print(f"  (made the {identities:,} identities in {time.perf_counter() - started:.0f} s)")
    return handles, export


def _mirrored(identities: int, export: Path) -> Path:
    """The mirror's SQLite file, backfilled once from `export` (every operation verified)."""
    database = cache_file(f"network-{identities}-mirror.db")
    if database.exists():
        return database
    partial = database.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    port = free_port()
    upstream = subprocess.Popen([sys.executable, "-m", "bench.plc_mirror", str(export), str(port)])
    try:
        wait_for(f"http://127.0.0.1:{port}/export?count=1")
        run = backfill(f"http://127.0.0.1:{port}", str(partial), None)
    finally:
        upstream.terminate()
        upstream.wait()
    if run["refused"]:
        raise RuntimeError(f"the mirror refused {run['refused']:.0f} of the world's operations")
    with contextlib.closing(sqlite3.connect(partial)) as db:  # one file: the log written in
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    partial.rename(database)
    print(f"  (mirrored {run['ops']:,.0f} operations in {run['seconds']:.0f} s)")
    return database


@contextlib.contextmanager
def running_network_world(
    workdir: Path, identities: int, *, delay_ms: float = 20, spread_ms: float = 60
) -> Iterator[NetworkWorld]:
    handles, export = _made(identities)
    workdir.mkdir(parents=True, exist_ok=True)
    database = workdir / "plc-mirror.db"
    shutil.copyfile(_mirrored(identities, export), database)
    port = free_port()
    serve = ["--plc-db", str(database), "--listen", f"127.0.0.1:{port}"]
    # Nothing more to follow: the world stays as it was made.
    idle = ["--plc-url", "http://127.0.0.1:9", "--plc-mirror-interval", "3600"]
    with (workdir / "plc-mirror.log").open("wb") as log:
        mirror = subprocess.Popen(
            [ATWHOIS, "plc", "mirror", *serve, *idle, "--plc-mirror-workers", "0"], stderr=log
        )
        try:
            with running_devnet(
                workdir, delay_ms=delay_ms, spread_ms=spread_ms, shaped=handles
            ) as devnet:
                plc_url = f"http://127.0.0.1:{port}"
                wait_for(f"{plc_url}/_health")
                yield NetworkWorld(devnet, plc_url, read_shaped(handles))
        finally:
            mirror.terminate()
            mirror.wait()
