"""Resolver configuration: one frozen value, built from arguments or from the environment."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import InvalidInput

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
DEFAULT_PLC_URL = "https://plc.directory"


@dataclass(frozen=True, slots=True)
class Nameserver:
    host: str
    port: int = 53

    @classmethod
    def parse(cls, text: str) -> Nameserver:
        """`HOST`, `HOST:PORT`, `[V6]:PORT`; HOST must be an IP address."""
        text = text.strip()
        host, port = text, "53"
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            port = rest.removeprefix(":") or "53"
        elif text.count(":") == 1:
            host, port = text.split(":")
        try:
            ipaddress.ip_address(host)
            number = int(port)
        except ValueError:
            raise InvalidInput(f"DNS server {text!r} is not IP[:PORT]", "config") from None
        if not 0 < number < 65536:
            raise InvalidInput(f"DNS server port {number} out of range", "config")
        return cls(host, number)


@dataclass(frozen=True, slots=True)
class Config:
    """Everything a `Resolver` needs to know; defaults are production-safe."""

    plc_url: str = DEFAULT_PLC_URL
    # Empty: the system's resolvers (/etc/resolv.conf). Fallbacks are asked, in order,
    # only when the ones before them fail (timeout, SERVFAIL, refused).
    dns_servers: tuple[Nameserver, ...] = ()
    dns_fallback_servers: tuple[Nameserver, ...] = ()
    ca_bundle: str | None = None  # None: the system's trust store
    # Addresses a fetch may reach although they are private/loopback/reserved (SSRF guard).
    allow_nets: tuple[IpNetwork, ...] = ()
    dev: bool = False  # .test handles, did:web:localhost, plain http for localhost
    https_port: int | None = None  # test-only: where ":443" really listens
    dns_timeout: float = 3.0
    https_timeout: float = 5.0  # handle well-known, whole fetch including redirects
    document_timeout: float = 5.0  # DID document, whole fetch
    verify_plc: bool = False  # replay the did:plc audit log instead of trusting the directory
    max_redirects: int = 5  # H-WK-6
    # Politeness: at most this many requests at once to one web host, to the PLC directory,
    # and to the DNS servers (None: no limit). Audits set it.
    per_host_limit: int | None = None
    document_max_bytes: int = 64 * 1024
    audit_log_max_bytes: int = 4 * 1024 * 1024
    user_agent: str = "atwhois/0.1 (+identity resolver)"
    extra_headers: tuple[tuple[str, str], ...] = field(default=())

    @property
    def allow_test_tld(self) -> bool:
        return self.dev  # H-TLD-2

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, /, **overrides: object) -> Config:
        """Read `ATWHOIS_*` variables; keyword overrides (from CLI flags) win."""
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        if env.get("ATWHOIS_PLC_URL"):
            values["plc_url"] = env["ATWHOIS_PLC_URL"]
        if env.get("ATWHOIS_DNS_SERVERS"):
            values["dns_servers"] = parse_nameservers(env["ATWHOIS_DNS_SERVERS"].split(","))
        if env.get("ATWHOIS_DNS_FALLBACK_SERVERS"):
            values["dns_fallback_servers"] = parse_nameservers(
                env["ATWHOIS_DNS_FALLBACK_SERVERS"].split(",")
            )
        if env.get("ATWHOIS_CA_BUNDLE"):
            values["ca_bundle"] = env["ATWHOIS_CA_BUNDLE"]
        if env.get("ATWHOIS_ALLOW_NETS"):
            values["allow_nets"] = parse_networks(env["ATWHOIS_ALLOW_NETS"].split(","))
        if env.get("ATWHOIS_DEV", "") not in ("", "0", "false", "no"):
            values["dev"] = True
        if env.get("ATWHOIS_VERIFY_PLC", "") not in ("", "0", "false", "no"):
            values["verify_plc"] = True
        if env.get("ATWHOIS_HTTPS_PORT"):
            values["https_port"] = int(env["ATWHOIS_HTTPS_PORT"])
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


def parse_nameservers(items: list[str]) -> tuple[Nameserver, ...]:
    return tuple(Nameserver.parse(item) for item in items if item.strip())


def parse_networks(items: list[str]) -> tuple[IpNetwork, ...]:
    try:
        return tuple(ipaddress.ip_network(item.strip()) for item in items if item.strip())
    except ValueError as err:
        raise InvalidInput(f"bad network in allow-list: {err}", "config") from None
