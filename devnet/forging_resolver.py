"""The forging resolver in a process of its own (`python -m devnet.forging_resolver`): the
test network's DNS proxy in front of Knot, altering Knot's answers as the forgery file says
(`devnet.forger`, the rules of the alteration). A process apart because re-encoding a flood
costs it tens of milliseconds an answer, which must not hold up the other servers."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from .dns import DnsProxy
from .process import Child, wait_for_line


async def _serve(knot_port: int, forgeries: Path) -> None:
    proxy = DnsProxy(knot_port, forgeries=forgeries)
    print(f"forging on {await proxy.start()}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    proxy.close()


def start(knot_port: int, forgeries: Path, log: Path) -> tuple[Child, int]:
    """The forging resolver in a process of its own: re-encoding a flood costs it tens of
    milliseconds an answer, which must not hold up the test network's other servers."""
    child = Child.start(
        [sys.executable, "-m", "devnet.forging_resolver", str(knot_port), str(forgeries)], log=log
    )
    line = wait_for_line(child, log, "forging on ", timeout=20)
    return child, int(line.removeprefix("forging on "))


if __name__ == "__main__":
    asyncio.run(_serve(int(sys.argv[1]), Path(sys.argv[2])))
