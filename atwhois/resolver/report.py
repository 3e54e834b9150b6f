"""The parts a lookup is made of, and the pure composition of an `Identity` from them.

A lookup is two resolutions: the handle's (DNS and HTTPS) and the DID document's. The
resolver produces them, the cache stores them apart (a handle entry, a DID entry), and
`compose` turns any pair into the report with the verdict tables — so an answer assembled
from cached parts says exactly what a fresh one would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import verdict
from .document import AtprotoData, parse_json_document
from .errors import InvalidData
from .identity import SKIPPED, Evidence, Identity, LogSummary
from .outcome import Outcome, Status
from .syntax import Query
from .untrusted import parse_json
from .verdict import Binding, HandleAnswer, Step


@dataclass(frozen=True, slots=True)
class HandleResolution:
    """DNS TXT and HTTPS well-known for one handle, and the DID they settle on."""

    handle: str | None
    dns: Evidence
    https: Evidence
    answer: HandleAnswer

    @classmethod
    def of(cls, handle: str, dns: Evidence, https: Evidence) -> HandleResolution:
        return cls(handle, dns, https, verdict.combine_methods(dns, https))

    @classmethod
    def skipped(cls, handle: str | None, why: str) -> HandleResolution:
        evidence = Evidence.skipped(why)
        return cls(handle, evidence, evidence, HandleAnswer(Step.SKIPPED, None))

    def to_json(self) -> dict[str, Any]:
        return {
            "handle": self.handle,
            "dns": self.dns.to_json(),
            "https": self.https.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HandleResolution:
        handle = data["handle"]
        dns, https = Evidence.from_json(data["dns"]), Evidence.from_json(data["https"])
        if dns.outcome is Outcome.SKIPPED and https.outcome is Outcome.SKIPPED:
            return cls(handle, dns, https, HandleAnswer(Step.SKIPPED, None))
        return cls.of(handle, dns, https)


@dataclass(frozen=True, slots=True)
class DocumentResolution:
    """A DID's document as fetched (and, with --verify-plc, as its signed log proves)."""

    did: str
    evidence: Evidence
    data: AtprotoData | None = None
    body: bytes | None = None  # the document as served, UTF-8 JSON (see parse_json_document)
    plc: Evidence = SKIPPED
    plc_findings: tuple[str, ...] = ()
    rotation_keys: tuple[str, ...] = ()  # from the replayed log (with --verify-plc)
    history: LogSummary | None = None  # the replayed log in brief (with --verify-plc)

    @property
    def document(self) -> dict[str, Any] | None:
        """The document, decoded anew on each call (it is kept as the bytes served)."""
        return parse_json(self.body) if self.body is not None else None

    def to_json(self) -> dict[str, Any]:
        """Everything but the document's bytes (`body`), which travel beside it."""
        return {
            "did": self.did,
            "evidence": self.evidence.to_json(),
            "plc": self.plc.to_json(),
            "plc_findings": list(self.plc_findings),
            "rotation_keys": list(self.rotation_keys),
            "history": self.history.to_json() if self.history else None,
        }

    @classmethod
    def from_json(
        cls, data: dict[str, Any], body: bytes | None, *, dev: bool
    ) -> DocumentResolution:
        did = data["did"]
        try:
            extracted = parse_json_document(did, body, dev=dev)[1] if body is not None else None
        except InvalidData:
            extracted = None
        return cls(
            did,
            Evidence.from_json(data["evidence"]),
            extracted,
            body,
            Evidence.from_json(data["plc"]),
            tuple(data["plc_findings"]),
            tuple(data.get("rotation_keys", ())),
            LogSummary.from_json(data["history"]) if data.get("history") else None,
        )


NO_DOCUMENT = DocumentResolution("", SKIPPED)
NOT_CHECKED = "not checked: the DID's document alone was asked for"


def unchecked(document: DocumentResolution) -> HandleResolution:
    """The handle part of a report on a DID's document alone: the handle it declares, not
    resolved (a token's issuer needs its document and key only, SA-ISS-2). The report's
    status then speaks of the document: `handle_not_found` where it resolved."""
    declared = document.data.declared_handle if document.data else None
    return HandleResolution.skipped(declared, NOT_CHECKED)


def compose(
    query: Query,
    checked_at: str,
    handle: HandleResolution,
    document: DocumentResolution,
) -> Identity:
    """The report for `query` from its two resolutions (H-RES-4 / H-RES-5)."""
    data = document.data
    if query.kind == "handle":
        binding = Binding.NOT_CHECKED
        if data is not None:
            same = data.declared_handle == query.value
            binding = Binding.MATCH if same else Binding.MISMATCH
        status = verdict.handle_first(
            handle.answer.step, verdict.step_of(document.evidence), binding
        )
        did = handle.answer.did
    else:
        binding = Binding.NOT_CHECKED
        if handle.answer.step is Step.OK:
            same = handle.answer.did == query.value
            binding = Binding.MATCH if same else Binding.MISMATCH
        status = verdict.did_first(verdict.step_of(document.evidence), handle.answer.step, binding)
        did = query.value
    status = verdict.with_plc_log(status, verdict.step_of(document.plc))
    return Identity(
        query=query.text,
        status=status,
        did=did,
        declared_handle=data.declared_handle if data else None,
        pds=data.pds if data else None,
        signing_key=data.signing_key.did_key if data and data.signing_key else None,
        also_known_as=data.also_known_as if data else (),
        services=tuple((s.id, s.type, s.endpoint) for s in data.services) if data else (),
        rotation_keys=document.rotation_keys,
        history=document.history,
        dns=handle.dns,
        https=handle.https,
        did_doc=document.evidence,
        plc_log=document.plc,
        plc_findings=document.plc_findings,
        warnings=(*handle.answer.warnings, *(data.warnings if data else ())),
        error=_reason(status, handle, document),
        checked_at=checked_at,
        handle_queried=handle.handle,
        did_document_json=document.body,
    )


def _reason(status: Status, handle: HandleResolution, document: DocumentResolution) -> str | None:
    """One sentence saying why the binding is not verified."""
    data = document.data
    match status:
        case Status.VERIFIED:
            return None
        case Status.PLC_LOG_INVALID:
            return document.plc.error
        case Status.HANDLE_MISMATCH if data is not None and data.declared_handle is None:
            return "the DID document declares no valid at:// handle"
        case Status.HANDLE_MISMATCH if data is not None and handle.handle == data.declared_handle:
            seen = (*handle.dns.dids, *handle.https.dids)
            names = sorted({d for d in seen if d != data.did})
            return (
                f"{handle.handle} resolves to {', '.join(names) or 'another DID'}, not {data.did}"
            )
        case Status.HANDLE_MISMATCH if data is not None:
            return f"the DID document declares {data.declared_handle}, not {handle.handle}"
        case Status.DID_NOT_FOUND | Status.DID_DEACTIVATED | Status.INVALID_DOCUMENT:
            return document.evidence.error
        case _:
            steps = (handle.dns, handle.https, document.evidence, document.plc)
            return "; ".join(dict.fromkeys(e.error for e in steps if e.error)) or None
