"""DID document -> atproto data (docs/spec.md: DOC-*). Pure functions over parsed JSON.

A document that cannot be trusted at all (not an object, wrong `id`, malformed arrays)
raises `InvalidData`. Problems that leave the account usable but "likely broken" (no
signing key, no valid PDS) are reported as warnings, never as a crash (DOC-KEY-4, DOC-PDS-3).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .errors import InvalidData, MalformedAnswer
from .keys import LEGACY_KEY_TYPES, InvalidKey, PublicKey, parse_legacy_multibase, parse_multikey
from .syntax import is_valid_handle
from .untrusted import DuplicateKey, parse_json

PDS_SERVICE_TYPE = "AtprotoPersonalDataServer"
KEPT_ENTRIES = 16  # aliases and services a report lists (the document itself has them all)


@dataclass(frozen=True, slots=True)
class Service:
    id: str
    type: str
    endpoint: str


@dataclass(frozen=True, slots=True)
class AtprotoData:
    """What atproto needs from a DID document, and what was wrong with it."""

    did: str
    also_known_as: tuple[str, ...]
    declared_handle: str | None  # DOC-AKA-1: first valid at:// handle, lowercased
    signing_key: PublicKey | None
    pds: str | None
    services: tuple[Service, ...]
    warnings: tuple[str, ...] = field(default=())


def parse_json_document(did: str, body: bytes, *, dev: bool = False) -> tuple[bytes, AtprotoData]:
    """Decode a document body and extract its atproto data (DOC-ID-1 checked). Returns the
    document as UTF-8 JSON bytes (the body as served, unless it came in another encoding)
    and the data: the decoded document is held only while it is read, since a stranger's
    64 KiB of JSON decodes to several times that."""
    try:
        document = parse_json(body)
    except DuplicateKey as err:  # deliberate, not a broken answer: it confirms the document bad
        raise InvalidData(f"DID document is ambiguous: {err}") from None
    except ValueError as err:
        raise MalformedAnswer(f"DID document is not JSON: {err}") from None
    data = extract(did, document, dev=dev)
    return body if _plain_utf8(body) else json.dumps(document).encode(), data


def _plain_utf8(body: bytes) -> bool:
    """UTF-8 without a byte-order mark: bytes that can go into a UTF-8 answer as they are."""
    if body.startswith(b"\xef\xbb\xbf"):
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def extract(did: str, document: Any, *, dev: bool = False) -> AtprotoData:
    """The atproto data of `document`; `dev` also accepts an http:// PDS (DOC-PDS-2)."""
    if not isinstance(document, dict):
        raise InvalidData("DID document is not a JSON object")
    if document.get("id") != did:  # DOC-ID-1
        raise InvalidData(f"DID document id {document.get('id')!r} is not {did} [DOC-ID-1]")
    aliases = _string_list(document, "alsoKnownAs")
    warnings: list[str] = []
    key, legacy = _signing_key(did, _object_list(document, "verificationMethod"))
    if key is None:
        warnings.append("no_signing_key")  # DOC-KEY-4
    elif legacy:
        warnings.append("legacy_key_format")  # DOC-KEY-3
    services = _services(_object_list(document, "service"))
    pds = _pds(services, warnings, dev=dev)
    # The handle and the PDS come from every entry; the report keeps the first few of
    # each list: a stranger's document may hold thousands, and a cache holds many reports.
    if len(aliases) > KEPT_ENTRIES or len(services) > KEPT_ENTRIES:
        warnings.append("long_document_lists")
    return AtprotoData(
        did=did,
        also_known_as=tuple(aliases[:KEPT_ENTRIES]),
        declared_handle=declared_handle(aliases),
        signing_key=key,
        pds=pds,
        services=tuple(services[:KEPT_ENTRIES]),
        warnings=tuple(warnings),
    )


def declared_handle(aliases: list[str]) -> str | None:
    """DOC-AKA-1: the first `at://` entry that is exactly a valid handle; the rest ignored."""
    for alias in aliases:
        if alias.startswith("at://") and is_valid_handle(alias[len("at://") :]):
            return alias[len("at://") :].lower()
    return None


def _fragment(ident: str, did: str) -> str | None:
    """DOC-KEY-2: `#frag` and `did#frag` name the same entry; another DID's id does not."""
    if ident.startswith("#"):
        return ident[1:]
    if ident.startswith(did + "#"):
        return ident[len(did) + 1 :]
    return None


def verification_key(document: Any, did: str, key_id: str) -> PublicKey | None:
    """The key of the document's `#key_id` verification method (DOC-KEY-1..3, for any
    method: `atproto`, `atproto_label`, …), None when it holds no valid one."""
    if not isinstance(document, dict) or document.get("id") != did:
        return None
    try:
        methods = _object_list(document, "verificationMethod")
    except InvalidData:
        return None
    return _signing_key(did, methods, key_id)[0]


def _signing_key(
    did: str, methods: list[dict[str, Any]], key_id: str = "atproto"
) -> tuple[PublicKey | None, bool]:
    """DOC-KEY-1..3: the first valid `#key_id` method controlled by the DID, and whether it
    is written in a legacy form."""
    for method in methods:
        ident, kind = method.get("id"), method.get("type")
        multibase, controller = method.get("publicKeyMultibase"), method.get("controller")
        if not (isinstance(ident, str) and _fragment(ident, did) == key_id):
            continue
        if controller != did or not isinstance(multibase, str):
            continue
        try:
            if kind == "Multikey":
                return parse_multikey(multibase), False
            if isinstance(kind, str) and kind in LEGACY_KEY_TYPES:
                return parse_legacy_multibase(LEGACY_KEY_TYPES[kind], multibase), True
        except InvalidKey:
            continue
    return None, False


def _services(entries: list[dict[str, Any]]) -> list[Service]:
    """DOC-MISC-1: entries of any type are kept; malformed ones are skipped."""
    services = []
    for entry in entries:
        ident, kind, endpoint = entry.get("id"), entry.get("type"), entry.get("serviceEndpoint")
        if isinstance(ident, str) and isinstance(kind, str) and isinstance(endpoint, str):
            services.append(Service(ident, kind, endpoint))
    return services


def _pds(services: list[Service], warnings: list[str], *, dev: bool) -> str | None:
    """DOC-PDS-1/2: the first `#atproto_pds` of the right type, an origin-only URL."""
    for service in services:
        fragment = service.id.rsplit("#", 1)[-1] if "#" in service.id else None
        if fragment != "atproto_pds" or service.type != PDS_SERVICE_TYPE:
            continue
        if is_origin_url(service.endpoint, allow_http=dev):
            return service.endpoint
        warnings.append("invalid_pds_endpoint")
        return None
    warnings.append("no_pds")  # DOC-PDS-3
    return None


def is_origin_url(url: str, *, allow_http: bool) -> bool:
    """DOC-PDS-2: https (http only in development), a hostname, an optional port; no
    userinfo, path, query or fragment."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises on a malformed port
    except ValueError:
        return False
    return (
        (parts.scheme == "https" or (allow_http and parts.scheme == "http"))
        and bool(parts.hostname)
        and parts.username is None
        and parts.path in ("", "/")
        and not parts.query
        and not parts.fragment
        and "#" not in url
        and "?" not in url
    )


def _string_list(document: dict[str, Any], key: str) -> list[str]:
    value = document.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidData(f"DID document {key} is not a list of strings")
    return value


def _object_list(document: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = document.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidData(f"DID document {key} is not a list")
    return [v for v in value if isinstance(v, dict)]
