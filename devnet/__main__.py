"""`python -m devnet [--state FILE] [--workdir DIR] [--delay-ms N]`: run the test network."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from .network import run


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m devnet", description=__doc__)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--state", type=Path, default=None, help="where to write the address book")
    parser.add_argument(
        "--delay-ms",
        type=float,
        default=0.0,
        help="latency added to every DNS answer and HTTPS response",
    )
    parser.add_argument(
        "--bulk",
        type=int,
        default=0,
        help="add N did:web identities (u00000.bulk.test ...) for load tests",
    )
    parser.add_argument(
        "--delay-spread-ms",
        type=float,
        default=0.0,
        help="up to this much more latency, fixed per name (servers near and far)",
    )
    parser.add_argument(
        "--shaped",
        type=Path,
        default=None,
        help="the network-shaped world's handles and DIDs (`bench.network_world`)",
    )
    args = parser.parse_args()
    # SIGTERM before the network is up (it handles signals itself once it is) unwinds too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="atwhois-devnet-"))
    state = args.state or workdir / "state.json"
    try:
        delay, spread = args.delay_ms / 1000, args.delay_spread_ms / 1000
        asyncio.run(run(workdir, state, delay, args.bulk, args.shaped, spread))
    finally:
        if args.workdir is None:  # a folder of our own making: nothing of it outlives us
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
