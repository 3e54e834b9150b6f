"""Resolver configuration: one frozen value, checked when it is made; made from the settings
(`atwhois.settings`: the TOML file, the `ATWHOIS_*` variables) by `Config.from_environment`
as the `atwhois` command makes it (which adds its flags), or from settings by name."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from atwhois.foundation import defaults
from atwhois.foundation.version import USER_AGENT, user_agent

from .addresses import nat64_prefix
from .errors import InvalidInput

# What a DID document and a did:plc's audit log may weigh, read from any directory (a
# document is a few KB; the longest real logs are a few hundred KB)
DOCUMENT_MAX_BYTES = 64 * 1024
AUDIT_LOG_MAX_BYTES = 4 * 1024 * 1024

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_MAX_TIMEOUT = 3600.0
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

    plc_url: str = defaults.PLC_URL
    # Empty: the system's resolvers (/etc/resolv.conf). Fallbacks are asked, in order,
    # only when the ones before them fail (timeout, SERVFAIL, refused).
    dns_servers: tuple[Nameserver, ...] = ()
    dns_fallback_servers: tuple[Nameserver, ...] = ()
    ca_bundle: str | None = None  # None: the system's trust store
    # Addresses a fetch may reach although they are private/loopback/reserved (SSRF guard).
    allow_nets: tuple[IpNetwork, ...] = ()
    # H-WK-9: an operator's own NAT64 prefixes, besides RFC 6052's and RFC 8215's
    nat64_prefixes: tuple[ipaddress.IPv6Network, ...] = ()
    dev: bool = defaults.DEV  # .test handles, did:web:localhost, plain http for localhost
    https_port: int | None = None  # test-only: where ":443" really listens
    # H-DNS-9: a re-check after a change (a refresh, a claim after an event, an audit's)
    # also asks the TXT of the zone's own nameservers, past the recursive resolver's cache.
    dns_authoritative: bool = defaults.DNS_AUTHORITATIVE
    # test networks: where the zones' nameservers listen
    dns_authoritative_port: int = defaults.DNS_AUTHORITATIVE_PORT
    dns_timeout: float = defaults.DNS_TIMEOUT
    https_timeout: float = defaults.HTTPS_TIMEOUT
    document_timeout: float = defaults.DOCUMENT_TIMEOUT
    # replay the did:plc audit log instead of trusting the directory
    verify_plc: bool = defaults.VERIFY_PLC
    check_pds: bool = defaults.CHECK_PDS  # lookups and audits also ask the PDS (`resolver.pds`)
    # validate TXT answers from the trust anchors (`resolver.dnssec_chain`)
    dnssec: bool = defaults.DNSSEC
    # DS or DNSKEY records in presentation form: the zones trusted without a parent.
    dnssec_anchors: tuple[str, ...] = ROOT_TRUST_ANCHORS
    dnssec_memory_bytes: int = defaults.DNSSEC_MEMORY_BYTES
    max_redirects: int = 5  # H-WK-6
    # Politeness: at most this many requests at once to one web host, to the PLC directory,
    # and to the DNS servers (None: no limit). Audits set it.
    per_host_limit: int | None = None
    # Politeness in time: requests per second to the PLC directory (what the field allows
    # it: 300/s) and to any other host (a stranger's web host), each with a second's burst;
    # a host's Retry-After parks it (`foundation.pace`).
    plc_rate: float = defaults.PLC_RATE
    host_rate: float = defaults.HOST_RATE
    # A fleet's daemons (on one shared store) split the rates: each keeps to rate/N.
    fleet_daemons: int = 1
    # A pause a host asks for lasts at most this long, then one request asks whether it is
    # over (POL-PARK-1): an hour asked once would take every lookup of the host for an hour.
    max_park: float = defaults.MAX_PARK
    # The share of each host's rate the resolutions a service-auth token causes may take
    # (its issuer's, SA-SIG-2's refresh): a flood of refused tokens leaves the rest to
    # lookups (POL-BUDGET-1).
    service_auth_share: float = defaults.SERVICE_AUTH_SHARE
    # Of each host's rate, what work in the background may take (`foundation.pace`: the pass
    # re-verifying every held identity after an event stream's gap, F-CUR-6).
    reverify_share: float = defaults.REVERIFY_SHARE
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
        fleet = self.fleet_daemons
        if isinstance(fleet, bool) or not isinstance(fleet, int) or fleet < 1:
            raise InvalidInput(
                f"fleet_daemons must be a whole number >= 1, not {fleet!r}", "config"
            )
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

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Config:
        """The configuration the `atwhois` command reads where no flag is given: the TOML
        file `ATWHOIS_CONFIG` names, then the `ATWHOIS_*` variables over it. Raises
        `SettingError` for a setting that is not one, `InvalidInput` for values `Config`
        refuses."""
        import atwhois.settings as settings  # here: a library that is given a Config needs none

        return cls.from_settings(settings.given(environ))

    @classmethod
    def from_settings(cls, given: Mapping[str, Any]) -> Config:
        """The configuration the resolution settings among `given` make (by the names of
        `atwhois.settings`; the others are not the resolver's), checked as any `Config`."""
        fields: dict[str, Any] = {}
        for name, convert in _TO_CONFIG.items():
            if name in given:
                fields.update(convert(given[name]))
        return cls(**fields)

    def as_settings(self) -> dict[str, Any]:
        """The resolution settings this configuration stands for, by name (`config show`)."""
        return {name: value_of(self) for name, value_of in _FROM_CONFIG.items()}


def parse_nameservers(items: list[str]) -> tuple[Nameserver, ...]:
    return tuple(Nameserver.parse(item) for item in items if item.strip())


def parse_networks(items: list[str]) -> tuple[IpNetwork, ...]:
    try:
        return tuple(ipaddress.ip_network(item.strip()) for item in items if item.strip())
    except ValueError as err:
        raise InvalidInput(f"bad network in allow-list: {err}", "config") from None


# How each resolution setting lands in `Config`, and back: one place for both ways.
_TO_CONFIG: dict[str, Callable[[Any], dict[str, Any]]] = {
    "plc_url": lambda v: {"plc_url": v},
    "dev": lambda v: {"dev": v},
    "verify_plc": lambda v: {"verify_plc": v},
    "check_pds": lambda v: {"check_pds": v},
    "dnssec": lambda v: {"dnssec": v},
    "dnssec_anchor": lambda v: {"dnssec_anchors": tuple(v)} if v else {},
    "dnssec_memory_mb": lambda v: {"dnssec_memory_bytes": int(v * defaults.MIB)},
    "ca_bundle": lambda v: {"ca_bundle": v},
    "https_port": lambda v: {"https_port": v},
    "dns_authoritative": lambda v: {"dns_authoritative": v},
    "dns_authoritative_port": lambda v: {"dns_authoritative_port": v},
    "plc_rate": lambda v: {"plc_rate": v},
    "host_rate": lambda v: {"host_rate": v},
    "fleet_daemons": lambda v: {"fleet_daemons": v},
    "max_park": lambda v: {"max_park": v},
    "service_auth_share": lambda v: {"service_auth_share": v},
    "reverify_share": lambda v: {"reverify_share": v},
    "contact_url": lambda v: {"user_agent": user_agent(v)} if v else {},
    "dns_server": lambda v: {"dns_servers": parse_nameservers(v)},
    "dns_fallback": lambda v: {"dns_fallback_servers": parse_nameservers(v)},
    "allow_net": lambda v: {"allow_nets": parse_networks(v)},
    "nat64_prefix": lambda v: {"nat64_prefixes": tuple(nat64_prefix(p) for p in v)},
    "timeout": lambda v: dict.fromkeys(("dns_timeout", "https_timeout", "document_timeout"), v),
}
_FROM_CONFIG: dict[str, Callable[[Config], Any]] = {
    "plc_url": lambda c: c.plc_url,
    "dev": lambda c: c.dev,
    "verify_plc": lambda c: c.verify_plc,
    "check_pds": lambda c: c.check_pds,
    "dnssec": lambda c: c.dnssec,
    "dnssec_anchor": lambda c: list(c.dnssec_anchors),
    "dnssec_memory_mb": lambda c: c.dnssec_memory_bytes / defaults.MIB,
    "ca_bundle": lambda c: c.ca_bundle,
    "https_port": lambda c: c.https_port,
    "dns_authoritative": lambda c: c.dns_authoritative,
    "dns_authoritative_port": lambda c: c.dns_authoritative_port,
    "plc_rate": lambda c: c.plc_rate,
    "host_rate": lambda c: c.host_rate,
    "fleet_daemons": lambda c: c.fleet_daemons,
    "max_park": lambda c: c.max_park,
    "service_auth_share": lambda c: c.service_auth_share,
    "reverify_share": lambda c: c.reverify_share,
    "contact_url": lambda c: c.user_agent,
    "dns_server": lambda c: [str(n) for n in c.dns_servers] or "the system's",
    "dns_fallback": lambda c: [str(n) for n in c.dns_fallback_servers],
    "allow_net": lambda c: [str(net) for net in c.allow_nets],
    "nat64_prefix": lambda c: [str(net) for net in c.nat64_prefixes],
    "timeout": lambda c: [c.dns_timeout, c.https_timeout, c.document_timeout],
}
