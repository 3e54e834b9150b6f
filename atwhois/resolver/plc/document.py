"""The DID document a verified state implies (P-DOC-1), and a semantic
comparison with what the directory serves: key encodings differ (the reference server serves
legacy keys, the live directory `Multikey`), JSON key order is not significant."""

from __future__ import annotations

from typing import Any

from ..keys import (
    LEGACY_KEY_TYPES,
    Curve,
    InvalidKey,
    PublicKey,
    b58encode,
    parse_did_key,
    parse_legacy_multibase,
    parse_multikey,
)
from .audit import Audit, Finding
from .operation import BadOperation, State, parse_operation

_DID_CONTEXT = "https://www.w3.org/ns/did/v1"
_MULTIKEY_CONTEXT = "https://w3id.org/security/multikey/v1"
_SUITE_CONTEXT = {
    Curve.P256: "https://w3id.org/security/suites/ecdsa-2019/v1",
    Curve.K256: "https://w3id.org/security/suites/secp256k1-2019/v1",
}
_LEGACY_TYPE = {curve: name for name, curve in LEGACY_KEY_TYPES.items()}


def build_document(did: str, state: State, *, legacy_keys: bool = False) -> dict[str, Any]:
    """P-DOC-1: the document the directory serves for a state, in the current shape
    (`Multikey`, fully qualified key ids), or with `legacy_keys` in the shape of the
    TypeScript reference server (@did-plc/lib 0.0.x: legacy key types carrying the
    uncompressed point, relative key ids, no multikey context)."""
    context = [_DID_CONTEXT] if legacy_keys else [_DID_CONTEXT, _MULTIKEY_CONTEXT]
    methods = []
    for name, did_key in state.verification_methods:
        try:
            key: PublicKey | None = parse_did_key(did_key)
        except InvalidKey:
            key = None  # P-OP-4: any did:key may sit here; unknown ones add no context
        if key is not None and _SUITE_CONTEXT[key.curve] not in context:
            context.append(_SUITE_CONTEXT[key.curve])
        method = {
            "id": f"{did}#{name}",
            "type": "Multikey",
            "controller": did,
            "publicKeyMultibase": did_key.removeprefix("did:key:"),
        }
        if legacy_keys and key is not None:
            method["id"] = f"#{name}"
            method["type"] = _LEGACY_TYPE[key.curve]
            method["publicKeyMultibase"] = "z" + b58encode(key.uncompressed)
        methods.append(method)
    return {
        "@context": context,
        "id": did,
        "alsoKnownAs": list(state.also_known_as),
        "verificationMethod": methods,
        "service": [
            {"id": f"#{name}", "type": service.type, "serviceEndpoint": service.endpoint}
            for name, service in state.services
        ],
    }


def state_data(did: str, state: State) -> dict[str, Any]:
    """The `/{did}/data` answer: the state in the operation's own field names."""
    return {
        "did": did,
        "verificationMethods": dict(state.verification_methods),
        "rotationKeys": list(state.rotation_keys),
        "alsoKnownAs": list(state.also_known_as),
        "services": {
            name: {"type": service.type, "endpoint": service.endpoint}
            for name, service in state.services
        },
    }


def state_from_data(data: dict[str, Any]) -> State | None:
    """`state_data` back (None if it is not one): through the op parser, one shape, one
    set of checks."""
    op = {
        "type": "plc_operation",
        "rotationKeys": data.get("rotationKeys"),
        "verificationMethods": data.get("verificationMethods"),
        "alsoKnownAs": data.get("alsoKnownAs"),
        "services": data.get("services"),
        "prev": None,
        "sig": "",
    }
    try:
        return parse_operation(op).state
    except BadOperation:
        return None


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
    return compare_state(audit.did, audit.state, served)


def compare_state(did: str, state: State | None, served: dict[str, Any] | None) -> list[Finding]:
    """What the directory serves against a verified state (None: tombstoned)."""
    if state is None:
        if served is not None:
            return [Finding("§10.6", "the log ends in a tombstone, yet a document is served")]
        return []
    if served is None:
        return [Finding("§10.6", "the log is live, yet the directory serves no document")]
    findings = []
    expected = state
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
