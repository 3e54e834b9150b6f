"""Which IPv4 addresses an IPv6 address carries (H-WK-9), pure: the SSRF guard judges an
address by every IPv4 inside it, because a gateway on the path turns that address into the
IPv4 one. `64:ff9b::a9fe:a9fe` is "global" to Python's `is_global`, yet on an IPv6-only
network with a NAT64 gateway it reaches 169.254.169.254, the cloud's metadata service.

The forms, each as its RFC places the IPv4:
- IPv4-mapped `::ffff:0:0/96` (RFC 4291) and IPv4-compatible `::/96` (RFC 4291,
  deprecated): the last 32 bits;
- IPv4-translated `::ffff:0:0:0/96` (SIIT, RFC 2765): the last 32 bits;
- NAT64's well-known prefix `64:ff9b::/96` (RFC 6052), its local-use prefix
  `64:ff9b:1::/48` (RFC 8215), and the prefixes an operator configures: where RFC 6052
  places the IPv4 for the prefix's length (32, 40, 48, 56, 64 or 96 bits), skipping bits
  64-71 (the `u` octet);
- 6to4 `2002::/16` (RFC 3056): bits 16-47;
- Teredo `2001::/32` (RFC 4380): the server (bits 32-63) and the client (the last 32 bits,
  inverted).
"""

from __future__ import annotations

import ipaddress

from .errors import InvalidInput

IPv4 = ipaddress.IPv4Address
IPv6 = ipaddress.IPv6Address

NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")
_COMPATIBLE = ipaddress.IPv6Network("::/96")
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
_TEREDO = ipaddress.IPv6Network("2001::/32")
# RFC 6052 section 2.2: the prefix lengths an IPv4-embedded address may have
NAT64_LENGTHS = frozenset({32, 40, 48, 56, 64, 96})


def nat64_prefix(text: str) -> ipaddress.IPv6Network:
    """An operator's NAT64 prefix, one of RFC 6052's lengths."""
    try:
        network = ipaddress.IPv6Network(text.strip())
    except ValueError as err:
        raise InvalidInput(f"bad NAT64 prefix: {err}", "config") from None
    if network.prefixlen not in NAT64_LENGTHS:
        lengths = ", ".join(str(n) for n in sorted(NAT64_LENGTHS))
        raise InvalidInput(
            f"bad NAT64 prefix {network}: its length must be one of {lengths} (RFC 6052)",
            "config",
        )
    return network


def _rfc6052(address: IPv6, length: int) -> IPv4:
    """The IPv4 RFC 6052 embeds after a prefix of `length` bits: the 32 bits that follow
    it, leaving out bits 64-71."""
    bits = int(address)
    # the 120 bits left once bits 64-71 (counted from the left) are dropped
    without_u = (bits >> 64 << 56) | (bits & (2**56 - 1))
    # there the IPv4 starts right after the prefix (one octet sooner past the u octet)
    start = length if length <= 64 else length - 8
    return IPv4((without_u >> (120 - start - 32)) & 0xFFFFFFFF)


def embedded_ipv4(address: IPv6, nat64: tuple[ipaddress.IPv6Network, ...] = ()) -> tuple[IPv4, ...]:
    """Every IPv4 address `address` carries (none: it carries none)."""
    if address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    last = IPv4(int(address) & 0xFFFFFFFF)
    if address in _TRANSLATED or address in _COMPATIBLE:
        return (last,)
    # prefixes that overlap (an operator's inside another's) each say what it carries
    prefixes = (NAT64_WELL_KNOWN, NAT64_LOCAL_USE, *nat64)
    if carried := [_rfc6052(address, p.prefixlen) for p in prefixes if address in p]:
        return tuple(dict.fromkeys(carried))
    if address in _SIX_TO_FOUR:
        return (IPv4((int(address) >> 80) & 0xFFFFFFFF),)
    if address in _TEREDO and address.teredo is not None:
        return address.teredo
    return ()
