"""What one audit check records, and the findings between two checks. Pure functions."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from resolver import Identity, Outcome, Status


@dataclass(frozen=True, slots=True)
class Check:
    identifier: str
    checked_at: float
    status: str
    did: str | None
    handle: str  # verified, or handle.invalid
    declared_handle: str | None
    pds: str | None
    signing_key: str | None
    rotation_keys: tuple[str, ...]
    method: str  # which methods named the DID: "dns", "https", "both" or "none"
    conflict: bool
    duration_ms: float
    error: str | None = None
    evidence: dict[str, str] = field(default_factory=dict)  # method -> outcome

    @property
    def transient(self) -> bool:
        return self.status == Status.UNAVAILABLE

    @classmethod
    def of(cls, identifier: str, identity: Identity, at: float, duration_ms: float) -> Check:
        ok = {
            name
            for name, e in (("dns", identity.dns), ("https", identity.https))
            if e.outcome is Outcome.OK
        }
        method = "both" if len(ok) == 2 else (ok.pop() if ok else "none")
        return cls(
            identifier=identifier,
            checked_at=at,
            status=str(identity.status),
            did=identity.did,
            handle=identity.handle,
            declared_handle=identity.declared_handle,
            pds=identity.pds,
            signing_key=identity.signing_key,
            rotation_keys=identity.rotation_keys,
            method=method,
            conflict="dns_https_conflict" in identity.warnings,
            duration_ms=round(duration_ms, 2),
            error=identity.error,
            evidence={
                "dns": str(identity.dns.outcome),
                "https": str(identity.https.outcome),
                "did_doc": str(identity.did_doc.outcome),
                "plc_log": str(identity.plc_log.outcome),
            },
        )

    def to_json(self) -> dict[str, Any]:
        # Not dataclasses.asdict, which deep-copies: a check is written once per audit.
        data = {name: getattr(self, name) for name in self.__slots__}
        return {**data, "rotation_keys": list(self.rotation_keys)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Check:
        return cls(**{**data, "rotation_keys": tuple(data["rotation_keys"])})

    def encode(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Finding:
    identifier: str
    kind: str
    detail: str
    at: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def compare(
    previous: Check | None, current: Check, failures: int, unreachable_after: int
) -> tuple[list[Finding], int]:
    """The findings of `current` against the last check that reached the upstream, and the
    new count of consecutive transient failures. One transient failure is not news; the
    `unreachable_after`-th in a row is, once."""

    def found(kind: str, detail: str) -> Finding:
        return Finding(current.identifier, kind, detail, current.checked_at)

    if current.transient:
        failures += 1
        if failures == unreachable_after:
            return [
                found("unreachable", f"{failures} checks in a row failed: {current.error}")
            ], failures
        return [], failures
    findings = []
    if failures >= unreachable_after:
        findings.append(found("reachable_again", f"after {failures} failed checks"))
    if previous is None:
        return findings, 0
    was, now = previous.status == Status.VERIFIED, current.status == Status.VERIFIED
    if was and not now:
        findings.append(found("became_invalid", f"{current.status}: {current.error}"))
    if now and not was:
        findings.append(found("recovered", f"verified again (was {previous.status})"))
    if current.status == Status.DID_DEACTIVATED and previous.status != Status.DID_DEACTIVATED:
        findings.append(found("deactivated", f"{current.did} is tombstoned"))
    changes = (
        ("did_changed", previous.did, current.did),
        ("handle_changed", previous.declared_handle, current.declared_handle),
        ("pds_changed", previous.pds, current.pds),
        ("signing_key_rotated", previous.signing_key, current.signing_key),
    )
    for kind, before, after in changes:
        if before is not None and after is not None and before != after:
            findings.append(found(kind, f"{before} -> {after}"))
    if (
        previous.rotation_keys
        and current.rotation_keys
        and (previous.rotation_keys != current.rotation_keys)
    ):
        findings.append(
            found(
                "rotation_keys_changed",
                f"{len(previous.rotation_keys)} -> {len(current.rotation_keys)} keys",
            )
        )
    if "none" not in (previous.method, current.method) and previous.method != current.method:
        findings.append(found("method_changed", f"{previous.method} -> {current.method}"))
    if current.conflict and not previous.conflict:
        findings.append(found("conflict_appeared", "DNS and HTTPS name different DIDs"))
    if previous.conflict and not current.conflict:
        findings.append(found("conflict_cleared", "DNS and HTTPS agree again"))
    return findings, 0
