"""A stand-in for the PLC directory in a process of its own: it passes every request on to
the real directory, notes when each arrived (CLOCK_MONOTONIC, which every process on the
machine reads alike) and with which User-Agent, and answers the next N with 429 and
Retry-After: 3 when told. Its own process, because a clock read on a thread beside the
code under test reads arrivals in bunches whenever the interpreter is busy elsewhere.

    python -m tests.support.counting_directory UPSTREAM   # prints "listening PORT"

Control, not counted: GET /_standin/arrivals (times and agents), POST /_standin/refuse?count=N.
"""

from __future__ import annotations

import asyncio
import sys
import time

import aiohttp
from aiohttp import web

CONTROL = "/_standin/"


class CountingDirectory:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.times: list[float] = []
        self.agents: list[str] = []
        self.refuse = 0

    async def handle(self, request: web.Request) -> web.Response:
        if request.path.startswith(CONTROL):
            return self.control(request)
        self.times.append(time.monotonic())
        self.agents.append(request.headers.get("User-Agent", ""))
        if self.refuse:
            self.refuse -= 1
            return web.json_response(
                {"message": "slow down"}, status=429, headers={"Retry-After": "3"}
            )
        session: aiohttp.ClientSession = request.app["session"]
        async with session.get(self.upstream + request.path_qs) as answer:
            body = await answer.read()
            kind = answer.headers.get("content-type", "application/json").split(";")[0]
        return web.Response(body=body, status=answer.status, content_type=kind)

    def control(self, request: web.Request) -> web.Response:
        if request.path == CONTROL + "arrivals":
            return web.json_response({"times": self.times, "agents": self.agents})
        if request.path == CONTROL + "refuse" and request.method == "POST":
            self.refuse = int(request.query["count"])
            return web.json_response({"refuse": self.refuse})
        return web.json_response({"message": "not found"}, status=404)


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
