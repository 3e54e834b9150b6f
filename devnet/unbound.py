"""A caching recursive resolver in front of the test network's DNS: Debian's unbound,
answering `test.` from the proxy (and so from Knot), and keeping every answer for an hour
whatever its TTL, as a resolver of an ISP that holds an old record after its owner fixed
it. A re-check after a change (H-DNS-9) must see past it; a plain lookup sees its cache.
"""

from __future__ import annotations

from pathlib import Path

from .dns import LOOPBACK, wait_for_dns
from .process import Child

HELD_SECONDS = 3600  # how long it keeps an answer, whatever the zone's TTL says


def _config(workdir: Path, port: int, upstream_port: int) -> str:
    return f"""server:
    interface: {LOOPBACK}@{port}
    port: {port}
    do-daemonize: no
    username: ""
    chroot: ""
    directory: "{workdir}"
    pidfile: "{workdir}/unbound.pid"
    use-syslog: no
    logfile: ""
    verbosity: 1
    num-threads: 1
    do-ip6: no
    so-reuseport: no
    access-control: 127.0.0.0/8 allow
    do-not-query-localhost: no
    module-config: "iterator"
    qname-minimisation: no
    cache-min-ttl: {HELD_SECONDS}
    local-zone: "test." nodefault
    domain-insecure: "test."
remote-control:
    control-enable: no
stub-zone:
    name: "test."
    stub-addr: {LOOPBACK}@{upstream_port}
"""


def start_caching_resolver(workdir: Path, port: int, upstream_port: int) -> Child:
    """unbound on `port` (UDP and TCP), recursing into `test.` at `upstream_port`, once it
    answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "unbound.conf"
    config.write_text(_config(workdir, port, upstream_port))
    log = workdir / "unbound.log"
    child = Child.start(["unbound", "-d", "-c", str(config)], log=log)
    wait_for_dns(child, port, log)
    return child
