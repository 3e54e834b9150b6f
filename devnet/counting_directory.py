"""A stand-in for the PLC directory in a process of its own: it passes every request on to
the real directory, notes when each arrived (CLOCK_MONOTONIC, which every process on the
machine reads alike) and with which User-Agent, and answers the next N with 429 and a
Retry-After (3 unless told another text) when told. Its own process, because a clock read
on a thread beside the code under test reads arrivals in bunches whenever the interpreter
is busy elsewhere.

    python -m devnet.counting_directory UPSTREAM   # prints "listening PORT"

`PlcStandIn` starts one for a test or a benchmark and reads what it saw.

Control, not counted: GET /_standin/arrivals (times, agents and paths),
POST /_standin/refuse?count=N[&retry_after=TEXT].
"""

from __future__ import annotations

import asyncio
import bisect
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from aiohttp import web

CONTROL = "/_standin/"


class CountingDirectory:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.times: list[float] = []
        self.agents: list[str] = []
        self.paths: list[str] = []
        self.refuse = 0
        self.retry_after = "3"

    async def handle(self, request: web.Request) -> web.Response:
        if request.path.startswith(CONTROL):
            return self.control(request)
        self.times.append(time.monotonic())
        self.agents.append(request.headers.get("User-Agent", ""))
        self.paths.append(request.path)
        if self.refuse:
            self.refuse -= 1
            return web.json_response(
                {"message": "slow down"}, status=429, headers={"Retry-After": self.retry_after}
            )
        session: aiohttp.ClientSession = request.app["session"]
        async with session.get(self.upstream + request.path_qs) as answer:
            body = await answer.read()
            kind = answer.headers.get("content-type", "application/json").split(";")[0]
        return web.Response(body=body, status=answer.status, content_type=kind)

    def control(self, request: web.Request) -> web.Response:
        if request.path == CONTROL + "arrivals":
            return web.json_response(
                {"times": self.times, "agents": self.agents, "paths": self.paths}
            )
        if request.path == CONTROL + "refuse" and request.method == "POST":
            self.refuse = int(request.query["count"])
            self.retry_after = request.query.get("retry_after", "3")
            return web.json_response({"refuse": self.refuse})
        return web.json_response({"message": "not found"}, status=404)


class PlcStandIn:
    """The reference directory's answers, passed on by a process of its own that notes
    when each request arrived (`devnet.counting_directory`)."""

    def __init__(self, upstream: str, log: Path) -> None:
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "devnet.counting_directory", upstream],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 20
        while not log.read_text().startswith("listening "):
            assert self.process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{log.read_text().split()[1]}"

    def _arrivals(self) -> dict[str, list[Any]]:
        answer: dict[str, list[Any]] = httpx.get(self.url + "/_standin/arrivals").json()
        return answer

    @property
    def times(self) -> list[float]:
        """When each request arrived (time.monotonic, as this process reads it too)."""
        return [float(t) for t in self._arrivals()["times"]]

    @property
    def agents(self) -> set[str]:
        return set(self._arrivals()["agents"])

    @property
    def paths(self) -> list[str]:
        return [str(path) for path in self._arrivals()["paths"]]

    def refuse(self, count: int, retry_after: str = "3") -> None:
        """The next `count` requests are answered 429 with this Retry-After."""
        params = {"count": str(count), "retry_after": retry_after}
        httpx.post(self.url + "/_standin/refuse", params=params).raise_for_status()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def busiest_second(times: list[float]) -> int:
    """The most arrivals among `times` within any one second."""
    ordered = sorted(times)
    return max((bisect.bisect_left(ordered, t + 1.0) - i for i, t in enumerate(ordered)), default=0)


async def main(upstream: str) -> None:
    directory = CountingDirectory(upstream)
    app = web.Application()
    app["session"] = aiohttp.ClientSession()
    app.router.add_route("*", "/{tail:.*}", directory.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    print(f"listening {runner.addresses[0][1]}", flush=True)
    try:
        await asyncio.Event().wait()  # until the test stops the process
    finally:
        await app["session"].close()
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
