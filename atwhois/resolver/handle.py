"""Handle -> DID rules for the two methods (docs/spec.md: H-DNS-*, H-WK-*). Pure functions:
the DNS answer and the HTTPS body come in as data, a DID or a classified error comes out.
"""

from __future__ import annotations

from .errors import AmbiguousHandle, InvalidData, InvalidInput, NotFound
from .syntax import SUPPORTED_DID_METHODS, check_plc_did, did_method, parse_did

TXT_PREFIX = b"did="  # H-DNS-2
WELL_KNOWN_PATH = "/.well-known/atproto-did"  # H-WK-1
WELL_KNOWN_MAX_BYTES = 2048  # H-WK-7
_MAX_DNS_NAME = 253  # H-DNS-5


def txt_name(handle: str) -> str | None:
    """H-DNS-1: `_atproto.<handle>`, or None when that name is too long for DNS (H-DNS-5)."""
    name = f"_atproto.{handle}"
    return name if len(name) <= _MAX_DNS_NAME else None


def account_did(text: str) -> str:
    """A DID a handle may point at: valid syntax, and a method blessed for accounts."""
    try:
        did = parse_did(text)
        if did_method(did) not in SUPPORTED_DID_METHODS:
            raise InvalidData(f"{did}: DID method not supported for accounts [D-SYN-9]")
        if did_method(did) == "plc":
            check_plc_did(did)
    except InvalidInput as err:
        raise InvalidData(f"not a valid DID: {err}") from None
    return did


def dids_in_txt(records: list[list[bytes]]) -> list[str]:
    """The distinct values after `did=`, sorted (what the evidence shows).

    H-DNS-4: a record's character-strings are joined first. H-DNS-2: values not starting
    with `did=` are ignored. H-DNS-3: identical DIDs collapse.
    """
    values = {b"".join(strings) for strings in records}
    return sorted(
        v[len(TXT_PREFIX) :].decode("ascii", "replace") for v in values if v.startswith(TXT_PREFIX)
    )


def did_from_txt(records: list[list[bytes]]) -> str:
    """The DID named by a handle's TXT records: exactly one distinct `did=` value (H-DNS-3),
    and a valid account DID."""
    dids = dids_in_txt(records)
    if not dids:
        raise NotFound("no TXT record starts with did=")
    if len(dids) > 1:
        raise AmbiguousHandle(f"TXT records name {len(dids)} different DIDs: {', '.join(dids)}")
    return account_did(dids[0])


def did_from_well_known(body: bytes) -> str:
    """H-WK-2/4: the body is only the DID, give or take surrounding whitespace."""
    try:
        text = body.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise InvalidData("well-known body is not UTF-8 text") from None
    if not text:
        raise InvalidData("well-known body is empty")
    if not text.startswith("did:"):
        preview = text[:40].replace("\n", " ")
        raise InvalidData(f"well-known body is not a DID (starts {preview!r})")
    return account_did(text)
