"""Human output: the verdict in one line first, then the evidence. Colour only on a terminal
(and never with NO_COLOR set); the same text without escapes otherwise, stable for grep."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, TextIO

from resolver import Evidence, Identity, Outcome, Status

if TYPE_CHECKING:
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
GREEN, RED, YELLOW, BOLD, DIM = "32", "31", "33", "1", "2"


def wants_color(stream: TextIO) -> bool:
    """https://no-color.org: any non-empty NO_COLOR turns colour off; so does a pipe."""
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


class Style:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, *codes: str) -> str:
        if not self.color or not codes:
            return text
        return f"\x1b[{';'.join(codes)}m{text}\x1b[0m"


def verdict_line(identity: Identity, style: Style) -> str:
    color = {Status.VERIFIED: GREEN, Status.UNAVAILABLE: YELLOW}.get(identity.status, RED)
    verdict = style(_VERDICT[identity.status], BOLD, color)
    return f"{identity.query}: {verdict} [{identity.status}]"


def _evidence(name: str, evidence: Evidence, style: Style) -> str:
    color = {Outcome.OK: GREEN, Outcome.FAILED: YELLOW, Outcome.INVALID: RED}.get(
        evidence.outcome, DIM
    )
    parts = [f"{name:<9} {style(str(evidence.outcome), color)}"]
    if evidence.dids:
        parts.append(", ".join(evidence.dids))
    if evidence.ms is not None:
        parts.append(style(f"{evidence.ms:.1f} ms", DIM))
    if evidence.error and evidence.outcome is not Outcome.OK:
        parts.append(f"({evidence.error})")
    if evidence.source:
        parts.append(style(evidence.source, DIM))
    return "  ".join(parts)


def _key(did_key: str) -> str:
    from resolver.keys import InvalidKey, parse_did_key  # the curve libraries, only when shown

    try:
        return f"{did_key} ({parse_did_key(did_key).curve})"
    except InvalidKey:
        return did_key


def render_text(
    identity: Identity,
    history: Audit | None = None,
    *,
    style: Style | None = None,
    server: str | None = None,
) -> str:
    style = style or Style(False)
    lines = [verdict_line(identity, style)]

    def row(label: str, value: str) -> str:
        return f"  {style(f'{label:<13}', BOLD)}{value}"

    if identity.error:
        lines.append(row("why", identity.error))
    if identity.status is Status.INVALID_INPUT:
        return "\n".join(lines)
    if identity.did:
        lines.append(row("handle", f"{identity.handle}  <->  {identity.did}"))
    if identity.declared_handle and identity.declared_handle != identity.handle:
        lines.append(row("declares", identity.declared_handle))
    lines.append(row("resolution", f"of {identity.handle_queried or '(no handle)'}"))
    lines.append("    " + _evidence("dns", identity.dns, style))
    lines.append("    " + _evidence("https", identity.https, style))
    if "dns_https_conflict" in identity.warnings:
        lines.append(
            "    "
            + style(
                f"! DNS says {identity.dns.did}, HTTPS says {identity.https.did}: DNS wins",
                BOLD,
                YELLOW,
            )
        )
    lines.append("    " + _evidence("did doc", identity.did_doc, style))
    if identity.plc_log.outcome is not Outcome.SKIPPED:
        lines.append("    " + _evidence("plc log", identity.plc_log, style))
    lines.extend("    " + style(f"! {finding}", RED) for finding in identity.plc_findings)
    if identity.also_known_as:
        lines.append(row("aliases", ", ".join(identity.also_known_as)))
    if identity.pds:
        lines.append(row("pds", identity.pds))
    if identity.signing_key:
        lines.append(row("signing key", _key(identity.signing_key)))
    others = [s for s in identity.services if not s[0].endswith("#atproto_pds")]
    for ident, kind, endpoint in others:
        lines.append(row("service", f"{ident} {kind} {endpoint}"))
    if history is not None:
        compared = identity.plc_log.outcome is not Outcome.SKIPPED
        lines.extend(row(label, text) for label, text in summarize(history, compared=compared))
    if identity.cache is not None and (identity.cache.cached or server):
        where = f" from {server}" if server else ""
        info = identity.cache
        lines.append(row("cache", f"{info.state}, {info.age_s:.0f} s old{where}"))
    if identity.warnings:
        lines.append(row("warnings", style(", ".join(identity.warnings), YELLOW)))
    return "\n".join(lines)


def summarize(audit: Audit, *, compared: bool) -> list[tuple[str, str]]:
    """A did:plc's history in a few lines: how many ops, since when, what changed.
    `compared`: whether the lookup checked the served document against this log
    (`--verify-plc`); when it did not, the summary says so rather than "verifies"."""
    accepted = [op for op in audit.ops if op.accepted and not op.nullified]
    verdict = (
        "the log verifies"
        if audit.valid
        else f"the log does NOT verify ({len(audit.findings)} findings)"
    )
    if audit.valid and not compared:
        verdict = "its signatures verify (the document was not compared with it: --verify-plc)"
    count = len(audit.ops)
    rows = [("history", f"{count} operation{'s' if count != 1 else ''}; {verdict}")]
    if audit.ops:
        rows.append(("created", audit.ops[0].created_at))
    if accepted:
        rows.append(
            ("last change", f"{accepted[-1].created_at}: {', '.join(accepted[-1].changes)}")
        )
    changes = [c for op in accepted[1:] for c in op.changes]
    counts = {  # every change `_describe_change` names has its count here
        "handle changes": sum(c.startswith("handle ") for c in changes),
        "alias changes": sum(c == "aliases changed" for c in changes),
        "PDS moves": sum(c.startswith("pds ") for c in changes),
        "signing-key rotations": sum(c == "signing key rotated" for c in changes),
        "rotation-key changes": sum(c == "rotation keys changed" for c in changes),
        "service changes": sum(c == "services changed" for c in changes),
        "recoveries": sum(c.startswith("recovery") for c in changes),
        "nullified ops": sum(op.nullified for op in audit.ops),
    }
    summary = ", ".join(f"{what}: {n}" for what, n in counts.items() if n)
    rows.append(("changes", summary or "none since creation"))
    if audit.deactivated:
        rows.append(("state", "deactivated (tombstoned)"))
    return rows


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
