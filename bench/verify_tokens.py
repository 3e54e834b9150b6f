"""Inter-service auth tokens verified (issue 58), each figure against its baseline in the
same run:

- in process, the issuer cached: `atwhois.auth.ServiceAuthVerifier` over a `CachedResolver`
  against the Python SDK's own `verify_jwt` holding the issuer's key already (what a Python
  service runs instead): tokens/s; target at least 1.0x the SDK;
- through the daemon (`POST /v1/verify/service-auth`), closed loop (wrk, one thread):
  tokens/s against a bare aiohttp handler answering the same bytes to the same POST;
- at a fixed rate (open loop, 2,000 req/s by default): p99 against the bare handler.

The issuer is a did:plc on the test network's PLC directory whose K-256 key the bench
holds; every token is distinct (its own jti), signed low-S as a PDS signs.

    python -m bench verify [--seconds 5] [--rate 2000] [--tokens 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import httpx

from atwhois.auth import Expected, ServiceAuthVerifier
from atwhois.cache import CachedResolver
from atwhois.cache.stores import MemoryStore
from atwhois.resolver import Resolver
from atwhois.resolver.service_auth import mint
from bench import Row
from bench.serve_load import free_port, open_loop, require_wrk, wait_for, wrk
from devnet.atwhois import running_daemon
from devnet.network import running_devnet
from devnet.plc_ops import PlcAccount

AUDIENCE = "did:web:feed.example#bsky_fg"
PATH = "/v1/verify/service-auth"
BARE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from aiohttp import web
    ready = Path(sys.argv[2])
    while not ready.exists() or not ready.stat().st_size:
        time.sleep(0.05)
    answer = ready.read_bytes()
    async def verify(request):
        await request.read()
        return web.Response(body=answer, content_type="application/json")
    app = web.Application()
    app.router.add_post("/v1/verify/service-auth", verify)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
""")
# Each request a token drawn from the file at random (both servers run the same script).
POST_ROTATING = """
bodies = {}
for line in io.lines("%s") do bodies[#bodies + 1] = line end
local headers = {["Content-Type"] = "application/json"}
request = function()
  return wrk.format("POST", nil, headers, bodies[math.random(#bodies)])
end
"""


def tokens(account: PlcAccount, count: int) -> list[str]:
    now = int(time.time())
    made = []
    for _ in range(count):
        claims = {"iss": account.did, "aud": AUDIENCE, "iat": now, "exp": now + 3000}
        made.append(mint(account.key.private, {**claims, "jti": uuid.uuid4().hex}))
    return made


async def ours_in_process(config: object, made: list[str], seconds: float) -> float:
    expected = Expected(AUDIENCE)
    async with CachedResolver(Resolver(config), MemoryStore()) as cached:  # type: ignore[arg-type]
        verifier = ServiceAuthVerifier(cached)
        first = await verifier.verify(made[0], expected)
        assert first.valid, first  # the issuer resolved once, and cached
        done, end = 0, time.perf_counter() + seconds
        started = time.perf_counter()
        while time.perf_counter() < end:
            for token in made:
                verification = await verifier.verify(token, expected)
                if not verification.valid:
                    raise RuntimeError(f"not valid: {verification}")
            done += len(made)
        return done / (time.perf_counter() - started)


def sdk_in_process(did_key: str, made: list[str], seconds: float) -> float:
    from atproto_server.auth.jwt import verify_jwt

    def key(_: str, __: bool) -> str:
        return did_key  # held already: what a service's own key cache gives it

    done, end = 0, time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < end:
        for token in made:
            verify_jwt(token, key, own_did=AUDIENCE)
        done += len(made)
    return done / (time.perf_counter() - started)


def _all_valid(metrics: str) -> None:
    """The daemon's verifications by outcome: any but `valid` makes the figures wrong."""
    family = r"^atwhois_service_auth_verifications_total"
    found = re.findall(family + r'\{outcome="(\w+)",rule="[^"]*"\} (\S+)', metrics, re.M)
    wrong = {
        outcome: float(count) for outcome, count in found if outcome != "valid" and float(count)
    }
    if wrong or not found:
        raise RuntimeError(f"the daemon did not find every token valid: {wrong or 'no tally'}")


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench verify", description=__doc__)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rate", type=int, default=2000, help="open loop: requests/s")
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=50)
    args = parser.parse_args(argv)
    require_wrk()
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-verify-bench-") as name,
        running_devnet(Path(name), bulk=0) as devnet,
    ):
        tmp = Path(name)
        account = PlcAccount(devnet.plc_url, None)
        made = tokens(account, args.tokens)
        sdk = sdk_in_process(account.key.did_key, made, args.seconds)
        ours = asyncio.run(ours_in_process(devnet.config(), made, args.seconds))
        print(f"in process, issuer cached, {args.tokens:,} distinct tokens, {args.seconds} s:")
        print(f"  atwhois {ours:9,.0f} tokens/s   SDK verify_jwt {sdk:9,.0f} tokens/s   "
              f"ratio {ours / sdk:.2f}")  # fmt: skip
        bodies = [json.dumps({"token": token, "audience": AUDIENCE}) for token in made]
        body = bodies[0]
        (tmp / "bodies.txt").write_text("".join(b + "\n" for b in bodies))
        script = tmp / "post.lua"
        script.write_text(POST_ROTATING % (tmp / "bodies.txt"))
        listing = tmp / "posts.txt"
        listing.write_text("".join(f"POST {PATH} {b}\n" for b in bodies))
        with running_daemon(devnet.env(), tmp / "serve.log", "--cache", "memory:") as daemon:
            answer = httpx.post(daemon.url + PATH, content=body, timeout=30)
            assert answer.json()["outcome"] == "valid", answer.text
            ready, port = tmp / "answer", free_port()
            bare = subprocess.Popen([sys.executable, "-c", BARE, str(port), str(ready)])
            try:
                ready.write_bytes(answer.content)
                bare_url = f"http://127.0.0.1:{port}"
                wait_for(bare_url + "/")
                c, s = args.connections, args.seconds
                closed = (wrk(bare_url + PATH, c, s, script), wrk(daemon.url + PATH, c, s, script))
                fixed = (
                    open_loop(bare_url, listing, args.rate, s),
                    open_loop(daemon.url, listing, args.rate, s),
                )
                # every answer counted was a verdict of valid: the daemon's own tally
                _all_valid(httpx.get(daemon.url + "/metrics", timeout=30).text)
            finally:
                bare.terminate()
                bare.wait()
    (bare_closed, ours_closed), (bare_fixed, ours_fixed) = closed, fixed
    print(f"through the daemon (POST {PATH}), wrk 1 thread, {c} connections, {s} s:")
    print(f"  atwhois {ours_closed[0]:9,.0f} req/s   bare handler {bare_closed[0]:9,.0f} req/s   "
          f"ratio {ours_closed[0] / bare_closed[0]:.2f}")  # fmt: skip
    print(f" open loop, {args.rate:,} requests/s for {s} s, every token distinct:")
    print(f"  atwhois p50 {ours_fixed['p50_ms']:6.2f} ms  p99 {ours_fixed['p99_ms']:7.2f} ms   "
          f"bare p50 {bare_fixed['p50_ms']:6.2f} ms  p99 {bare_fixed['p99_ms']:7.2f} ms   "
          f"p99 ratio {ours_fixed['p99_ms'] / bare_fixed['p99_ms']:.2f}")  # fmt: skip
    bare_name = "bare aiohttp handler"
    return [
        Row("verify: tokens/s in process, issuer cached", ours, sdk, "SDK verify_jwt", "tok/s"),
        Row("verify: tokens/s through the daemon", ours_closed[0], bare_closed[0], bare_name,
            "req/s"),
        Row(f"verify: p99 at {args.rate:,} req/s (open loop)", ours_fixed["p99_ms"],
            bare_fixed["p99_ms"], bare_name, "ms", True),
    ]  # fmt: skip
