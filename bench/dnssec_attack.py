"""The daemon with `--dnssec` under hostile zones (issue 54): attackers look up, one after
the other and each under a new name, handles of the KeyTrap zones (1,300 keys of one tag and
600 RRSIGs with that tag, answers of 62 KB; 300 keys and 140 RRSIGs, answers that fit what
atwhois reads) and handles whose wildcard proof the forging resolver floods with NSEC3
records of 65,535 iterations (850: 63 KB; 100: 7 KB), in turn. Meanwhile a client asks
`/_health` every 20 ms, and honest handles of the signed island are looked up under new names
(each a cold lookup: its DNSSEC check included). Both are measured again in the same run
with no attack: the ratios are `/_health`'s p99 and the honest lookups' p50/p99 under attack
against without, and the daemon's CPU per hostile lookup against its CPU per honest one.

    python -m bench dnssec [--seconds 20] [--attackers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench import Row
from bench.follow_load import cpu_seconds
from devnet import dnssec as island
from devnet.atwhois import Daemon, running_daemon
from devnet.network import DevnetState, running_devnet

WILDCARD = island.WILDCARD.rstrip(".")  # w.nsec3.dnssec.test: names made from `*.w`
FLOODED = {"f." + WILDCARD: 850, "g." + WILDCARD: 100}  # the forger floods their proofs
HOSTILE = ("keytrap", "kt", *FLOODED)  # each attacker's lookups go round these


def _p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


async def _phase(daemon: Daemon, seconds: float, attackers: int, tag: str) -> dict[str, object]:
    """`seconds` of /_health polls and honest cold lookups, with `attackers` hostile loops."""
    health: list[float] = []
    honest: list[float] = []
    hostile = [0]
    end = time.monotonic() + seconds

    async def poll(client: httpx.AsyncClient) -> None:
        while time.monotonic() < end:
            started = time.perf_counter()
            answer = await client.get("/_health")
            health.append((time.perf_counter() - started) * 1000)
            assert answer.status_code in (200, 503), answer.text
            await asyncio.sleep(0.02)

    async def look(client: httpx.AsyncClient) -> None:
        index = 0
        while time.monotonic() < end:
            index += 1
            started = time.perf_counter()
            answer = await client.get(f"/v1/identity/h{tag}{index}.{WILDCARD}")
            honest.append((time.perf_counter() - started) * 1000)
            state = answer.json()["evidence"]["dns"]["dnssec"]["state"]
            assert state == "secure", answer.text
            await asyncio.sleep(0.05)

    async def attack(client: httpx.AsyncClient, which: int) -> None:
        index = 0
        while time.monotonic() < end:
            index += 1
            name = f"h{tag}{which}x{index}.{HOSTILE[index % len(HOSTILE)]}"
            answer = await client.get(f"/v1/identity/{name}")
            assert answer.json()["status"] != "verified", answer.text
            hostile[0] += 1

    async with httpx.AsyncClient(base_url=daemon.url, timeout=60) as client:
        cpu_before = cpu_seconds(daemon.process.pid)
        await asyncio.gather(
            poll(client), look(client), *(attack(client, i) for i in range(attackers))
        )
        cpu = cpu_seconds(daemon.process.pid) - cpu_before
    return {"health": health, "honest": honest, "hostile": hostile[0], "cpu": cpu}


def _env(devnet: DevnetState) -> dict[str, str]:
    devnet.set_forgeries(
        {
            f"*.{suffix}. TXT": [
                {"nsec3": {"zone": island.NSEC3_ZONE, "count": count, "iterations": 65535}}
            ]
            for suffix, count in FLOODED.items()
        }
    )
    return {
        **devnet.env(),
        "ATWHOIS_DNS_SERVER": devnet.dns_server_forging,
        "ATWHOIS_DNSSEC_ANCHOR": ",".join([devnet.dnssec_anchor, *devnet.dnssec_hostile_anchors]),
    }


def main(argv: list[str]) -> list[Row]:
    parser = argparse.ArgumentParser(prog="python -m bench dnssec", description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--attackers", type=int, default=2)
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="atwhois-bench-") as workdir,
        running_devnet(Path(workdir)) as devnet,
        running_daemon(
            _env(devnet), Path(workdir) / "serve.log", "--cache", "memory:", "--dnssec"
        ) as daemon,
    ):
        asyncio.run(_phase(daemon, 3, 0, "w"))  # warm: the island's keys, connections
        quiet = asyncio.run(_phase(daemon, args.seconds, 0, "q"))
        loud = asyncio.run(_phase(daemon, args.seconds, args.attackers, "a"))
    health_q, health_a = quiet["health"], loud["health"]
    honest_q, honest_a = quiet["honest"], loud["honest"]
    assert isinstance(health_q, list) and isinstance(health_a, list)
    assert isinstance(honest_q, list) and isinstance(honest_a, list)
    hostile = int(loud["hostile"])  # type: ignore[call-overload]
    # the daemon's CPU under attack, less what the honest lookups and polls cost it
    # (measured per honest lookup in the quiet phase), per hostile lookup
    honest_cpu = float(quiet["cpu"]) / max(len(honest_q), 1)  # type: ignore[arg-type]
    attack_cpu = float(loud["cpu"]) - honest_cpu * len(honest_a)  # type: ignore[arg-type]
    hostile_cpu = attack_cpu / max(hostile, 1)
    print(
        f"{args.seconds:g} s each; {args.attackers} attacker(s): {hostile} hostile lookups "
        f"(KeyTrap zones and NSEC3 floods, in turn)\n"
        f"  /_health p50 {_p(health_q, 50):.1f} ms quiet, {_p(health_a, 50):.1f} ms under "
        f"attack; p99 {_p(health_q, 99):.1f} / {_p(health_a, 99):.1f} ms (target: < 100 ms)\n"
        f"  honest cold lookups: {len(honest_q)} quiet, {len(honest_a)} under attack; p50 "
        f"{_p(honest_q, 50):.1f} / {_p(honest_a, 50):.1f} ms, p99 {_p(honest_q, 99):.1f} / "
        f"{_p(honest_a, 99):.1f} ms\n"
        f"  daemon CPU per honest lookup {honest_cpu * 1000:.1f} ms, per hostile lookup "
        f"{hostile_cpu * 1000:.1f} ms"
    )
    return [
        Row("/_health p99 under a DNSSEC attack", _p(health_a, 99), _p(health_q, 99),
            "the same, no attack", "ms", True),
        Row("honest DNSSEC lookups p50 under attack", _p(honest_a, 50), _p(honest_q, 50),
            "the same, no attack", "ms", True),
        Row("honest DNSSEC lookups p99 under attack", _p(honest_a, 99), _p(honest_q, 99),
            "the same, no attack", "ms", True),
        Row("  CPU per hostile lookup (KeyTrap, NSEC3)", hostile_cpu * 1000, honest_cpu * 1000,
            "per honest lookup", "ms", True),
    ]  # fmt: skip
