"""Fuzzing the DNSSEC walk (S-SEC-*, issue 54) with what a hostile resolver or zone sends:
byte flips of real signed responses, and responses built to hurt: floods of keys that share
the zone key's tag, floods of RRSIGs naming it, NSEC3 of every hash algorithm, flag,
iteration count, salt and owner encoding (signed by the zone's own key or not), NSEC beside
NSEC3, the DO bit and the signatures stripped.

Each input goes to the rules and to the whole walk (every question the walk asks gets that
response, or the seeds' pristine answer to it), which must end in one of the four states,
or in a classified transient failure, within `TIME_BOUND`: the caps hold whatever the input.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import time
from typing import Any

import dns.dnssec
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.DNSKEY
import dns.rdtypes.ANY.NSEC
import dns.rdtypes.ANY.NSEC3
import dns.rdtypes.ANY.RRSIG
import dns.rdtypes.util
import dns.rrset
import dns.zone
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import strategies as st

from atwhois.resolver import dnssec, dnssec_denial
from atwhois.resolver.dnssec import Budget, ZoneKeys, parse_anchors
from atwhois.resolver.dnssec_chain import DnssecChain
from atwhois.resolver.errors import DnssecBogus, UpstreamFailure
from atwhois.resolver.identity import BOGUS, INDETERMINATE, INSECURE, SECURE

ORIGIN = dns.name.from_text("example.")
NOW = 1796300000.0  # within the seeds' signatures
TIME_BOUND = 2.0  # seconds one input may take, rules and walk: the caps make it milliseconds
_KEY = ec.derive_private_key(20261203, ec.SECP256R1())
_DNSKEY = dns.dnssec.make_dnskey(_KEY.public_key(), dns.dnssec.Algorithm.ECDSAP256SHA256, flags=257)
KEY_TAG = _DNSKEY.key_id()


def _seeds() -> tuple[list[bytes], Any]:
    """Responses a walk reads, from a zone signed here with a fixed key: a signed TXT answer,
    the zone's DNSKEY set, a DS denied by NSEC, a wildcard answer; and the zone's keys."""
    zone = dns.zone.from_text(
        "$TTL 60\n@ SOA ns hostmaster 1 3600 600 86400 60\n@ NS ns\nns A 127.0.0.1\n"
        '_atproto.a TXT "did=did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"\nchild NS ns.elsewhere.\n'
        '*.w TXT "did=did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"\n',
        origin=ORIGIN,
    )
    with zone.writer() as txn:
        dns.dnssec.sign_zone(
            zone, txn, keys=[(_KEY, _DNSKEY)], inception=1796000000, lifetime=10**8
        )
    whole = dns.zone.from_text(zone.to_text(relativize=False), origin=ORIGIN, relativize=False)

    def response(name: str, rdtype: str, answer: str | None, denial: str | None = None) -> bytes:
        message = dns.message.make_response(dns.message.make_query(name, rdtype, want_dnssec=True))
        for owner, section, covered in (
            (answer, message.answer, rdtype),
            (denial, message.authority, "NSEC"),
        ):
            if owner is None:
                continue
            found = dns.name.from_text(owner)
            section.append(whole.find_rrset(found, covered))
            section.append(whole.find_rrset(found, dns.rdatatype.RRSIG, covered))
        return message.to_wire()

    seeds = [
        response("_atproto.a.example.", "TXT", "_atproto.a.example."),
        response("example.", "DNSKEY", "example."),
        response("child.example.", "DS", None, "child.example."),
        response("*.w.example.", "TXT", "*.w.example."),
    ]
    return seeds, whole.find_rrset(ORIGIN, dns.rdatatype.DNSKEY)


SEEDS, KEYSET = _seeds()
ANCHORS = parse_anchors([f"example. DNSKEY {_DNSKEY.to_text()}"])
KEYS = ZoneKeys.of(KEYSET)
_PRISTINE = {
    (m.question[0].name, m.question[0].rdtype): raw
    for raw in SEEDS
    for m in [dns.message.from_wire(raw)]
}


def rules_and_walk(raw: bytes) -> None:
    """A response a resolver sent for the walk: dnspython parses it or says it cannot; the
    rules then decide or say bogus (`DnssecBogus`); the whole walk, fed that response for
    the question it answers, ends in one of the four states; all within `TIME_BOUND`."""
    try:
        message = dns.message.from_wire(raw)
    except (dns.exception.DNSException, ValueError, UnicodeError):
        return
    started = time.perf_counter()
    _rules(message)
    _walk(message)
    took = time.perf_counter() - started
    assert took < TIME_BOUND, f"one response took {took:.2f}s"


def _rules(message: dns.message.Message) -> None:
    dnssec.strips_dnssec(message)
    for signed in dnssec.signed_rrsets(message.answer):
        with contextlib.suppress(DnssecBogus):
            sig = dnssec.verify(signed, ORIGIN, KEYS, NOW, Budget())
            dnssec.wildcard_source(signed.rrset.name, sig)
    denials = [
        s
        for s in dnssec.signed_rrsets(message.authority)
        if s.rrset.rdtype in (dnssec.NSEC, dnssec.NSEC3)
    ]
    for text in ("child.example.", "_atproto.a.example.", "nothing.example.", "x.w.example."):
        name = dns.name.from_text(text)
        with contextlib.suppress(DnssecBogus):
            decided = dnssec_denial.ds_denial(name, ORIGIN, denials, KEYS, NOW, Budget())
            assert decided in (dnssec_denial.UNSIGNED_DELEGATION, dnssec_denial.NO_DELEGATION)
        with contextlib.suppress(DnssecBogus):
            proven = dnssec_denial.wildcard_denial(name, ORIGIN, denials, KEYS, NOW, Budget())
            assert proven in (dnssec_denial.PROVEN, dnssec_denial.COSTLY)
        with contextlib.suppress(DnssecBogus):
            absent = dnssec_denial.absence(
                name, dns.rdatatype.TXT, ORIGIN, denials, KEYS, NOW, Budget()
            )
            assert absent in (dnssec_denial.PROVEN, dnssec_denial.OPTED_OUT, dnssec_denial.COSTLY)


def _walk(message: dns.message.Message) -> None:
    asked = (message.question[0].name, message.question[0].rdtype) if message.question else None

    async def answer(name: Any, rdtype: Any) -> dns.message.Message:
        """The input for its own question (or for any, if it has none); the seeds' pristine
        answers for the others."""
        if asked is None or (name, rdtype) == asked:
            return message
        pristine = _PRISTINE.get((name, rdtype))
        return dns.message.from_wire(pristine) if pristine else message

    async def both() -> None:
        chain = DnssecChain(answer, ANCHORS, clock=lambda: NOW, deadline=TIME_BOUND)
        for check in (
            lambda: chain.check(message),
            lambda: chain.check_absent(
                dns.name.from_text("_atproto.a.example."), dns.rdatatype.TXT, message
            ),
        ):
            try:
                state = (await check()).state
            except UpstreamFailure:  # the deadline: transient, never a state
                continue
            assert state in (SECURE, INSECURE, BOGUS, INDETERMINATE)

    asyncio.run(both())


# --- hostile responses, built ------------------------------------------------------------
# Built from one number (a random generator's seed): drawing each part from Hypothesis cost
# two thirds of a run, and a failing seed names its input as well.

_TYPES = [
    dns.rdatatype.NS,
    dns.rdatatype.DS,
    dns.rdatatype.SOA,
    dns.rdatatype.TXT,
    dns.rdatatype.CNAME,
    dns.rdatatype.RRSIG,
    dns.rdatatype.NSEC3PARAM,
]
_ITERATIONS = [0, 1, 150, 151, 2500, 65535]


def _bitmap(rng: random.Random) -> list[tuple[int, bytes]]:
    types = rng.sample(_TYPES, rng.randrange(len(_TYPES)))
    return dns.rdtypes.util.Bitmap.from_rdtypes(types).windows


def _maybe_signed(rng: random.Random, rrset: dns.rrset.RRset) -> list[dns.rrset.RRset]:
    """The RRset, and (half the time) its RRSIG by the zone's own key: what a hostile zone
    owner can send."""
    if rng.random() < 0.5:
        return [rrset]
    sig = dns.dnssec.sign(rrset, _KEY, ORIGIN, _DNSKEY, inception=1796000000, lifetime=10**8)
    return [rrset, dns.rrset.from_rdata(rrset.name, rrset.ttl, sig)]


def _nsec3(rng: random.Random) -> list[dns.rrset.RRset]:
    if rng.random() < 0.5:  # a hash label
        owner_label = base64.b32hexencode(rng.randbytes(20)).lower()
    else:  # any bytes at all: not text, not a hash
        owner_label = rng.randbytes(rng.randrange(1, 64))
    zone = ORIGIN if rng.random() < 0.85 else dns.name.from_text("other.")
    rdata = dns.rdtypes.ANY.NSEC3.NSEC3(
        dns.rdataclass.IN,
        dns.rdatatype.NSEC3,
        rng.choice([1, 1, 2, 0, rng.randrange(256)]),  # hash algorithm
        rng.choice([0, 1, rng.randrange(256)]),  # flags
        rng.choice([*_ITERATIONS, rng.randrange(65536)]),
        rng.randbytes(rng.randrange(9)),  # salt
        rng.randbytes(rng.choice([20, 20, rng.randrange(1, 33)])),  # next hash
        _bitmap(rng),
    )
    owner = dns.name.Name([owner_label, *zone.labels])
    return _maybe_signed(rng, dns.rrset.from_rdata(owner, 60, rdata))


def _nsec(rng: random.Random) -> list[dns.rrset.RRset]:
    labels = [
        rng.choice(["a", "child", "w", "*", "zz", "_atproto"]) for _ in range(rng.randrange(4))
    ]
    owner = dns.name.Name([*(label.encode() for label in labels), *ORIGIN.labels])
    following = dns.name.from_text(rng.choice(["example.", "zz.example.", "b.example."]))
    rdata = dns.rdtypes.ANY.NSEC.NSEC(
        dns.rdataclass.IN, dns.rdatatype.NSEC, following, _bitmap(rng)
    )
    return _maybe_signed(rng, dns.rrset.from_rdata(owner, 60, rdata))


def _key_flood(count: int, algorithm: int, tag: int) -> dns.rrset.RRset:
    """`count` zone keys that all carry the key tag `tag` (their last two bytes set so), of
    `algorithm`; points on no curve, which a validator learns only by trying them."""
    keys = []
    for index in range(count):
        body = bytearray(index.to_bytes(4, "big") * 16)
        head = bytes([1, 0, 3, algorithm]) + bytes(body[:62])
        partial = sum(b << 8 if i % 2 == 0 else b for i, b in enumerate(head))
        for carry in range(64):
            tail = (tag - partial - carry) % 65536
            if (partial + tail + ((partial + tail) >> 16)) & 0xFFFF == tag:
                body[62:] = tail.to_bytes(2, "big")
                break
        keys.append(
            dns.rdtypes.ANY.DNSKEY.DNSKEY(
                dns.rdataclass.IN, dns.rdatatype.DNSKEY, 256, 3, algorithm, bytes(body)
            )
        )
    return dns.rrset.from_rdata_list(ORIGIN, 60, keys)


def _sig_flood(covered: dns.rrset.RRset, count: int, labels: int) -> dns.rrset.RRset:
    sigs = [
        dns.rdtypes.ANY.RRSIG.RRSIG(
            dns.rdataclass.IN,
            dns.rdatatype.RRSIG,
            covered.rdtype,
            13,
            labels,
            60,
            int(NOW) + 86400,
            int(NOW) - 86400,
            KEY_TAG,
            ORIGIN,
            index.to_bytes(2, "big") * 32,
        )
        for index in range(count)
    ]
    return dns.rrset.from_rdata_list(covered.name, 60, sigs)


def hostile_response(seed: int) -> bytes:
    """A seed's response: a seed answer with floods of keys or signatures, NSEC and NSEC3 of
    every kind in its authority, and (one time in five) its signatures and DO bit stripped."""
    rng = random.Random(seed)
    message = dns.message.from_wire(rng.choice(SEEDS))
    if rng.random() < 0.4:
        flood = _key_flood(rng.randrange(1, 65), rng.choice([13, 15, 8]), KEY_TAG)
        message.answer.extend(_maybe_signed(rng, flood))
    covered = next((r for r in message.answer if r.rdtype != dns.rdatatype.RRSIG), None)
    if covered is not None and rng.random() < 0.4:
        message.answer.append(_sig_flood(covered, rng.randrange(1, 65), rng.randrange(5)))
    for _ in range(rng.randrange(21)):
        message.authority.extend(_nsec3(rng) if rng.random() < 0.7 else _nsec(rng))
    if rng.random() < 0.3:
        message.authority = [r for r in message.authority if r.rdtype != dns.rdatatype.NSEC]
    if rng.random() < 0.2:  # stripped
        for section in (message.answer, message.authority):
            section[:] = [r for r in section if r.rdtype != dns.rdatatype.RRSIG]
        message.ednsflags &= ~dns.flags.DO
    try:
        return message.to_wire(max_size=65535)
    except dns.exception.TooBig:  # more than a DNS message holds: no resolver can send it
        return SEEDS[0]


def hostile_walk(seed: int) -> None:
    """`rules_and_walk` over the response built from `seed`."""
    rules_and_walk(hostile_response(seed))


hostile_seeds = st.integers(0, 2**64)
