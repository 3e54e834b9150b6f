"""A forging resolver: what an attacker between atwhois and an honest resolver does to the
honest answers. The test network's DNS proxy in this mode asks Knot (the real zones) and
then alters Knot's answer as the forgery file says for that question: no validator is
mocked, the answers are Knot's, re-encoded with a change.

The file is `{"NAME QTYPE": [step, ...]}`, rewritten by tests at run time (`devnet.faults`).
NAME is an absolute name in lower case, or `*.SUFFIX` for every name under SUFFIX (the
longest suffix wins); QTYPE is a type's name or `*`. The steps, in their order:

- `{"delay": seconds}`: wait before asking Knot;
- `{"rcode": "REFUSED"}`: answer that rcode at once, asking nothing;
- `{"txt": "did=..."}`: the TXT records of the answer replaced (their RRSIGs left as they were);
- `{"synthesize_txt": "did=..."}`: a positive TXT answer with no signature, whatever Knot said;
- `{"unsign": true}`: the answer's RRSIGs removed (the DO bit still echoed);
- `{"strip": true}`: every RRSIG, NSEC and NSEC3 removed, and the DO bit cleared;
- `{"deny": true}`: the answer emptied (a DS becomes "no DS");
- `{"drop_denials": true}`: the authority's NSEC, NSEC3 and their RRSIGs removed;
- `{"drop_soa": true}`: the authority's SOA removed (a negative answer that does not say
  which zone it comes from);
- `{"nsec3": {...}}`: unsigned NSEC3 records put first in the authority (`hostile_nsec3`).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import random
from typing import Any

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset

_DNSSEC_TYPES = {dns.rdatatype.RRSIG, dns.rdatatype.NSEC, dns.rdatatype.NSEC3}
_DENIALS = {dns.rdatatype.NSEC, dns.rdatatype.NSEC3}


def steps_for(rules: dict[str, Any], name: str, rdtype: str) -> list[dict[str, Any]]:
    """The steps of the rule for this question: its own, else the longest `*.SUFFIX` one."""
    for wanted in (rdtype, "*"):
        if f"{name} {wanted}" in rules:
            return list(rules[f"{name} {wanted}"])
    best: tuple[int, list[dict[str, Any]]] | None = None
    for key, steps in rules.items():
        pattern, _, wanted = key.partition(" ")
        if not pattern.startswith("*.") or wanted not in (rdtype, "*"):
            continue
        suffix = pattern[1:]  # ".SUFFIX"
        if name.endswith(suffix) and (best is None or len(suffix) > best[0]):
            best = (len(suffix), list(steps))
    return best[1] if best else []


async def before_asking(query: dns.message.Message, steps: list[dict[str, Any]]) -> bytes | None:
    """Delays, and a refusal made up without asking Knot (returned as the answer)."""
    for step in steps:
        if "delay" in step:
            await asyncio.sleep(float(step["delay"]))
        if "rcode" in step:
            response = dns.message.make_response(query)
            response.set_rcode(dns.rcode.from_text(step["rcode"]))
            return response.to_wire()
    return None


def forge(
    query: dns.message.Message, reply: bytes, steps: list[dict[str, Any]], *, tcp: bool
) -> bytes:
    """Knot's `reply` to `query`, altered by `steps`; over UDP, truncated (TC) when it grew
    past what the query said it can take, so that the client asks again over TCP."""
    response = dns.message.from_wire(reply)
    name = query.question[0].name
    for step in steps:
        if "txt" in step:
            response.answer = [_replaced_txt(r, step["txt"]) for r in response.answer]
        if "synthesize_txt" in step:
            response.set_rcode(dns.rcode.NOERROR)
            value = f'"{step["synthesize_txt"]}"'
            response.answer = [dns.rrset.from_text(name, 60, "IN", "TXT", value)]
            response.authority = []
        if step.get("unsign"):
            response.answer = [r for r in response.answer if r.rdtype != dns.rdatatype.RRSIG]
        if step.get("strip"):
            for section in (response.answer, response.authority, response.additional):
                section[:] = [r for r in section if r.rdtype not in _DNSSEC_TYPES]
            response.ednsflags &= ~dns.flags.DO
        if step.get("deny"):
            response.answer = []
        if step.get("drop_denials"):
            response.authority = [r for r in response.authority if not _is_denial(r)]
        if step.get("drop_soa"):
            response.authority = [r for r in response.authority if r.rdtype != dns.rdatatype.SOA]
        if "nsec3" in step:
            response.authority[:0] = hostile_nsec3(**step["nsec3"])
    wire = response.to_wire(max_size=65535)
    limit = max(query.payload, 512) if query.edns >= 0 else 512
    if not tcp and len(wire) > limit:
        truncated = dns.message.make_response(query)
        truncated.flags |= dns.flags.TC
        truncated.ednsflags = response.ednsflags
        return truncated.to_wire()
    return wire


def _replaced_txt(rrset: dns.rrset.RRset, value: str) -> dns.rrset.RRset:
    if rrset.rdtype != dns.rdatatype.TXT:
        return rrset
    return dns.rrset.from_text(rrset.name, rrset.ttl, "IN", "TXT", f'"{value}"')


def _is_denial(rrset: dns.rrset.RRset) -> bool:
    return rrset.rdtype in _DENIALS or (
        rrset.rdtype == dns.rdatatype.RRSIG and rrset.covers in _DENIALS
    )


@functools.lru_cache(maxsize=16)  # a flood of 850 is 50 ms to make, and the same each time
def hostile_nsec3(
    zone: str,
    count: int = 1,
    iterations: int = 0,
    algorithm: int = 1,
    flags: int = 0,
    types: str = "NS",
    owner_hex: str | None = None,
    seed: int = 0,
) -> tuple[dns.rrset.RRset, ...]:
    """`count` NSEC3 records of `zone`, unsigned, with the parameters asked for; each owner a
    base32hex hash label, or the raw label bytes `owner_hex` (which need not be text)."""
    rng = random.Random(seed)
    origin = dns.name.from_text(zone)
    records = []
    for _ in range(count):
        label = (
            bytes.fromhex(owner_hex)
            if owner_hex is not None
            else base64.b32hexencode(rng.randbytes(20)).decode().lower().encode()
        )
        following = base64.b32hexencode(rng.randbytes(20)).decode()
        rdata = dns.rdata.from_text(
            dns.rdataclass.IN,
            dns.rdatatype.NSEC3,
            f"{algorithm} {flags} {iterations} - {following} {types}",
        )
        records.append(dns.rrset.from_rdata(dns.name.Name([label, *origin.labels]), 60, rdata))
    return tuple(records)
