"""Resolver configuration: one frozen value, checked when it is made. (Reading it from flags,
`ATWHOIS_*` variables and a TOML file is the command line's business: `cli.settings`.)"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from atwhois.foundation.version import USER_AGENT

from .errors import InvalidInput

# What a DID document and a did:plc's audit log may weigh, read from any directory (a
# document is a few KB; the longest real logs are a few hundred KB)
DOCUMENT_MAX_BYTES = 64 * 1024
AUDIT_LOG_MAX_BYTES = 4 * 1024 * 1024

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
DEFAULT_PLC_URL = "https://plc.directory"
_MAX_TIMEOUT = 3600.0
# What the DNSSEC walk keeps of the keys and delegations it proved, in all (S-SEC-11): a
# zone's keys are about 1 KiB, so some 16,000 zones.
DNSSEC_MEMORY_BYTES = 16 * 1024 * 1024
# The root zone's key-signing keys, KSK-2017 and KSK-2024 (IANA's root-anchors.xml): where
# DNSSEC validation starts on the real network (S-SEC-1).
ROOT_TRUST_ANCHORS = (
    ". DS 20326 8 2 E06D44B80B8F1D39A95C0B0D7C65D08458E880409BBC683457104237C7F8EC8D",
    ". DS 38696 8 2 683D2D0ACB8C9B712A1948B27F741219298D0A450D612C483AF444A4C0FB2B16",
)


@dataclass(frozen=True, slots=True)
class Nameserver:
    host: str
    port: int = 53
    url: str | None = None  # DNS over HTTPS (RFC 8484): the server's https URL

    def __str__(self) -> str:
        return self.url or f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> Nameserver:
        """`HOST`, `HOST:PORT`, `[V6]:PORT` (HOST an IP address), or a DoH server's URL,
        `https://HOST[:PORT]/PATH` (its HOST is resolved by the system's resolvers, or is an
        IP address)."""
        text = text.strip()
        if "://" in text:
            parts = urlsplit(text)
            try:
                https_port = parts.port or 443
            except ValueError:
                raise InvalidInput(f"DNS server {text!r}: bad port", "config") from None
            if parts.scheme != "https" or not parts.hostname or not parts.path:
                raise InvalidInput(
                    f"DNS server {text!r} is not a DNS-over-HTTPS URL (https://HOST/PATH)",
                    "config",
                )
            return cls(parts.hostname, https_port, text)
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
    # H-WK-9: an operator's own NAT64 prefixes, besides RFC 6052's and RFC 8215's
    nat64_prefixes: tuple[ipaddress.IPv6Network, ...] = ()
    dev: bool = False  # .test handles, did:web:localhost, plain http for localhost
    https_port: int | None = None  # test-only: where ":443" really listens
    # H-DNS-9: a re-check after a change (a refresh, a claim after an event, an audit's)
    # also asks the TXT of the zone's own nameservers, past the recursive resolver's cache.
    dns_authoritative: bool = True
    dns_authoritative_port: int = 53  # test networks: where the zones' nameservers listen
    dns_timeout: float = 3.0
    https_timeout: float = 5.0  # handle well-known, whole fetch including redirects
    document_timeout: float = 5.0  # DID document, whole fetch
    verify_plc: bool = False  # replay the did:plc audit log instead of trusting the directory
    check_pds: bool = False  # lookups and audits also ask the PDS (`resolver.pds`)
    dnssec: bool = False  # validate TXT answers from the trust anchors (`resolver.dnssec_chain`)
    # DS or DNSKEY records in presentation form: the zones trusted without a parent.
    dnssec_anchors: tuple[str, ...] = ROOT_TRUST_ANCHORS
    dnssec_memory_bytes: int = DNSSEC_MEMORY_BYTES
    max_redirects: int = 5  # H-WK-6
    # Politeness: at most this many requests at once to one web host, to the PLC directory,
    # and to the DNS servers (None: no limit). Audits set it.
    per_host_limit: int | None = None
    # Politeness in time: requests per second to the PLC directory (what the field allows
    # it: 300/s) and to any other host (a stranger's web host), each with a second's burst;
    # a host's Retry-After parks it (`foundation.pace`).
    plc_rate: float = 300.0
    host_rate: float = 20.0
    # A pause a host asks for lasts at most this long, then one request asks whether it is
    # over (POL-PARK-1): an hour asked once would take every lookup of the host for an hour.
    max_park: float = 300.0
    # The share of each host's rate the resolutions a service-auth token causes may take
    # (its issuer's, SA-SIG-2's refresh): a flood of refused tokens leaves the rest to
    # lookups (POL-BUDGET-1).
    service_auth_share: float = 0.1
    # Of each host's rate, what work in the background may take (`foundation.pace`: the pass
    # re-verifying every held identity after an event stream's gap, F-CUR-6).
    reverify_share: float = 0.25
    document_max_bytes: int = DOCUMENT_MAX_BYTES
    audit_log_max_bytes: int = AUDIT_LOG_MAX_BYTES
    user_agent: str = USER_AGENT
    extra_headers: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        """Refuse what would quietly do something else: a flag that is not a boolean (the
        string "false" is truthy), a deadline that never ends or is already over, a CA file
        that is not there, a directory that is not an http(s) URL."""
        for name in ("dev", "verify_plc", "check_pds", "dnssec", "dns_authoritative"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidInput(
                    f"{name} must be true or false, not {getattr(self, name)!r}", "config"
                )
        for name in ("dns_timeout", "https_timeout", "document_timeout", "max_park"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidInput(f"{name} must be a number of seconds", "config")
            if not (0 < value <= _MAX_TIMEOUT):
                raise InvalidInput(
                    f"{name} must be more than 0 and at most {_MAX_TIMEOUT:g} s, not {value}",
                    "config",
                )
        for name in (
            "max_redirects",
            "document_max_bytes",
            "audit_log_max_bytes",
            "dnssec_memory_bytes",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInput(f"{name} must be a whole number >= 0, not {value!r}", "config")
        for name in ("service_auth_share", "reverify_share"):
            share = getattr(self, name)
            if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
                raise InvalidInput(
                    f"{name} must be more than 0 and at most 1, not {share!r}", "config"
                )
        parts = urlsplit(self.plc_url) if isinstance(self.plc_url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"plc_url {self.plc_url!r} is not an http(s) URL", "config")
        if self.dnssec and self.dnssec_anchors != ROOT_TRUST_ANCHORS:
            # Checked when they are used: parsing them loads dnspython, which a lookup that
            # the cache answers, or a daemon's client, never needs.
            from .dnssec import parse_anchors

            if not parse_anchors(self.dnssec_anchors):
                raise InvalidInput("dnssec_anchors names no trust anchor", "config")
        if self.ca_bundle is not None and not os.path.isfile(self.ca_bundle):
            raise InvalidInput(f"ca_bundle {self.ca_bundle!r} is not a readable file", "config")

    @property
    def allow_test_tld(self) -> bool:
        return self.dev  # H-TLD-2


_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


def parse_bool(name: str, text: str) -> bool:
    """A boolean written as text (an environment variable): only the usual spellings; any
    other word is refused rather than read as true."""
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise InvalidInput(
        f"{name} must be one of 1/true/yes/on or 0/false/no/off, not {text!r}", "config"
    )


def parse_nameservers(items: list[str]) -> tuple[Nameserver, ...]:
    return tuple(Nameserver.parse(item) for item in items if item.strip())


def parse_networks(items: list[str]) -> tuple[IpNetwork, ...]:
    try:
        return tuple(ipaddress.ip_network(item.strip()) for item in items if item.strip())
    except ValueError as err:
        raise InvalidInput(f"bad network in allow-list: {err}", "config") from None
