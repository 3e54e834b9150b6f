"""The DID document a verified state implies (spec checklist section 11), and a semantic
comparison with what the directory serves: key encodings differ (the reference server serves
legacy keys, the live directory `Multikey`), JSON key order is not significant."""

from __future__ import annotations

from typing import Any

from ..keys import (
    LEGACY_KEY_TYPES,
    InvalidKey,
    parse_did_key,
    parse_legacy_multibase,
    parse_multikey,
)
from .audit import Audit, Finding
from .operation import State

_CONTEXT = ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"]


def build_document(did: str, state: State) -> dict[str, Any]:
    return {
        "@context": _CONTEXT,
        "id": did,
        "alsoKnownAs": list(state.also_known_as),
        "verificationMethod": [
            {
                "id": f"{did}#{name}",
                "type": "Multikey",
                "controller": did,
                "publicKeyMultibase": key.removeprefix("did:key:"),
            }
            for name, key in state.verification_methods
        ],
        "service": [
            {"id": f"#{name}", "type": service.type, "serviceEndpoint": service.endpoint}
            for name, service in state.services
        ],
    }


def _canonical_did_key(did_key: str) -> str:
    try:
        return parse_did_key(did_key).did_key
    except InvalidKey:
        return did_key  # P-OP-4: any did:key may sit here; compare it as written


def _served_key(method: dict[str, Any]) -> str | None:
    multibase, kind = method.get("publicKeyMultibase"), method.get("type")
    if not isinstance(multibase, str):
        return None
    try:
        if kind == "Multikey":
            return parse_multikey(multibase).did_key
        if isinstance(kind, str) and kind in LEGACY_KEY_TYPES:
            return parse_legacy_multibase(LEGACY_KEY_TYPES[kind], multibase).did_key
    except InvalidKey:
        pass
    return "did:key:" + multibase


def _fragment(ident: Any, did: str) -> str | None:
    if not isinstance(ident, str):
        return None
    if ident.startswith("#"):
        return ident[1:]
    return ident[len(did) + 1 :] if ident.startswith(did + "#") else None


def compare(audit: Audit, served: dict[str, Any] | None) -> list[Finding]:
    """What the directory serves against what the log proves; empty when they agree."""
    did = audit.did
    if audit.state is None:
        if served is not None:
            return [Finding("§10.6", "the log ends in a tombstone, yet a document is served")]
        return []
    if served is None:
        return [Finding("§10.6", "the log is live, yet the directory serves no document")]
    findings = []
    expected = audit.state
    if served.get("id") != did:
        findings.append(Finding("§11", f"served id {served.get('id')!r} is not {did}"))
    if served.get("alsoKnownAs", []) != list(expected.also_known_as):
        findings.append(Finding("§11", "served alsoKnownAs differs from the log's"))
    methods = served.get("verificationMethod") or []
    served_keys = {
        _fragment(m.get("id"), did): _served_key(m) for m in methods if isinstance(m, dict)
    }
    log_keys = {name: _canonical_did_key(key) for name, key in expected.verification_methods}
    if served_keys != log_keys:
        findings.append(
            Finding("§11", f"served keys {served_keys} differ from the log's {log_keys}")
        )
    services = served.get("service") or []
    served_services = {
        _fragment(s.get("id"), did): (s.get("type"), s.get("serviceEndpoint"))
        for s in services
        if isinstance(s, dict)
    }
    log_services = {name: (s.type, s.endpoint) for name, s in expected.services}
    if served_services != log_services:
        findings.append(Finding("§11", "served services differ from the log's"))
    return findings
