"""Human output: the verdict in one line first, then the evidence. Colour only on a terminal
(and never with NO_COLOR set); the same text without escapes otherwise, stable for grep."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from atwhois.foundation import counted
from atwhois.resolver.outcome import VERDICTS, Outcome, Status
from atwhois.resolver.rules import SPEC, cited

if TYPE_CHECKING:
    from atwhois.resolver.plc import Audit

Report = dict[str, Any]  # a JSON report: `Identity.to_json()` or a part of it

GREEN, RED, YELLOW, BOLD, DIM = "32", "31", "33", "1", "2"


def wants_color(stream: TextIO, *, refused: bool = False) -> bool:
    """https://no-color.org: any non-empty NO_COLOR turns colour off; so do a pipe and
    `--no-color` (`refused`)."""
    return (
        not refused
        and stream.isatty()
        and not os.environ.get("NO_COLOR")
        and os.environ.get("TERM") != "dumb"
    )


def short_answer(report: dict[str, Any]) -> str | None:
    """`--short`: the DID a verified handle points at, or the verified handle of a DID;
    None when the binding does not verify."""
    from atwhois.resolver.syntax import parse_query

    if not report["verified"]:
        return None
    answer = report["handle"] if parse_query(report["query"]).kind == "did" else report["did"]
    return str(answer) if answer else None


class Style:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, *codes: str) -> str:
        if not self.color or not codes:
            return text
        return f"\x1b[{';'.join(codes)}m{text}\x1b[0m"


def verdict_line(report: Report, style: Style) -> str:
    status = Status(report["status"])
    color = {Status.VERIFIED: GREEN, Status.UNAVAILABLE: YELLOW}.get(status, RED)
    return f"{report['query']}: {style(VERDICTS[status], BOLD, color)} [{status}]"


def _evidence(name: str, evidence: Report, style: Style) -> str:
    outcome = Outcome(evidence["outcome"])
    color = {Outcome.OK: GREEN, Outcome.FAILED: YELLOW, Outcome.INVALID: RED}.get(outcome, DIM)
    parts = [f"{name:<9} {style(str(outcome), color)}"]
    if evidence["dids"]:
        parts.append(", ".join(evidence["dids"]))
    if evidence["ms"] is not None:
        parts.append(style(f"{evidence['ms']:.1f} ms", DIM))
    if evidence["error"] and outcome is not Outcome.OK:
        parts.append(f"({evidence['error']})")
    if evidence["source"]:
        parts.append(style(evidence["source"], DIM))
    if evidence.get("via"):
        parts.append(style(f"[{evidence['via']}]", DIM))
    return "  ".join(parts)


_DNSSEC_COLORS = {"secure": GREEN, "bogus": RED}


def _dnssec(check: Report, style: Style) -> str:
    """What DNSSEC said of the TXT answer (`--dnssec`), under the DNS row."""
    parts = [f"  {'dnssec':<7} {style(check['state'], _DNSSEC_COLORS.get(check['state'], YELLOW))}"]
    if check["zone"]:
        parts.append(f"zone {check['zone']}")
    if check["reason"]:
        parts.append(f"({check['reason']})")
    return "  ".join(parts)


_PDS_COLORS = {"hosted": GREEN, "unreachable": YELLOW, "inactive": RED, "not_hosted": RED}


def _pds_check(check: Report, style: Style) -> list[str]:
    """What the PDS said of the account (`--check-pds`): a row like the evidence rows."""
    parts = [f"{'repo':<9} {style(check['outcome'], _PDS_COLORS.get(check['outcome'], RED))}"]
    if check["status"]:
        parts.append(check["status"])
    if check["rev"]:
        parts.append(f"rev {check['rev']}")
    if check["ms"] is not None:
        parts.append(style(f"{check['ms']:.1f} ms", DIM))
    lines = ["  ".join(parts)]
    if check["commit"]:
        signed = f", signed by {check['key']}" if check["key"] else ""
        lines.append(style(f"  commit {check['commit']}{signed}", DIM))
    if check["error"]:
        lines.append(style(f"! {check['error']}", RED if check["outcome"] == "invalid" else YELLOW))
    return lines


def _key(did_key: str) -> str:
    from atwhois.resolver.keys import (  # the curve libraries, only when shown
        InvalidKey,
        parse_did_key,
    )

    try:
        return f"{did_key} ({parse_did_key(did_key).curve})"
    except InvalidKey:
        return did_key


def render_text(report: Report, *, style: Style | None = None, server: str | None = None) -> str:
    """The report (`Identity.to_json()`) for people: every fact in it, and nothing that is
    not (`tests/server/test_views.py` holds the two views to that)."""
    style = style or Style(False)
    lines = [verdict_line(report, style)]

    def row(label: str, value: str) -> str:
        return f"  {style(f'{label:<13}', BOLD)}{value}"

    if report["error"]:
        lines.append(row("why", report["error"]))
    if report["status"] == Status.INVALID_INPUT:
        lines.extend(_rules(report, row))
        return "\n".join(lines)
    evidence = report["evidence"]
    if report["did"]:
        lines.append(row("handle", f"{report['handle']}  <->  {report['did']}"))
    declared = report["declared_handle"]
    if declared and declared != report["handle"]:
        lines.append(row("declares", declared))
    lines.append(row("resolution", f"of {evidence['handle'] or '(no handle)'}"))
    lines.append("    " + _evidence("dns", evidence["dns"], style))
    if evidence["dns"].get("dnssec"):
        lines.append("    " + _dnssec(evidence["dns"]["dnssec"], style))
    lines.append("    " + _evidence("https", evidence["https"], style))
    if "dns_https_conflict" in report["warnings"]:
        dns, https = evidence["dns"]["dids"], evidence["https"]["dids"]
        conflict = f"! DNS says {', '.join(dns)}, HTTPS says {', '.join(https)}: DNS wins"
        lines.append("    " + style(conflict, BOLD, YELLOW))
    lines.append("    " + _evidence("did doc", evidence["did_doc"], style))
    plc_log = evidence["plc_log"]
    if (report["did"] or "").startswith("did:plc:"):
        line = _evidence("plc log", plc_log, style)
        if plc_log["outcome"] == Outcome.SKIPPED:
            line += style("  (--verify-plc replays the operation log)", DIM)
        lines.append("    " + line)
    lines.extend("    " + style(f"! {finding}", RED) for finding in plc_log["findings"])
    if report["also_known_as"]:
        lines.append(row("aliases", ", ".join(report["also_known_as"])))
    if report["pds"]:
        lines.append(row("pds", report["pds"]))
    if "pds" in evidence:
        lines.extend("    " + line for line in _pds_check(evidence["pds"], style))
    if report["signing_key"]:
        lines.append(row("signing key", _key(report["signing_key"])))
    for service in report["services"]:
        if not service["id"].endswith("#atproto_pds"):
            lines.append(row("service", f"{service['id']} {service['type']} {service['endpoint']}"))
    if report["rotation_keys"]:
        lines.append(row("rotation", ", ".join(report["rotation_keys"])))
    if report["history"]:
        valid = plc_log["outcome"] == Outcome.OK
        lines.extend(row(label, text) for label, text in _history(report["history"], valid))
    cache = report["cache"]
    if cache is not None and (cache["cached"] or server):
        where = f" from {server}" if server else ""
        lines.append(row("cache", f"{cache['state']}, {cache['age_s']:.0f} s old{where}"))
    if report["warnings"]:
        lines.append(row("warnings", style(", ".join(report["warnings"]), YELLOW)))
    lines.extend(_rules(report, row))
    return "\n".join(lines)


def _rules(report: Report, row: Callable[[str, str], str]) -> list[str]:
    """Where the rules the report's messages cite are explained, when they cite any."""
    evidence = report.get("evidence") or {}
    steps = [step for step in evidence.values() if isinstance(step, dict)]
    messages = [report["error"], *(step.get("error") for step in steps)]
    messages += evidence.get("plc_log", {}).get("findings", [])
    messages += [(evidence.get("dns", {}).get("dnssec") or {}).get("reason")]
    tags = cited(*messages)
    return [row("rules", f"{', '.join(tags)}: see {SPEC}")] if tags else []


def _history(summary: Report, valid: bool) -> list[tuple[str, str]]:
    """The replayed log (`LogSummary`) in a few lines."""
    count = summary["operations"]
    verdict = "the log verifies" if valid else "the log does NOT verify"
    rows = [("history", f"{counted(count, 'operation')}; {verdict}")]
    if summary["created"]:
        rows.append(("created", summary["created"]))
    if summary["last_change"]:
        changed = ", ".join(summary["last_changes"]) or "(creation)"
        rows.append(("last change", f"{summary['last_change']}: {changed}"))
    counts = ", ".join(f"{kind}: {n}" for kind, n in summary["changes"].items())
    rows.append(("changes", counts or "none since creation"))
    if summary["tombstoned"]:
        rows.append(("state", "deactivated (tombstoned)"))
    return rows


def render_history(audit: Audit) -> str:
    nullified = sum(op.nullified for op in audit.ops)
    verdict = (
        "log verifies" if audit.valid else f"log does NOT verify ({len(audit.findings)} findings)"
    )
    state = "deactivated (tombstoned)" if audit.deactivated else "active"
    operations = counted(len(audit.ops), "operation")
    lines = [f"{audit.did}: {verdict}; {operations}, {nullified} nullified; {state}"]
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
