"""The compact form of a cache entry (issue 69): a verified binding kept near its information,
in every store and in the memory tier.

An entry is rebuilt on the way out from its parts where every part has the standard form
this module knows; any other entry is kept whole as before (`packing`), so nothing is ever
rebuilt differently from what was resolved: `encode` renders what it would decode and keeps
the compact form only when that is the very entry it was given.

- The name an entry is kept under says its handle or DID: neither is written again.
- A did:plc is its 15 bytes; a did:plc document of the directory's standard forms (today's
  `Multikey` form and the reference server's legacy one) is its handle, its key's bytes and
  its PDS endpoint; a document of any other form is kept whole, packed.
- Each method of a handle's resolution is one byte: its outcome and, where it failed as
  handles usually fail (no TXT record, no such name), which of the standard error texts
  it said, rebuilt from the handle.
- Times are kept exact; per-method timings are dropped: the report shows none for a kept
  binding. An entry with a text no form rebuilds (a refresh error, a claim, an unusual
  failure: the entries that did not verify) keeps them all, packed.

Never edit a table below (`_METHODS`, `_DOCUMENTS`, `_SOURCES`, `_ENDPOINTS`,
`_KEY_PREFIXES`): entries
written with it are read with it; add rows at the end.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from atwhois.resolver.keys import InvalidKey, b58decode, b58encode
from atwhois.resolver.untrusted import parse_json

from .packing import UnreadableEntry, pack, unpack

# The first byte of a compact entry, its kind: neither JSON's ('{') nor a zlib stream's (0x78).
# The two short kinds (issue 69) write 4 bytes an identity fewer for the common case: a
# handle naming one did:plc, its two methods' bytes in one; a did:plc document from the
# directory (its source not written) of a `Multikey` form, its key's length not written.
_HANDLE, _DOCUMENT, _HANDLE_OF_PLC, _DIRECTORY_DOCUMENT = 1, 2, 3, 4
KINDS = (_HANDLE, _DOCUMENT, _HANDLE_OF_PLC, _DIRECTORY_DOCUMENT)
_SHORT_KEY = 33  # a compressed point: the key of every `Multikey` form (CRYPTO-ENC-1)
_CHECKED_AT = struct.Struct(">d")  # when it was checked, as it was (answers' ages and windows)

# A handle method's standard forms: (outcome, whether it names the DID, error kind, error
# text with {h} for the handle). Index = the byte written.
_METHODS: list[tuple[str, bool, str | None, str | None]] = [
    ("ok", True, None, None),
    ("not_found", False, "NotFound", "no TXT record starts with did="),
    ("not_found", False, "NotFound", "_atproto.{h}: NXDOMAIN"),
    ("not_found", False, "NotFound", "_atproto.{h}: no TXT record (NODATA)"),
    ("not_found", False, "NotFound", "{h}: NXDOMAIN"),
    ("not_found", False, "NotFound", "{h}: no A record (NODATA)"),
    ("not_found", False, "NotFound", "https://{h}/.well-known/atproto-did: HTTP 404"),
]
_SOURCE_OF = {"dns": "_atproto.{h}", "https": "https://{h}/.well-known/atproto-did"}

_SUITES = [
    "https://w3id.org/security/suites/secp256k1-2019/v1",
    "https://w3id.org/security/suites/ecdsa-2019/v1",
]
_LEGACY_TYPES = ["EcdsaSecp256k1VerificationKey2019", "EcdsaSecp256r1VerificationKey2019"]
_SERVICE = (
    '"service":[{"id":"#atproto_pds","type":"AtprotoPersonalDataServer",'
    '"serviceEndpoint":"%(pds)s"}]}'
)
# The did:plc documents rebuilt from their parts: the directory's `Multikey` form (P-DOC-1)
# and the reference server's legacy one, for each curve. Index + 1 = the byte written (0:
# the document kept whole).
_DOCUMENTS: list[str] = [
    '{"@context":["https://www.w3.org/ns/did/v1","https://w3id.org/security/multikey/v1","'
    + suite
    + '"],"id":"%(did)s","alsoKnownAs":["at://%(handle)s"],"verificationMethod":[{"id":'
    '"%(did)s#atproto","type":"Multikey","controller":"%(did)s","publicKeyMultibase":'
    '"z%(key)s"}],' + _SERVICE
    for suite in _SUITES
] + [
    '{"@context":["https://www.w3.org/ns/did/v1","'
    + suite
    + '"],"id":"%(did)s","alsoKnownAs":["at://%(handle)s"],"verificationMethod":[{"id":'
    '"#atproto","type":"' + kind + '","controller":"%(did)s","publicKeyMultibase":'
    '"z%(key)s"}],' + _SERVICE
    for suite, kind in zip(_SUITES, _LEGACY_TYPES, strict=True)
]
# Where a document was fetched, less its DID (index + 1; 0: written out).
_SOURCES = ["https://plc.directory/"]
# How a PDS endpoint is written: (before, after) the part kept (index = the byte written).
_ENDPOINTS = [
    ("", ""),
    ("https://", ""),
    ("https://", ".host.bsky.network"),
    ("https://", ".us-east.host.bsky.network"),
    ("https://", ".us-west.host.bsky.network"),
]
# A document form's key: the multicodec its curve's key begins with (CRYPTO-ENC-1), not
# written (the form says which); the legacy forms' keys are bare points.
_KEY_PREFIXES = [b"\xe7\x01", b"\x80\x24", b"", b""]
_PLC_SKIPPED: dict[str, Any] = {
    "outcome": "skipped",
    "dids": [],
    "error": None,
    "error_kind": None,
    "ms": None,
    "source": None,
    "via": None,
}
_EVIDENCE_KEYS = set(_PLC_SKIPPED)
_PLC_PREFIX = "did:plc:"


def encode(key: str, fields: dict[str, Any], body: bytes | None) -> bytes | None:
    """The compact form of the entry kept under `key` (`fields`: `Entry`'s, but its body),
    or None when it has no compact form."""
    if fields["refresh_error"] or fields["revalidating"] or fields["changed_by"]:
        return None
    if fields["retry_at"] != 0.0:
        return None
    times = _times(fields["checked_at"], fields["fresh_until"], fields["stale_until"])
    if times is None:
        return None
    part = fields["part"]
    if key.startswith("h:") and body is None:
        written = _handle(key[2:], part)
    elif key.startswith("d:") and body is not None:
        written = _document(key[2:], part, body)
    else:
        return None
    if written is None:
        return None
    kind, rest = written
    return bytes([kind]) + times + rest


def decode(key: str, raw: bytes) -> tuple[dict[str, Any], bytes | None]:
    """`Entry`'s fields and body from the compact form of the entry under `key`."""
    try:
        return _decode(key, raw)
    except (IndexError, ValueError, KeyError, struct.error, InvalidKey) as err:
        raise UnreadableEntry(f"an unreadable compact cache entry: {err}") from None


def _decode(key: str, raw: bytes) -> tuple[dict[str, Any], bytes | None]:
    kind = raw[0]
    (checked_at,) = _CHECKED_AT.unpack_from(raw, 1)
    fresh, at = _varint(raw, 1 + _CHECKED_AT.size)
    stale, at = _varint(raw, at)
    fields: dict[str, Any] = {
        "checked_at": checked_at,
        "fresh_until": checked_at + fresh,
        "stale_until": checked_at + stale,
        "refresh_error": None,
        "retry_at": 0.0,
        "revalidating": None,
        "changed_by": None,
    }
    body: bytes | None = None
    if kind in (_HANDLE, _HANDLE_OF_PLC) and key.startswith("h:"):
        fields["part"], at = _read_handle(key[2:], raw, at, kind)
    elif kind in (_DOCUMENT, _DIRECTORY_DOCUMENT) and key.startswith("d:"):
        fields["part"], body, at = _read_document(key[2:], raw, at, kind)
    else:
        raise ValueError(f"kind {kind} under {key[:2]!r}")
    if at != len(raw):
        raise ValueError("bytes past the entry's end")
    return fields, body


# --- times ------------------------------------------------------------------------------


def _times(checked_at: Any, fresh_until: Any, stale_until: Any) -> bytes | None:
    """When it was checked, and its windows in whole seconds from then: only where adding
    them gives back the very times given (a policy's lifetimes are whole seconds). Kept
    exact: a window cut short by a millisecond showed in a kept answer's Cache-Control."""
    if not all(isinstance(t, float) for t in (checked_at, fresh_until, stale_until)):
        return None
    fresh, stale = round(fresh_until - checked_at), round(stale_until - checked_at)
    if fresh < 0 or stale < 0:
        return None
    if checked_at + fresh != fresh_until or checked_at + stale != stale_until:
        return None
    return _CHECKED_AT.pack(checked_at) + _uvarint(fresh) + _uvarint(stale)


# --- a handle's resolution ----------------------------------------------------------------


def _handle(handle: str, part: dict[str, Any]) -> tuple[int, bytes] | None:
    if set(part) != {"handle", "dns", "https"} or part["handle"] != handle:
        return None
    codes, dids = [], set()
    for method in ("dns", "https"):
        evidence = part[method]
        code = _method_code(handle, method, evidence)
        if code is None:
            return None
        codes.append(code)
        dids.update(evidence["dids"])
    if len(dids) > 1:
        return None
    named = [_did_bytes(did) for did in dids]
    if named and named[0][0] == 0:  # one did:plc: the methods' codes in a byte, its 15 bytes
        return _HANDLE_OF_PLC, bytes([codes[0] | codes[1] << 4]) + named[0][1:]
    return _HANDLE, bytes(codes) + b"".join(named)


def _method_code(handle: str, method: str, evidence: dict[str, Any]) -> int | None:
    if set(evidence) != _EVIDENCE_KEYS or evidence["via"] is not None:
        return None
    if evidence["source"] != _SOURCE_OF[method].replace("{h}", handle):
        return None
    for code, (outcome, names, kind, text) in enumerate(_METHODS):
        if evidence["outcome"] != outcome or evidence["error_kind"] != kind:
            continue
        if (len(evidence["dids"]) == 1) != names or (not names and evidence["dids"]):
            continue
        if evidence["error"] == (text.replace("{h}", handle) if text else None):
            return code
    return None


def _read_handle(handle: str, raw: bytes, at: int, kind: int) -> tuple[dict[str, Any], int]:
    did = None
    if kind == _HANDLE_OF_PLC:
        codes = bytes([raw[at] & 0xF, raw[at] >> 4])
        did, at = _read_did(b"\0" + raw[at + 1 : at + 16], 0)[0], at + 16
        if not any(_METHODS[code][1] for code in codes):
            raise ValueError("a handle entry's DID named by no method")
    else:
        codes = raw[at : at + 2]
        if len(codes) != 2:
            raise ValueError("a handle entry cut short")
        at += 2
        if any(_METHODS[code][1] for code in codes):
            did, at = _read_did(raw, at)
    part: dict[str, Any] = {"handle": handle}
    for method, code in zip(("dns", "https"), codes, strict=True):
        outcome, names, error_kind, text = _METHODS[code]
        part[method] = {
            "outcome": outcome,
            "dids": [did] if names else [],
            "error": text.replace("{h}", handle) if text else None,
            "error_kind": error_kind,
            "ms": None,
            "source": _SOURCE_OF[method].replace("{h}", handle),
            "via": None,
        }
    return part, at


# --- a DID's document ---------------------------------------------------------------------


def _document(did: str, part: dict[str, Any], body: bytes) -> tuple[int, bytes] | None:
    if set(part) != {"did", "evidence", "plc", "plc_findings", "rotation_keys", "history"}:
        return None
    if part["did"] != did or part["plc"] != _PLC_SKIPPED or part["history"] is not None:
        return None
    if part["plc_findings"] or part["rotation_keys"]:
        return None
    evidence = part["evidence"]
    if set(evidence) != _EVIDENCE_KEYS or evidence["via"] is not None:
        return None
    if evidence["outcome"] != "ok" or evidence["dids"] != [did] or evidence["error"]:
        return None
    source = evidence["source"]
    if evidence["error_kind"] is not None or not isinstance(source, str):
        return None
    if not source.endswith(did):
        return None
    prefix = source[: -len(did)]
    parts = _standard_parts(did, body) if did.startswith(_PLC_PREFIX) else None
    if parts is not None:
        number, handle, key, endpoint = parts
        if prefix == _SOURCES[0] and number <= 2 and len(key) == _SHORT_KEY:
            return _DIRECTORY_DOCUMENT, bytes([number]) + _text_bytes(handle) + key + endpoint
        written = bytes([number]) + _text_bytes(handle) + _uvarint(len(key)) + key + endpoint
    else:  # any other document: kept whole
        packed = pack(body)
        written = b"\0" + _uvarint(len(packed)) + packed
    source_form = (
        bytes([_SOURCES.index(prefix) + 1]) if prefix in _SOURCES else b"\0" + _text_bytes(prefix)
    )
    return _DOCUMENT, source_form + written


def _standard_parts(did: str, body: bytes) -> tuple[int, str, bytes, bytes] | None:
    """A did:plc document of a standard form as its parts: the form's number, the handle,
    the key's bytes (less the multicodec its form says) and the PDS endpoint's bytes."""
    try:
        document = parse_json(body)
        (alias,) = document["alsoKnownAs"]
        (method,) = document["verificationMethod"]
        (service,) = document["service"]
        multibase, endpoint = method["publicKeyMultibase"], service["serviceEndpoint"]
    except (ValueError, KeyError, TypeError):
        return None
    if not (isinstance(alias, str) and alias.startswith("at://")):
        return None
    if not (isinstance(multibase, str) and multibase.startswith("z")):
        return None
    if not isinstance(endpoint, str):
        return None
    values = {"did": did, "handle": alias[5:], "key": multibase[1:], "pds": endpoint}
    rebuilt = (
        n for n, template in enumerate(_DOCUMENTS, 1) if (template % values).encode() == body
    )
    number = next(rebuilt, None)
    if number is None:
        return None
    try:
        key = b58decode(multibase[1:])
    except InvalidKey:
        return None
    prefix = _KEY_PREFIXES[number - 1]
    if b58encode(key) != multibase[1:] or not key.startswith(prefix):
        return None
    return number, alias[5:], key[len(prefix) :], _endpoint_bytes(endpoint)


def _endpoint_bytes(endpoint: str) -> bytes:
    for form in range(len(_ENDPOINTS) - 1, 0, -1):
        before, after = _ENDPOINTS[form]
        if endpoint.startswith(before) and endpoint.endswith(after):
            kept = endpoint[len(before) : len(endpoint) - len(after)]
            if kept:
                return bytes([form]) + _text_bytes(kept)
    return b"\0" + _text_bytes(endpoint)


def _read_document(did: str, raw: bytes, at: int, kind: int) -> tuple[dict[str, Any], bytes, int]:
    if kind == _DIRECTORY_DOCUMENT:
        prefix = _SOURCES[0]
    else:
        source_form, at = raw[at], at + 1
        if source_form:
            prefix = _SOURCES[source_form - 1]
        else:
            prefix, at = _read_text(raw, at)
    form, at = raw[at], at + 1
    if form == 0 and kind == _DOCUMENT:
        size, at = _varint(raw, at)
        body = unpack(raw[at : at + size])
        at += size
    else:
        if kind == _DIRECTORY_DOCUMENT and form not in (1, 2):
            raise ValueError(f"form {form} of a directory's document")
        handle, at = _read_text(raw, at)
        size = _SHORT_KEY
        if kind == _DOCUMENT:
            size, at = _varint(raw, at)
        packed = raw[at : at + size]
        if len(packed) != size:
            raise ValueError("a key cut short")
        key, at = b58encode(_KEY_PREFIXES[form - 1] + packed), at + size
        endpoint_form, at = raw[at], at + 1
        kept, at = _read_text(raw, at)
        before, after = _ENDPOINTS[endpoint_form]
        values = {"did": did, "handle": handle, "key": key, "pds": before + kept + after}
        body = (_DOCUMENTS[form - 1] % values).encode()
    part: dict[str, Any] = {
        "did": did,
        "evidence": {
            "outcome": "ok",
            "dids": [did],
            "error": None,
            "error_kind": None,
            "ms": None,
            "source": prefix + did,
            "via": None,
        },
        "plc": dict(_PLC_SKIPPED),
        "plc_findings": [],
        "rotation_keys": [],
        "history": None,
    }
    return part, body, at


# --- DIDs, texts, numbers -----------------------------------------------------------------


# did:plc's base32 (RFC 4648's alphabet, lower case) as the digits `int` reads in base 32,
# any other byte as one it refuses: a name read ten times faster than by `base64.b32decode`
# (the memory tier and SQLite pack a did:plc key on each lookup)
_PLC_DIGITS = bytes(
    b"0123456789abcdefghijklmnopqrstuv"[b"abcdefghijklmnopqrstuvwxyz234567".index(byte)]
    if byte in b"abcdefghijklmnopqrstuvwxyz234567"
    else ord("!")
    for byte in range(256)
)


def plc_bytes(did: str) -> bytes | None:
    """A did:plc's 15 bytes, where its name is the lower-case base32 of them (and `plc_did`
    gives it back); None for any other DID."""
    name = did[len(_PLC_PREFIX) :]
    if not did.startswith(_PLC_PREFIX) or len(name) != 24:
        return None
    try:  # 24 digits are 120 bits: each such name is one 15-byte string, and back
        return int(name.encode().translate(_PLC_DIGITS), 32).to_bytes(15, "big")
    except ValueError:  # a byte not of the alphabet (upper case, padding, not ASCII)
        return None


def plc_did(packed: bytes) -> str:
    """The did:plc of 15 bytes (`plc_bytes`)."""
    return _PLC_PREFIX + base64.b32encode(packed).decode().lower()


def _did_bytes(did: str) -> bytes:
    """A did:plc as its 15 bytes (0 first), any other DID as its text (1 first)."""
    packed = plc_bytes(did)
    return b"\1" + _text_bytes(did) if packed is None else b"\0" + packed


def _read_did(raw: bytes, at: int) -> tuple[str, int]:
    if raw[at] == 0:
        packed = raw[at + 1 : at + 16]
        if len(packed) != 15:
            raise ValueError("a DID cut short")
        return plc_did(packed), at + 16
    return _read_text(raw, at + 1)


def _text_bytes(text: str) -> bytes:
    data = text.encode()
    return _uvarint(len(data)) + data


def _read_text(raw: bytes, at: int) -> tuple[str, int]:
    size, at = _varint(raw, at)
    data = raw[at : at + size]
    if len(data) != size:
        raise ValueError("a text cut short")
    return data.decode(), at + size


def _uvarint(number: int) -> bytes:
    out = bytearray()
    while number >= 0x80:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _varint(raw: bytes, at: int) -> tuple[int, int]:
    number, shift = 0, 0
    while True:
        byte = raw[at]
        at += 1
        number |= (byte & 0x7F) << shift
        if byte < 0x80:
            return number, at
        shift += 7
        if shift > 63:
            raise ValueError("a number too long")
