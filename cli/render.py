"""Plain text rendering of an `Identity`: the verdict first, then the evidence."""

from __future__ import annotations

from resolver import Evidence, Identity, Outcome, Status
from resolver.plc import Audit

_VERDICT = {
    Status.VERIFIED: "verified",
    Status.HANDLE_MISMATCH: "NOT verified: handle and DID do not point at each other",
    Status.HANDLE_NOT_FOUND: "NOT verified: the handle does not resolve",
    Status.DID_NOT_FOUND: "NOT verified: the DID does not exist",
    Status.DID_DEACTIVATED: "NOT verified: the DID is deactivated",
    Status.AMBIGUOUS: "NOT verified: the handle names several DIDs",
    Status.INVALID_DOCUMENT: "NOT verified: the DID document is invalid",
    Status.PLC_LOG_INVALID: "NOT verified: the directory serves what no signed op says",
    Status.INVALID_INPUT: "invalid input",
    Status.UNAVAILABLE: "could not be checked now (transient failure)",
}


def _evidence_line(name: str, evidence: Evidence) -> str:
    parts = [f"{name:<9} {evidence.outcome}"]
    if evidence.dids:
        parts.append(", ".join(evidence.dids))
    if evidence.ms is not None:
        parts.append(f"{evidence.ms:.1f} ms")
    if evidence.error and str(evidence.outcome) != "ok":
        parts.append(f"({evidence.error})")
    return "  ".join(parts)


def render_text(identity: Identity) -> str:
    lines = [f"{identity.query}: {_VERDICT[identity.status]} [{identity.status}]"]
    if identity.error:
        lines.append(f"  why        {identity.error}")
    if identity.status is Status.INVALID_INPUT:
        return "\n".join(lines)
    rows = [
        ("handle", identity.handle),
        ("did", identity.did),
        ("declared", identity.declared_handle),
        ("pds", identity.pds),
        ("key", identity.signing_key),
    ]
    lines += [f"  {k:<10} {v}" for k, v in rows if v]
    if identity.also_known_as:
        lines.append(f"  {'aliases':<10} {', '.join(identity.also_known_as)}")
    if identity.handle_queried:
        lines.append(f"  evidence for {identity.handle_queried}:")
    steps = [("dns", identity.dns), ("https", identity.https), ("did doc", identity.did_doc)]
    if identity.plc_log.outcome is not Outcome.SKIPPED:
        steps.append(("plc log", identity.plc_log))
    for name, evidence in steps:
        lines.append("    " + _evidence_line(name, evidence))
    lines.extend(f"    ! {finding}" for finding in identity.plc_findings)
    if identity.warnings:
        lines.append(f"  {'warnings':<10} {', '.join(identity.warnings)}")
    return "\n".join(lines)


def render_history(audit: Audit) -> str:
    nullified = sum(op.nullified for op in audit.ops)
    verdict = (
        "log verifies" if audit.valid else f"log does NOT verify ({len(audit.findings)} findings)"
    )
    state = "deactivated (tombstoned)" if audit.deactivated else "active"
    lines = [f"{audit.did}: {verdict}; {len(audit.ops)} operations, {nullified} nullified; {state}"]
    for op in audit.ops:
        signer = f"key #{op.signer_index}" if op.signer_index is not None else "unsigned"
        fate = (
            f"NULLIFIED by {op.nullified_by}"
            if op.nullified
            else ("accepted" if op.accepted else "REJECTED")
        )
        lines.append(f"  #{op.index} {op.created_at}  {op.type:<13} {signer:<8} {fate}")
        lines.append(f"      {op.cid}")
        if op.signer_key:
            lines.append(f"      signed by {op.signer_key}")
        lines.extend(f"      {change}" for change in op.changes)
        lines.extend(f"      ! {finding}" for finding in op.findings)
    lines.extend(f"  ! {finding}" for finding in audit.findings if finding.index is None)
    lines.extend(f"  warning: {warning}" for warning in audit.warnings)
    return "\n".join(lines)
