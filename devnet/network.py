"""Start the whole test network, write its address book, stop everything on SIGTERM.

Run as `python -m devnet` (what `make devnet` and the pytest session fixture do).
Every server binds 127.0.0.1; every child process is stopped by the PID it recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from atwhois.resolver import Config

from . import dnssec, forging_resolver, world
from .dns import DnsProxy, Knot, reload_zone, render_zone
from .doh import start_doh
from .faults import write_faults
from .https import Certificates, HttpsHosts
from .pds import create_account, free_port, launch_pds, wait_for_pds
from .plc import plc_schema, remove_operation, seed_world, start_plc
from .process import Child
from .unbound import start_caching_resolver

AGENTS_LOG = "https-agents.log"  # the HTTPS hosts' log of who asked (`HttpsHosts.agents`)


@dataclass(frozen=True)
class DevnetState:
    """The address book the tests read: where each server is and who lives there."""

    plc_url: str
    dns_server: str  # host:port of the proxy in front of Knot
    dns_server_stripping: str  # another proxy, which strips DNSSEC records (`devnet.dnssec`)
    dns_server_forging: str  # the forging resolver (`devnet.forger`), set by `set_forgeries`
    dns_server_caching: str  # a caching recursive resolver in front of the proxy (`devnet.unbound`)
    dnssec_anchor: str  # the DS record of dnssec.test., the test network's trust anchor
    dnssec_hostile_anchors: list[str]  # the DS records of the KeyTrap zones (`devnet.dnssec`)
    doh_url: str  # DNS over HTTPS (dnsdist) in front of the same proxy (`devnet.doh`)
    knot_port: int
    https_port: int
    ca_file: str
    www_root: str
    workdir: str
    dids: dict[str, str]
    pds_url: str  # the reference PDS, plain http on loopback
    live: dict[str, str]  # its accounts: handle -> DID
    pids: dict[str, int]
    startup_seconds: float

    @classmethod
    def load(cls, path: Path) -> DevnetState:
        return cls(**json.loads(path.read_text()))

    def did(self, name: str) -> str:
        return self.dids[name]

    # --- changing the world between two audits ----------------------------------------

    def set_txt(self, handle: str, values: list[str]) -> None:
        """Replace the `_atproto` TXT records of `handle` and have Knot load the zone now."""
        self.set_txts({handle: values})

    def set_txts(self, records: dict[str, list[str]]) -> None:
        """`set_txt` for several handles, in one zone reload. A handle under bulk.test also
        gets an A record of its own (its `_atproto` node would otherwise hide it from the
        zone's wildcard)."""
        knot = Path(self.workdir) / "knot"
        zone_file = knot / "test.zone"
        owners = {f"_atproto.{handle}." for handle in records}
        hosts = {f"{handle}." for handle in records if handle.endswith(world.BULK_SUFFIX)}
        lines = [
            ln
            for ln in zone_file.read_text().splitlines()
            if ln.split(" ", 1)[0] not in owners | hosts
        ]
        for handle, values in records.items():
            lines += [f'_atproto.{handle}. TXT "{value}"' for value in values]
        lines += [f"{host} A 127.0.0.1" for host in sorted(hosts)]
        text = "\n".join(lines) + "\n"
        serial = int(re.search(r"hostmaster\.test\. (\d+)", text).group(1))  # type: ignore[union-attr]
        text = text.replace(f"hostmaster.test. {serial} ", f"hostmaster.test. {serial + 1} ", 1)
        zone_file.write_text(text)
        reload_zone(knot, "test.")

    def set_delegation(self, child: str, mode: str) -> None:
        """The DS record of a signed zone of the island in its parent: "signed", "unsigned"
        (removed), "spoiled" (naming no key); Knot signs the parent again at once."""
        knot = Path(self.workdir) / "knot"
        dnssec.set_delegation(knot, self.knot_port, self.dids, child, mode)

    def set_file(self, host: str, path: str, body: str | bytes | None) -> None:
        """Change (or, with None, remove) what an HTTPS host serves at `path` (for any
        query: a host's XRPC method answers the same whatever it is asked)."""
        file = Path(self.www_root) / host / path.lstrip("/")
        if body is None:
            file.unlink(missing_ok=True)
            return
        file.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            file.write_bytes(body)
        else:
            file.write_text(body)

    def set_dns_faults(self, faults: dict[str, str]) -> None:
        """Names the DNS proxy answers with SERVFAIL ("servfail") or never ("never");
        `"*"` stands for every other name."""
        write_faults(Path(self.workdir) / "dns-faults.json", faults)

    def set_forgeries(self, forgeries: dict[str, list[dict[str, Any]]]) -> None:
        """What the forging resolver does to Knot's answers: `{"NAME QTYPE": [step, ...]}`
        (`devnet.forger`); an empty dict makes it an honest resolver again."""
        write_faults(Path(self.workdir) / "dns-forgeries.json", forgeries)

    def set_https_faults(self, faults: dict[str, Any]) -> None:
        """Hosts the TLS server mistreats: "503", "html" (a 200 page), "reset", "hang", or
        an answer written out, `{"status": 429, "headers": {"Retry-After": "3"}, "body":
        ""}` (a redirect: 302 and its Location); `"*"` stands for every other host."""
        write_faults(Path(self.workdir) / "https-faults.json", faults)

    def submit(self, name: str, op: str, **fields: str) -> None:
        """Sign an operation with the world's key for `name` and submit it to the directory:
        `op` is "handle" (fields: handle) or "tombstone"."""
        from . import plc

        plc.update(self.plc_url, self.did(name), name, op, fields)

    def remove_plc_op(self, did: str, cid: str) -> None:
        """Delete one operation from the reference directory's own database, as
        plc.directory's admin endpoint removes invalid ones: the directory serves the DID
        without it from then on."""
        remove_operation(plc_schema(self.pids["devnet"]), did, cid)

    def config(self, **changes: Any) -> Config:
        """A resolver configuration pointed at this network (never at /etc/hosts)."""
        quick = {"dns_timeout": 1.0, "https_timeout": 2.0, "document_timeout": 2.0}
        configured = Config.from_environment(self.env())
        return dataclasses.replace(configured, **{**quick, **changes})

    def exports(self) -> str:
        """Shell lines that point `atwhois` (this checkout's, first on PATH) at the network:
        what `make devnet` and `make run` print, to be pasted or evaluated."""
        venv_bin = Path(sys.executable).parent
        pairs = [*self.env().items(), ("PATH", f"{venv_bin}:$PATH")]
        return "\n".join(
            f"export {name}={value if name == 'PATH' else shlex.quote(value)}"
            for name, value in pairs
        )

    def env(self) -> dict[str, str]:
        """The same configuration as `ATWHOIS_*` environment variables."""
        return {
            "ATWHOIS_DEV": "1",
            "ATWHOIS_PLC_URL": self.plc_url,
            "ATWHOIS_DNS_SERVER": self.dns_server,
            "ATWHOIS_CA_BUNDLE": self.ca_file,
            "ATWHOIS_ALLOW_NET": "127.0.0.0/8",
            "ATWHOIS_HTTPS_PORT": str(self.https_port),
            # the zones' nameservers (ns.test. is 127.0.0.1) answer at the proxy's port
            "ATWHOIS_DNS_AUTHORITATIVE_PORT": self.dns_server.rsplit(":", 1)[1],
            "ATWHOIS_DNSSEC_ANCHOR": self.dnssec_anchor,
            # The network is ours, on loopback: the tests and benchmarks load it past what
            # a stranger's host may be asked (the politeness tests set their own rates).
            "ATWHOIS_PLC_RATE": "100000",
            "ATWHOIS_HOST_RATE": "100000",
        }


@contextlib.contextmanager
def running_devnet(
    workdir: Path,
    *,
    delay_ms: float = 0,
    bulk: int = 0,
    shaped: Path | None = None,
    spread_ms: float = 0,
) -> Iterator[DevnetState]:
    """Run `python -m devnet` in its own session while the block runs; stop it by the
    PID it recorded (and its process group, if it does not stop in time)."""
    extra = ["--shaped", str(shaped)] if shaped is not None else []
    state_file = workdir / "state.json"
    with (workdir / "devnet.log").open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "devnet",
                "--workdir",
                str(workdir),
                "--state",
                str(state_file),
                "--delay-ms",
                str(delay_ms),
                "--bulk",
                str(bulk),
                "--delay-spread-ms",
                str(spread_ms),
                *extra,
            ],
            cwd=Path(__file__).resolve().parents[1],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + (300 if shaped else 90)  # a zone of 100,000s of names
            while not state_file.exists():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"test network did not start:\n{(workdir / 'devnet.log').read_text()}"
                    )
                time.sleep(0.05)
            yield DevnetState.load(state_file)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            # Its children share its process group: any it could not stop go now.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)


def fill_placeholders(text: str, dids: dict[str, str]) -> str:
    """Replace `{did:NAME}` and `{doc:HOST}` with a seeded DID or a did:web document."""

    def replace(match: re.Match[str]) -> str:
        kind, name = match.group(1), match.group(2)
        if kind == "doc":
            return json.dumps(world.did_web_document(name), indent=1)
        return world.NEVER_REGISTERED_DID if name == "never" else dids[name]

    return re.sub(r"\{(did|doc):([a-z0-9.-]+)\}", replace, text)


def write_files(root: Path, dids: dict[str, str]) -> None:
    for (host, path), body in world.STATIC_FILES.items():
        file = root / host / path.lstrip("/")
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(fill_placeholders(body, dids))


def read_shaped(path: Path) -> dict[str, str]:
    """The network-shaped world's handles and DIDs (`bench.network_world`: a line each,
    tab-separated)."""
    with path.open() as lines:
        return dict(line.rstrip("\n").split("\t", 1) for line in lines)


async def run(
    workdir: Path,
    state_file: Path,
    delay: float,
    bulk: int = 0,
    shaped: Path | None = None,
    spread: float = 0.0,
) -> None:
    started = time.monotonic()
    handles = read_shaped(shaped) if shaped is not None else None
    workdir.mkdir(parents=True, exist_ok=True)
    children: list[Child] = []
    proxy: DnsProxy | None = None
    stripping: DnsProxy | None = None
    hosts: HttpsHosts | None = None
    try:
        plc, plc_port = start_plc(0, plc_schema(os.getpid()), workdir / "plc.log")
        children.append(plc)
        plc_url = f"http://127.0.0.1:{plc_port}"
        pds_port = free_port()
        pds = launch_pds(plc_url, workdir, pds_port)  # it starts while the rest is set up
        children.append(pds)
        dids = seed_world(plc_url)

        knot = Knot(
            workdir / "knot",
            _free_udp_and_tcp_port(),
            policies=dnssec.KNOT_POLICIES,
            zones=dnssec.knot_zones(),
        )
        zone = render_zone(lambda v: fill_placeholders(v, dids), bulk=bulk, shaped=handles)
        zone += dnssec.DELEGATION
        (workdir / "knot").mkdir(parents=True, exist_ok=True)
        hostile_anchors = dnssec.write_zones(workdir / "knot", dids)
        knotd = knot.start(zone)
        children.append(knotd)
        anchor = dnssec.link_delegations(workdir / "knot", knot.port, dids)
        proxy = DnsProxy(knot.port, delay=delay, faults=workdir / "dns-faults.json", spread=spread)
        dns_port = await proxy.start()
        stripping = DnsProxy(knot.port, strip_dnssec=True)
        stripping_port = await stripping.start()
        forging, forging_port = forging_resolver.start(
            knot.port, workdir / "dns-forgeries.json", workdir / "forger.log"
        )
        children.append(forging)
        caching_port = _free_udp_and_tcp_port()
        # in a thread: it is ready once it answers through the proxy, which runs on this loop
        caching = await asyncio.to_thread(
            start_caching_resolver, workdir / "unbound", caching_port, dns_port
        )
        children.append(caching)

        write_files(workdir / "www", dids)
        certificates = Certificates(workdir / "tls")
        # in a thread: its first answers come through the proxy, which runs on this loop
        doh, doh_url = await asyncio.to_thread(
            start_doh, workdir / "doh", certificates.ca, certificates.ca_file, dns_port
        )
        children.append(doh)
        hosts = HttpsHosts(
            workdir / "www",
            certificates,
            delay=delay,
            faults=workdir / "https-faults.json",
            live_port=pds_port,
            shaped=handles,
            spread=spread,
            agents=workdir / AGENTS_LOG,
        )
        https_port = await hosts.start()
        wait_for_pds(pds, workdir)
        pds_url = f"http://127.0.0.1:{pds_port}"
        live = {
            name + world.LIVE_HANDLE_SUFFIX: create_account(pds_url, name)
            for name in world.LIVE_ACCOUNTS
        }

        state = DevnetState(
            plc_url=plc_url,
            dns_server=f"127.0.0.1:{dns_port}",
            dns_server_stripping=f"127.0.0.1:{stripping_port}",
            dns_server_forging=f"127.0.0.1:{forging_port}",
            dns_server_caching=f"127.0.0.1:{caching_port}",
            dnssec_anchor=anchor,
            dnssec_hostile_anchors=hostile_anchors,
            doh_url=doh_url,
            knot_port=knot.port,
            https_port=https_port,
            ca_file=str(workdir / "tls" / "ca.pem"),
            www_root=str(workdir / "www"),
            workdir=str(workdir),
            dids=dids,
            pds_url=pds_url,
            live=live,
            pids={
                "devnet": os.getpid(),
                "plc": plc.pid,
                "pds": pds.pid,
                "knotd": knotd.pid,
                "dnsdist": doh.pid,
                "unbound": caching.pid,
            },
            startup_seconds=round(time.monotonic() - started, 2),
        )
        tmp = state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2))
        tmp.rename(state_file)
        print(_banner(state), flush=True)
        await _wait_for_signal()
    finally:
        for dns_proxy in (proxy, stripping):
            if dns_proxy:
                dns_proxy.close()
        if hosts:
            hosts.close()
        for child in reversed(children):
            child.stop()


def _free_udp_and_tcp_port() -> int:
    import socket

    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port = int(udp.getsockname()[1])
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
                try:
                    tcp.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port")


async def _wait_for_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def _banner(state: DevnetState) -> str:
    return f"""atwhois test network is up in {state.startup_seconds}s (Ctrl-C stops it)
  PLC directory  {state.plc_url}
  DNS (test.)    {state.dns_server}   (Knot on 127.0.0.1:{state.knot_port})
  caching DNS    {state.dns_server_caching}   (unbound, keeps answers an hour)
  HTTPS hosts    127.0.0.1:{state.https_port}   CA {state.ca_file}

Point atwhois at it (paste these lines into a shell):
{textwrap.indent(state.exports(), "  ")}
  atwhois alice.test"""
