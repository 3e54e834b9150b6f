"""What each lookup of the test network's world must give: its status, DID and the outcome of
each method (`test_resolver` checks the resolver against it, `test_views` every view)."""

from __future__ import annotations

from typing import NamedTuple

from atwhois.resolver import Outcome, Status
from devnet import world

OK, NF, FAIL, BAD, SKIP = (
    Outcome.OK,
    Outcome.NOT_FOUND,
    Outcome.FAILED,
    Outcome.INVALID,
    Outcome.SKIPPED,
)


class Case(NamedTuple):
    query: str
    status: Status
    did: str | None  # identity name in the world, "never", or a literal DID
    dns: Outcome
    https: Outcome
    doc: Outcome
    error_kinds: tuple[str | None, str | None, str | None] = (None, None, None)
    warnings: frozenset[str] = frozenset()


L = frozenset({"legacy_key_format"})  # the reference PLC server serves legacy keys
CASES = [
    # verified, by each way and with each quirk of the world
    Case("alice.test", Status.VERIFIED, "alice", OK, OK, OK, warnings=L),
    Case("@Alice.TEST", Status.VERIFIED, "alice", OK, OK, OK, warnings=L),  # H-SYN-6/7
    Case("bob.test", Status.VERIFIED, "bob", OK, NF, OK, warnings=L),  # after a handle change
    Case("carol.test", Status.VERIFIED, "carol", NF, OK, OK, warnings=L),  # HTTPS only
    Case("dave.test", Status.VERIFIED, "dave", OK, NF, OK, warnings=L),  # rotation keys rotated
    Case("frank.test", Status.VERIFIED, "frank", OK, NF, OK, warnings=L),  # hostile op nullified
    Case("grace.test", Status.VERIFIED, "grace", OK, NF, OK, warnings=L),  # DOC-AKA-1
    Case("henry.test", Status.VERIFIED, "henry", OK, NF, OK, warnings=L),  # mixed-case alias
    Case("quinn.test", Status.VERIFIED, "quinn", OK, NF, OK, warnings=L),  # P-256 signing key
    Case("dupe.test", Status.VERIFIED, "judy", OK, NF, OK, warnings=L),  # H-DNS-3 duplicates
    Case("split.test", Status.VERIFIED, "kate", OK, NF, OK, warnings=L),  # H-DNS-4
    Case("cname.test", Status.VERIFIED, "leo", OK, NF, OK, warnings=L),  # CNAME
    Case("big.test", Status.VERIFIED, "mallory", OK, NF, OK, warnings=L),  # TC -> TCP
    Case("redirect.test", Status.VERIFIED, "nina", NF, OK, OK, warnings=L),  # H-WK-6
    Case("spaces.test", Status.VERIFIED, "olivia", NF, OK, OK, warnings=L),  # H-WK-4
    Case("web.test", Status.VERIFIED, "did:web:web.test", OK, NF, OK),  # Multikey did:web
    Case("legacyweb.test", Status.VERIFIED, "did:web:legacyweb.test", OK, NF, OK, warnings=L),
    # H-RES-2: both answer, they disagree, DNS wins and the conflict is reported
    Case("conflict.test", Status.VERIFIED, "ivan", OK, OK, OK, warnings=L | {"dns_https_conflict"}),
    # DNS is slower than its deadline; HTTPS carries the lookup, with a warning
    Case(
        "slow.test",
        Status.VERIFIED,
        "peggy",
        FAIL,
        OK,
        OK,
        ("UpstreamTimeout", None, None),
        L | {"dns_unavailable"},
    ),
    # not verified
    Case("bob-old.test", Status.HANDLE_MISMATCH, "bob", OK, NF, OK, warnings=L),
    Case("wrong.test", Status.HANDLE_MISMATCH, "alice", NF, OK, OK, warnings=L),
    Case("erin.test", Status.DID_DEACTIVATED, "erin", OK, NF, NF, (None, None, "DidDeactivated")),
    Case("ghost.test", Status.DID_NOT_FOUND, "never", OK, NF, NF, (None, None, "NotFound")),
    Case(
        "imposter.test",
        Status.INVALID_DOCUMENT,
        "did:web:imposter.test",
        OK,
        NF,
        BAD,
        (None, None, "InvalidData"),
    ),
    Case("two-dids.test", Status.AMBIGUOUS, None, BAD, NF, SKIP, ("AmbiguousHandle", None, None)),
    Case(
        "no-did.test", Status.HANDLE_NOT_FOUND, None, NF, NF, SKIP, ("NotFound", "NotFound", None)
    ),
    Case("bad-did.test", Status.HANDLE_NOT_FOUND, None, BAD, NF, SKIP, ("InvalidData", None, None)),
    Case(
        "nobody.test", Status.HANDLE_NOT_FOUND, None, NF, NF, SKIP, ("NotFound", "NotFound", None)
    ),
    Case(
        "nodata.test", Status.HANDLE_NOT_FOUND, None, NF, NF, SKIP, ("NotFound", "NotFound", None)
    ),
    Case(
        "html.test", Status.HANDLE_NOT_FOUND, None, NF, BAD, SKIP, ("NotFound", "InvalidData", None)
    ),
    Case("empty.test", Status.HANDLE_NOT_FOUND, None, NF, BAD, SKIP, (None, "InvalidData", None)),
    Case(
        "huge.test", Status.HANDLE_NOT_FOUND, None, NF, BAD, SKIP, (None, "ResponseTooLarge", None)
    ),
    Case("loop.test", Status.HANDLE_NOT_FOUND, None, NF, BAD, SKIP, (None, "InvalidData", None)),
    Case(
        "forbidden.test",
        Status.HANDLE_NOT_FOUND,
        None,
        NF,
        BAD,
        SKIP,
        (None, "ForbiddenAddress", None),
    ),
    # compressed although identity was asked for: taken as sent, so not a DID
    Case("gzip.test", Status.HANDLE_NOT_FOUND, None, NF, BAD, SKIP, (None, "InvalidData", None)),
    # transient failures are never reported as absence
    Case(
        "servfail.test",
        Status.HANDLE_MISMATCH,
        "alice",
        FAIL,
        OK,
        OK,
        ("UpstreamFailure", None, None),
        L | {"dns_unavailable"},
    ),
    Case(
        "blackhole.test",
        Status.UNAVAILABLE,
        None,
        FAIL,
        NF,
        SKIP,
        ("UpstreamTimeout", "NotFound", None),
    ),
    Case("error.test", Status.UNAVAILABLE, None, NF, FAIL, SKIP, (None, "UpstreamFailure", None)),
    Case(
        "slow-headers.test",
        Status.UNAVAILABLE,
        None,
        NF,
        FAIL,
        SKIP,
        (None, "UpstreamTimeout", None),
    ),
    Case("trickle.test", Status.UNAVAILABLE, None, NF, FAIL, SKIP, (None, "UpstreamTimeout", None)),
    *(
        Case(host, Status.UNAVAILABLE, None, NF, FAIL, SKIP, (None, "UpstreamFailure", None))
        for host in (world.TLS_EXPIRED, world.TLS_UNKNOWN_CA, world.TLS_WRONG_NAME)
    ),
]
