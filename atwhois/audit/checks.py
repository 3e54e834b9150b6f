"""What one audit check records: the facts of one lookup that a later check is compared
with (`findings.compare`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from atwhois.foundation import iso_time
from atwhois.resolver import Identity, Outcome, Status


def iso(at: float | None) -> str | None:
    """Unix seconds as ISO 8601 (UTC, milliseconds): every time atwhois writes out."""
    return None if at is None else iso_time(at)


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
    upstream: str | None = None  # a transient failure: the upstream that failed
    pds_check: str | None = None  # with check_pds: what the PDS said (`PdsCheck.outcome`)
    pds_detail: str | None = None  # its status at the PDS, or why the check failed
    dnssec: str | None = None  # with dnssec: what DNSSEC said of the TXT answer (its state)
    dnssec_detail: str | None = None  # why, when not secure

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
            upstream=failed_upstream(identity) if identity.status is Status.UNAVAILABLE else None,
            pds_check=identity.pds_check.outcome if identity.pds_check else None,
            pds_detail=_pds_detail(identity),
            dnssec=identity.dns.dnssec.state if identity.dns.dnssec else None,
            dnssec_detail=identity.dns.dnssec.reason if identity.dns.dnssec else None,
        )

    def _fields(self) -> dict[str, Any]:
        # Not dataclasses.asdict, which deep-copies: a check is written once per audit.
        data = {name: getattr(self, name) for name in self.__slots__}
        return {**data, "rotation_keys": list(self.rotation_keys)}

    def to_json(self) -> dict[str, Any]:
        """For people and programs: the time in ISO 8601."""
        return {**self._fields(), "checked_at": iso(self.checked_at)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Check:
        """From the stored form (`encode`)."""
        return cls(**{**data, "rotation_keys": tuple(data["rotation_keys"])})

    def encode(self) -> str:
        """The stored form: the time as Unix seconds, which orders and subtracts."""
        return json.dumps(self._fields(), separators=(",", ":"))


def _pds_detail(identity: Identity) -> str | None:
    check = identity.pds_check
    if check is None:
        return None
    return check.error or check.status


def failed_upstream(identity: Identity) -> str | None:
    """Which upstream a transient failure is on: the PLC directory or web host that served
    no document or log, else the DNS servers, else the handle's web host. Many identities
    failing on one of them in one run is one outage."""
    for evidence in (identity.did_doc, identity.plc_log, identity.dns, identity.https):
        if evidence.outcome is Outcome.FAILED:
            if evidence is identity.dns:
                return "dns"
            return urlsplit(evidence.source or "").netloc or None
    return None
