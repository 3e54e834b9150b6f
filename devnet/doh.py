"""DNS over HTTPS on the test network: dnsdist (PowerDNS's DNS front end, from Debian)
answering RFC 8484 queries on a loopback port with a certificate of the test CA, and
forwarding them to the DNS proxy in front of Knot (so the proxy's faults and latency apply to
DoH too).
"""

from __future__ import annotations

import time
from pathlib import Path

import dns.message
import dns.rcode
import httpx
import trustme

from .pds import free_port
from .process import Child

LOOPBACK = "127.0.0.1"
PATH = "/dns-query"


def start_doh(
    workdir: Path, ca: trustme.CA, ca_file: Path, upstream_port: int
) -> tuple[Child, str]:
    """dnsdist serving DoH at the returned URL (HTTP/1.1 and HTTP/2), once it answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    leaf = ca.issue_cert(LOOPBACK)
    cert, key = workdir / "doh-cert.pem", workdir / "doh-key.pem"
    for index, pem in enumerate(leaf.cert_chain_pems):
        with cert.open("wb" if index == 0 else "ab") as out:
            out.write(pem.bytes())
    leaf.private_key_pem.write_to_path(str(key))
    port = free_port()
    config = workdir / "dnsdist.conf"
    config.write_text(
        "\n".join(
            [
                # its plain listener on a port of its own: never 53
                f'setLocal("{LOOPBACK}:{free_port()}")',
                f'newServer({{address="{LOOPBACK}:{upstream_port}", checkName="ns.test."}})',
                f'addDOHLocal("{LOOPBACK}:{port}", "{cert}", "{key}", "{PATH}")',
                'setSecurityPollSuffix("")',  # no queries to the internet about its version
            ]
        )
        + "\n"
    )
    child = Child.start(
        ["dnsdist", "--supervised", "--disable-syslog", "-C", str(config)],
        log=workdir / "dnsdist.log",
    )
    url = f"https://{LOOPBACK}:{port}{PATH}"
    _wait_until_answering(child, url, ca_file, workdir / "dnsdist.log")
    return child, url


def _wait_until_answering(child: Child, url: str, ca_file: Path, log: Path) -> None:
    query = dns.message.make_query("ns.test.", "A").to_wire()
    deadline = time.monotonic() + 20
    with httpx.Client(verify=str(ca_file), timeout=1.0) as client:
        while time.monotonic() < deadline:
            if child.process.poll() is not None:
                raise RuntimeError(f"dnsdist exited:\n{log.read_text(errors='replace')}")
            try:
                answer = client.post(
                    url, content=query, headers={"content-type": "application/dns-message"}
                )
                if answer.status_code == 200:
                    message = dns.message.from_wire(answer.content)
                    if message.rcode() == dns.rcode.NOERROR and message.answer:
                        return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    raise TimeoutError(f"dnsdist did not answer DoH:\n{log.read_text(errors='replace')}")
