"""Syntax of the identifiers atwhois accepts: handles, DIDs, at-identifiers and at:// URIs.

Pure functions over strings. Each check raises an `InvalidInput` subclass that names the
rule of `docs/spec.md` it enforces, so a user learns *which* rule failed.
"""

from __future__ import annotations

import datetime
import re
import urllib.parse
from dataclasses import dataclass
from typing import Literal

from .errors import (
    InvalidDid,
    InvalidHandle,
    InvalidIdentifier,
    ReservedHandle,
    UnsupportedDidMethod,
)

# H-SYN-5: the reference regex (it does not bound the total length: H-SYN-1 does).
_HANDLE_RE = re.compile(
    r"([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
)
_HANDLE_MAX = 253  # H-SYN-1
# H-TLD-1: syntactically valid, never resolvable.
RESERVED_TLDS = frozenset(
    {"alt", "arpa", "example", "internal", "invalid", "local", "localhost", "onion"}
)
INVALID_HANDLE = "handle.invalid"  # H-INV-1

# D-SYN-5 and D-SYN-6.
_DID_RE = re.compile(r"did:[a-z]+:[a-zA-Z0-9._:%-]*[a-zA-Z0-9._-]")
_DID_MAX = 2048
_DID_PLC_RE = re.compile(r"did:plc:[a-z2-7]{24}")  # D-PLC-1
SUPPORTED_DID_METHODS = ("plc", "web")  # D-SYN-9

# at:// URI parts (U-1): NSID collection and record key.
_NSID_RE = re.compile(
    r"[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
    r"(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)+"
    r"(\.[a-zA-Z]([a-zA-Z0-9]{0,62})?)"
)
_NSID_MAX = 317
_RKEY_RE = re.compile(r"[A-Za-z0-9._:~-]{1,512}")
_AT_URI_MAX = 8 * 1024  # U-3


def _ascii(text: str) -> bool:
    return text.isascii()


def is_valid_nsid(text: str) -> bool:
    """An NSID (a collection, a method's name: `com.atproto.server.getSession`)."""
    return len(text) <= _NSID_MAX and text.isascii() and _NSID_RE.fullmatch(text) is not None


def is_valid_handle(text: str) -> bool:
    """H-SYN-1..5: true if `text` is a syntactically valid handle (any case)."""
    return len(text) <= _HANDLE_MAX and _ascii(text) and _HANDLE_RE.fullmatch(text) is not None


def parse_handle(text: str) -> str:
    """Validate a handle and return its normalized (lowercase) form (H-SYN-6)."""
    if not _ascii(text):
        raise InvalidHandle(f"handle {text!r} is not ASCII (use punycode)", "H-SYN-1")
    if len(text) > _HANDLE_MAX:
        raise InvalidHandle(f"handle is {len(text)} characters, over {_HANDLE_MAX}", "H-SYN-1")
    if _HANDLE_RE.fullmatch(text) is None:
        raise InvalidHandle(f"{text!r} is not a valid handle", _handle_rule(text))
    return text.lower()


def _handle_rule(text: str) -> str:
    """Which handle rule an invalid (ASCII, short enough) handle breaks, for the message."""
    labels = text.split(".")
    if len(labels) < 2 or any(label == "" for label in labels):
        return "H-SYN-2"
    if labels[-1][:1].isdigit() or ":" in text:
        return "H-SYN-4"
    return "H-SYN-3"


def check_resolvable_handle(handle: str, *, allow_test_tld: bool) -> None:
    """Refuse, before any network traffic, handles that must never be resolved.

    H-INV-1 (`handle.invalid`), H-TLD-1 (the eight reserved TLDs) and H-TLD-2 (`.test`
    only when configuration allows it). `handle` must already be normalized.
    """
    if handle == INVALID_HANDLE:
        raise ReservedHandle("handle.invalid is a marker, not a handle", "H-INV-1")
    tld = handle.rsplit(".", 1)[-1]
    if tld in RESERVED_TLDS:
        raise ReservedHandle(f"the .{tld} TLD is reserved and never resolves", "H-TLD-1")
    if tld == "test" and not allow_test_tld:
        raise ReservedHandle(".test handles resolve only in development mode", "H-TLD-2")


def is_valid_did(text: str) -> bool:
    """D-SYN-1..6: true if `text` is a syntactically valid DID of any method."""
    return len(text) <= _DID_MAX and _ascii(text) and _DID_RE.fullmatch(text) is not None


def parse_did(text: str) -> str:
    """Validate a DID (never re-cased: D-SYN-7) and return it."""
    if len(text) > _DID_MAX:
        raise InvalidDid(f"DID is {len(text)} characters, over {_DID_MAX}", "D-SYN-6")
    if not is_valid_did(text):
        raise InvalidDid(f"{text!r} is not a valid DID", "D-SYN-5")
    return text


def did_method(did: str) -> str:
    """The method name of a syntactically valid DID."""
    return did.split(":", 2)[1]


def check_plc_did(did: str) -> None:
    """D-PLC-1: `did:plc:` and 24 characters of lowercase base32."""
    if _DID_PLC_RE.fullmatch(did) is None:
        raise InvalidDid(f"{did!r} is not a did:plc identifier (24 base32 chars)", "D-PLC-1")


@dataclass(frozen=True, slots=True)
class WebHost:
    """The host (and, for localhost in development only, the port) of a did:web."""

    host: str
    port: int | None = None


def parse_did_web(did: str, *, dev: bool, allow_test_tld: bool) -> WebHost:
    """D-WEB-1..3: a hostname-level did:web; `localhost%3APORT` only in development."""
    ident = did.removeprefix("did:web:")
    if ":" in ident:
        raise InvalidDid("path-based did:web is not supported in atproto", "D-WEB-1")
    if ident.lower() == "localhost" or ident.lower().startswith("localhost%3a"):
        if not dev:
            raise InvalidDid("did:web:localhost is allowed only in development", "D-WEB-3")
        if ident == "localhost":
            return WebHost("localhost")
        match = re.fullmatch(r"localhost%3[aA](\d{1,5})", ident)
        if match is None or not 0 < int(match.group(1)) < 65536:
            raise InvalidDid(f"{did!r}: bad localhost port", "D-WEB-3")
        return WebHost("localhost", int(match.group(1)))
    if "%" in ident:
        raise InvalidDid("a port is allowed in did:web only for localhost", "D-WEB-3")
    if not is_valid_handle(ident):
        raise InvalidDid(f"{did!r}: the did:web host is not a valid hostname", "D-WEB-2")
    host = ident.lower()
    try:
        check_resolvable_handle(host, allow_test_tld=allow_test_tld)
    except ReservedHandle as err:
        raise InvalidDid(f"{did!r}: {err.message}", err.rule) from None
    return WebHost(host)


def is_valid_at_identifier(text: str) -> bool:
    """A handle or a DID (the lexicon `at-identifier` format)."""
    return is_valid_handle(text) or is_valid_did(text)


@dataclass(frozen=True, slots=True)
class AtUri:
    """An at:// URI: the authority (handle or DID), optional collection and record key."""

    authority: str
    collection: str | None = None
    rkey: str | None = None


def parse_at_uri(text: str) -> AtUri:
    """U-1..U-4: parse a Lexicon-form at:// URI (no query, no fragment)."""
    rule = "U-2"
    if len(text) > _AT_URI_MAX:
        raise InvalidIdentifier("at:// URI longer than 8 KiB", "U-3")
    if not text.startswith("at://") or not _ascii(text):
        raise InvalidIdentifier(f"{text!r} is not an at:// URI", "U-1")
    parts = text[len("at://") :].split("/")
    if len(parts) > 3:
        raise InvalidIdentifier(f"{text!r} has too many path segments", "U-1")
    authority, rest = parts[0], parts[1:]
    if is_valid_handle(authority):
        authority = authority.lower()  # U-4
    elif not is_valid_did(authority):
        raise InvalidIdentifier(f"{text!r}: authority is neither a handle nor a DID", rule)
    collection = rest[0] if rest else None
    rkey = rest[1] if len(rest) > 1 else None
    if collection is not None and not is_valid_nsid(collection):
        raise InvalidIdentifier(f"{text!r}: collection is not an NSID", "U-1")
    if rkey is not None and (_RKEY_RE.fullmatch(rkey) is None or rkey in {".", ".."}):
        raise InvalidIdentifier(f"{text!r}: record key is not valid", "U-1")
    return AtUri(authority, collection, rkey)


QueryKind = Literal["handle", "did"]


@dataclass(frozen=True, slots=True)
class Query:
    """What a lookup asks about, after normalization of what the user typed."""

    text: str  # what was typed
    kind: QueryKind
    value: str  # normalized handle, or DID


def profile_url_authority(text: str) -> str | None:
    """The handle or DID in a web client's profile (or post) URL, such as
    `https://bsky.app/profile/alice.example.com/post/3k2a`; None for anything else."""
    match = re.fullmatch(r"https?://[A-Za-z0-9.-]+(?::\d+)?/profile/([^/?#]+)(?:[/?#].*)?", text)
    if match is None:
        return None
    return urllib.parse.unquote(match.group(1))


def parse_query(text: str) -> Query:
    """Classify user input: a handle (a leading `@` stripped, H-SYN-7), a DID, an at:// URI,
    or a web client's profile URL.

    Handles come back lowercased (H-SYN-6); DIDs are never re-cased (D-SYN-7).
    """
    if text.startswith("at://"):
        authority = parse_at_uri(text).authority
    elif (from_url := profile_url_authority(text)) is not None:
        authority = from_url.removeprefix("@")
    elif text.startswith(("http://", "https://")):
        raise InvalidIdentifier(f"{text[:80]!r} is not a profile URL (…/profile/HANDLE)", "U-1")
    else:
        authority = text.removeprefix("@")
    if authority.startswith("did:"):
        return Query(text, "did", parse_did(authority))
    if authority.lower().startswith("did:"):
        raise InvalidDid(f"{authority!r}: a DID starts with lowercase 'did:'", "D-SYN-1")
    return Query(text, "handle", parse_handle(authority))


def parse_lookup(text: str, *, dev: bool) -> Query:
    """What a lookup may resolve: `parse_query`, then a handle that may be resolved (H-INV-1,
    H-TLD-1, H-TLD-2: `.test` only in development), a DID of a supported method (D-SYN-9) and
    valid for it (D-PLC-1, D-WEB-1..3). Raises `InvalidInput`; never touches the network."""
    query = parse_query(text)
    if query.kind == "handle":
        check_resolvable_handle(query.value, allow_test_tld=dev)
        return query
    method = did_method(query.value)
    if method not in SUPPORTED_DID_METHODS:
        raise UnsupportedDidMethod(f"did:{method} is not supported for accounts", "D-SYN-9")
    if method == "plc":
        check_plc_did(query.value)
    else:
        parse_did_web(query.value, dev=dev, allow_test_tld=dev)
    return query


# The lexicon's `datetime` (L-SYN-8): RFC 3339 and ISO 8601 at once, an upper-case `T`, whole
# seconds and any fraction, a zone of `Z` or `±hh:mm` (never `-00:00`), at most 64 characters.
_DATETIME_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,20})?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})",
    re.ASCII,
)
_DATETIME_MAX = 64
_EPOCH = 719_163  # 1970-01-01 as a proleptic Gregorian ordinal (0001-01-01 is 1)
_YEAR_ZERO = -365  # 0000-01-01's ordinal: year zero is a leap year
_CYCLE = 146_097  # days in 400 years: the calendar repeats, so year zero is year 400's twin


def datetime_seconds(text: str) -> float | None:
    """The lexicon `datetime` `text` names, in seconds since the Unix epoch; None when it is
    not one (the syntax above, and a date and time the calendar has: no month 13, no 30
    February, no hour 24, no second 60, and nothing before year zero once its zone is
    applied)."""
    match = _DATETIME_RE.fullmatch(text) if len(text) <= _DATETIME_MAX else None
    if match is None or text.endswith("-00:00"):
        return None
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    zone = match.group(8)
    zone_hours, zone_minutes = (0, 0) if zone == "Z" else (int(zone[1:3]), int(zone[4:]))
    if hour > 23 or minute > 59 or second > 59 or zone_hours > 23 or zone_minutes > 59:
        return None
    try:
        ordinal = datetime.date(year or 400, month, day).toordinal() - (0 if year else _CYCLE)
    except ValueError:
        return None
    offset = (zone_hours * 60 + zone_minutes) * 60 * (-1 if zone[0] == "-" else 1)
    moment = (ordinal - _EPOCH) * 86_400 + hour * 3600 + minute * 60 + second - offset
    if moment < (_YEAR_ZERO - _EPOCH) * 86_400:
        return None
    return moment + float(match.group(7) or 0)


# The lexicon's `cid` format (L-SYN-5): a CID's text, as indigo's ParseCID reads it; a CIDv0
# (`Qmb…`) is refused.
_CID_RE = re.compile(r"[a-zA-Z0-9+=]{8,256}", re.ASCII)


def is_valid_cid_text(text: str) -> bool:
    return _CID_RE.fullmatch(text) is not None and not text.startswith("Qmb")
