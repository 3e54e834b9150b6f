"""PLC operations: their three shapes (P-OP-1..3) and the DID state they produce (P-STATE-1).

`parse_operation` takes untrusted JSON and returns an `Operation` or raises `BadOperation`
naming the rule; it never lets a `KeyError` or `TypeError` out.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from ..errors import AtwhoisError

OpType = Literal["plc_operation", "plc_tombstone", "create"]

_PLC_OP_KEYS = frozenset(
    {"type", "rotationKeys", "verificationMethods", "alsoKnownAs", "services", "prev", "sig"}
)
_TOMBSTONE_KEYS = frozenset({"type", "prev", "sig"})
_SERVICE_KEYS = frozenset({"type", "endpoint"})
_CREATE_KEYS = frozenset({"type", "signingKey", "recoveryKey", "handle", "service", "prev", "sig"})


class BadOperation(AtwhoisError, ValueError):
    """A PLC operation whose shape breaks a rule (P-OP-*); `rule` names it."""

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


# Named tuples, not frozen dataclasses: an export check builds three of these per op, and a
# frozen dataclass sets each field through object.__setattr__ (0.63 against 0.25 us for a
# State).
class Service(NamedTuple):
    type: str
    endpoint: str


class State(NamedTuple):
    """P-STATE-1: what a regular (or normalized legacy) operation sets."""

    rotation_keys: tuple[str, ...]
    verification_methods: tuple[tuple[str, str], ...]  # (id, did:key), in map order
    also_known_as: tuple[str, ...]
    services: tuple[tuple[str, Service], ...]  # (id, service), in map order

    def method(self, name: str) -> str | None:
        return dict(self.verification_methods).get(name)

    def service(self, name: str) -> Service | None:
        return dict(self.services).get(name)


class Operation(NamedTuple):
    type: OpType
    prev: str | None
    sig: str
    state: State | None  # None for a tombstone

    @property
    def signers(self) -> tuple[str, ...]:
        """Keys that may sign the *next* op: none after a tombstone (P-SIG-5)."""
        return self.state.rotation_keys if self.state else ()


def _strings(value: Any, what: str, rule: str) -> tuple[str, ...]:
    if type(value) is not list:
        raise BadOperation(f"{what} is not a list of strings", rule)
    for item in value:
        if type(item) is not str:
            raise BadOperation(f"{what} is not a list of strings", rule)
    return tuple(value)


def _string(value: Any, what: str, rule: str) -> str:
    if not isinstance(value, str):
        raise BadOperation(f"{what} is not a string", rule)
    return value


def _check_keys(op: dict[str, Any], allowed: frozenset[str], rule: str) -> None:
    if op.keys() == allowed:
        return
    missing, extra = allowed - op.keys(), op.keys() - allowed
    if missing:
        raise BadOperation(f"missing field(s): {', '.join(sorted(missing))}", rule)
    if extra:
        raise BadOperation(f"unexpected field(s): {', '.join(sorted(extra))}", rule)


def _with_prefix(text: str, prefix: str) -> str:
    return text if text.startswith(prefix) else prefix + text


def parse_operation(op: Any) -> Operation:
    if not isinstance(op, dict):
        raise BadOperation("operation is not a JSON object", "P-OP-1")
    kind = op.get("type")
    if kind == "plc_operation":
        _check_keys(op, _PLC_OP_KEYS, "P-OP-1")
        methods, services = op["verificationMethods"], op["services"]
        if type(methods) is not dict:
            raise BadOperation("verificationMethods is not a map of strings", "P-OP-1")
        for method in methods.values():
            if type(method) is not str:
                raise BadOperation("verificationMethods is not a map of strings", "P-OP-1")
        if type(services) is not dict:
            raise BadOperation("services is not a map", "P-OP-1")
        parsed_services = []
        for name, entry in services.items():
            if type(entry) is not dict or entry.keys() != _SERVICE_KEYS:
                raise BadOperation(f"service {name!r} is not {{type, endpoint}}", "P-OP-1")
            kind, endpoint = entry["type"], entry["endpoint"]
            if type(kind) is not str or type(endpoint) is not str:
                raise BadOperation(f"service {name!r} is not {{type, endpoint}}", "P-OP-1")
            parsed_services.append((name, Service(kind, endpoint)))
        prev = op["prev"]
        if prev is not None and not isinstance(prev, str):
            raise BadOperation("prev is neither a CID string nor null", "P-OP-1")
        state = State(
            rotation_keys=_strings(op["rotationKeys"], "rotationKeys", "P-OP-1"),
            verification_methods=tuple(methods.items()),
            also_known_as=_strings(op["alsoKnownAs"], "alsoKnownAs", "P-OP-1"),
            services=tuple(parsed_services),
        )
        return Operation("plc_operation", prev, _string(op["sig"], "sig", "P-OP-1"), state)
    if kind == "plc_tombstone":
        _check_keys(op, _TOMBSTONE_KEYS, "P-OP-2")
        prev = _string(op["prev"], "a tombstone's prev", "P-OP-2")
        return Operation("plc_tombstone", prev, _string(op["sig"], "sig", "P-OP-2"), None)
    if kind == "create":
        _check_keys(op, _CREATE_KEYS, "P-OP-3")
        if op["prev"] is not None:
            raise BadOperation("a legacy create op must have prev: null", "P-OP-3")
        signing = _string(op["signingKey"], "signingKey", "P-OP-3")
        recovery = _string(op["recoveryKey"], "recoveryKey", "P-OP-3")
        handle = _string(op["handle"], "handle", "P-OP-3")
        handle = handle.removeprefix("http://").removeprefix("https://")
        endpoint = _string(op["service"], "service", "P-OP-3")
        if not endpoint.startswith(("http://", "https://")):
            endpoint = "https://" + endpoint
        state = State(  # P-OP-3 normalization, as the reference implementation does it
            rotation_keys=(recovery, signing),
            verification_methods=(("atproto", signing),),
            also_known_as=(_with_prefix(handle, "at://"),),
            services=(("atproto_pds", Service("AtprotoPersonalDataServer", endpoint)),),
        )
        return Operation("create", None, _string(op["sig"], "sig", "P-OP-3"), state)
    raise BadOperation(f"unknown operation type {kind!r}", "P-OP-1")
