"""What changed between two checks of one identity, and how much it matters. Pure functions
over `Check`s; the tables below are the README's severity table.

Every change of status between two checks that reached the upstream yields exactly one
status finding (`TRANSITIONS`, tested over every pair); changes of the identity's fields
add their own. A transient failure is compared with nothing: the runner counts it towards
`unreachable`, or, when many identities failed on the same upstream in one run, reports
that upstream once (`upstream_unavailable`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from atwhois.resolver import Status

from .checks import Check, iso


class Severity(StrEnum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"
    OK = "ok"  # a report row with nothing to say; no finding has it

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Severity.OK: 0, Severity.INFO: 1, Severity.WARNING: 2, Severity.CRITICAL: 3}

CRITICAL, WARNING, INFO = Severity.CRITICAL, Severity.WARNING, Severity.INFO
# kind -> (severity, what it means)
KINDS: dict[str, tuple[Severity, str]] = {
    "did_changed": (CRITICAL, "the handle now names another DID: a possible takeover"),
    "deactivated": (CRITICAL, "the DID is deactivated (tombstoned)"),
    "plc_log_invalid": (CRITICAL, "the directory serves what no signed operation says"),
    "signing_key_changed": (
        CRITICAL,
        "the signing key changed with no verified operation behind it",
    ),
    "became_unverified": (WARNING, "the binding was verified and no longer is"),
    "status_changed": (WARNING, "from one failing status to another"),
    "handle_changed": (WARNING, "the DID declares another handle"),
    "conflict_appeared": (WARNING, "DNS and HTTPS name different DIDs"),
    "unreachable": (WARNING, "N checks in a row could not reach the upstream"),
    "upstream_unavailable": (WARNING, "one upstream failed for many identities in this run"),
    "recovered": (INFO, "verified again"),
    "reachable_again": (INFO, "checked again after a run of failures"),
    "pds_changed": (INFO, "the PDS moved"),
    "signing_key_rotated": (INFO, "the signing key changed by a verified operation"),
    "rotation_keys_changed": (INFO, "the rotation keys changed by a verified operation"),
    "method_changed": (INFO, "another method (DNS, HTTPS) now carries the handle"),
    "conflict_cleared": (INFO, "DNS and HTTPS agree again"),
    # with check_pds: what the PDS the document names says of the account
    "commit_key_mismatch": (
        CRITICAL,
        "the repository's latest commit is not signed by the document's key",
    ),
    "repo_not_hosted": (CRITICAL, "the PDS the document names does not host the account"),
    "repo_inactive": (WARNING, "the PDS hosts the account inactive (deactivated, taken down…)"),
    "pds_invalid": (WARNING, "the PDS answered what no PDS may (R-PDS-*, R-CAR-*, R-COMMIT-*)"),
    "pds_unreachable": (WARNING, "the PDS the document names could not be reached"),
    "pds_recovered": (INFO, "the PDS hosts the account again, active, its commit verified"),
    # with dnssec: what DNSSEC says of the handle's TXT answer
    "dnssec_bogus": (
        CRITICAL,
        "the TXT answer's DNSSEC signatures fail: forged, or a zone signed wrong",
    ),
    "dnssec_lost": (WARNING, "the TXT answer was DNSSEC-secure and no longer is"),
    "dnssec_secure_again": (INFO, "the TXT answer is DNSSEC-secure again"),
}

# The statuses a check that reached the upstream can have (UNAVAILABLE is transient).
CHECKED = [s for s in Status if s is not Status.UNAVAILABLE]


def _status_kind(before: Status, after: Status) -> str:
    if after is Status.VERIFIED:
        return "recovered"
    if after is Status.DID_DEACTIVATED:
        return "deactivated"
    if after is Status.PLC_LOG_INVALID:
        return "plc_log_invalid"
    if before is Status.VERIFIED:
        return "became_unverified"
    return "status_changed"


TRANSITIONS: dict[tuple[Status, Status], str] = {
    (before, after): _status_kind(before, after)
    for before in CHECKED
    for after in CHECKED
    if before is not after
}

# The severity of a report row's current state, findings aside.
STATE_SEVERITY: dict[Status, Severity] = {
    **{status: WARNING for status in Status},
    Status.VERIFIED: Severity.OK,
    Status.DID_DEACTIVATED: CRITICAL,
    Status.PLC_LOG_INVALID: CRITICAL,
}


@dataclass(frozen=True, slots=True)
class Finding:
    identifier: str  # an identity, or the upstream of an `upstream_unavailable`
    kind: str
    detail: str
    at: float
    old: str | None = None
    new: str | None = None

    @property
    def severity(self) -> Severity:
        return KINDS[self.kind][0]

    def to_json(self) -> dict[str, Any]:
        return {
            "identifier": self.identifier,
            "kind": self.kind,
            "severity": str(self.severity),
            "detail": self.detail,
            "old": self.old,
            "new": self.new,
            "at": iso(self.at),
        }


def compare(
    previous: Check | None, current: Check, failures: int, unreachable_after: int
) -> tuple[list[Finding], int]:
    """The findings of `current` against the last check that reached the upstream, and the
    new count of consecutive transient failures. One transient failure is not news; the
    `unreachable_after`-th in a row is, once."""

    def found(kind: str, detail: str, old: object = None, new: object = None) -> Finding:
        return Finding(current.identifier, kind, detail, current.checked_at, _text(old), _text(new))

    if current.transient:
        failures += 1
        if failures == unreachable_after:
            detail = f"{failures} checks in a row failed: {current.error}"
            return [found("unreachable", detail, None, failures)], failures
        return [], failures
    findings = []
    if failures >= unreachable_after:
        findings.append(found("reachable_again", f"after {failures} failed checks", failures, 0))
    if previous is None:
        return findings, 0
    before, after = Status(previous.status), Status(current.status)
    if before is not after:
        kind = _status_kind(before, after)
        reason = f": {current.error}" if current.error else ""
        findings.append(found(kind, f"{before} -> {after}{reason}", before, after))
    if previous.did and current.did and previous.did != current.did:
        # Another identity altogether: its keys and PDS are not changes of this one's.
        findings.append(
            found("did_changed", f"{previous.did} -> {current.did}", previous.did, current.did)
        )
        return findings, 0
    findings.extend(_field_changes(previous, current, found))
    return findings, 0


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _field_changes(previous: Check, current: Check, found: Callable[..., Finding]) -> list[Finding]:
    findings = []
    for kind, old, new in (
        ("handle_changed", previous.declared_handle, current.declared_handle),
        ("pds_changed", previous.pds, current.pds),
    ):
        if old is not None and new is not None and old != new:
            findings.append(found(kind, f"{old} -> {new}", old, new))
    # A key change is vouched for only by a replayed, verified did:plc log.
    vouched = current.evidence.get("plc_log") == "ok"
    old_key, new_key = previous.signing_key, current.signing_key
    if old_key is not None and new_key is not None and old_key != new_key:
        kind = "signing_key_rotated" if vouched else "signing_key_changed"
        findings.append(found(kind, f"{old_key} -> {new_key}", old_key, new_key))
    old_keys, new_keys = previous.rotation_keys, current.rotation_keys
    if old_keys and new_keys and old_keys != new_keys:
        added = len(set(new_keys) - set(old_keys))
        removed = len(set(old_keys) - set(new_keys))
        detail = f"{added} added, {removed} removed" if added or removed else "reordered"
        findings.append(
            found("rotation_keys_changed", detail, " ".join(old_keys), " ".join(new_keys))
        )
    if "none" not in (previous.method, current.method) and previous.method != current.method:
        findings.append(
            found(
                "method_changed",
                f"{previous.method} -> {current.method}",
                previous.method,
                current.method,
            )
        )
    if current.conflict and not previous.conflict:
        findings.append(
            found("conflict_appeared", "DNS and HTTPS name different DIDs", False, True)
        )
    # "Agree again" only when both answered, with one DID: not when one of them went away
    # or the handle became ambiguous.
    if previous.conflict and not current.conflict and current.method == "both":
        findings.append(found("conflict_cleared", "DNS and HTTPS agree again", True, False))
    findings.extend(_pds_changes(previous, current, found))
    findings.extend(_dnssec_changes(previous, current, found))
    return findings


def _pds_kind(check: Check) -> str | None:
    """The finding a PDS check's result is, when it is news (`_pds_changes`)."""
    match check.pds_check:
        case "hosted":
            return "pds_recovered"
        case "inactive":
            return "repo_inactive"
        case "not_hosted":
            return "repo_not_hosted"
        case "unreachable":
            return "pds_unreachable"
        case "invalid":
            return (
                "commit_key_mismatch"
                if "[R-COMMIT-4]" in (check.pds_detail or "")
                else "pds_invalid"
            )
    return None


def _pds_changes(previous: Check, current: Check, found: Callable[..., Finding]) -> list[Finding]:
    """With check_pds, when both checks asked the PDS: its answer changed (an inactive
    account's status, or why the check failed, included)."""
    if previous.pds_check is None or current.pds_check is None:
        return []
    before, after = previous.pds_check, current.pds_check
    if before == after and (
        after not in ("inactive", "invalid") or previous.pds_detail == current.pds_detail
    ):
        return []  # hosted with another commit, or failing the same way: no news
    kind = _pds_kind(current)
    if kind is None:
        return []
    detail = current.pds_detail or current.pds_check
    return [
        found(kind, f"{current.pds or 'the PDS'}: {detail}", previous.pds_check, current.pds_check)
    ]


def _dnssec_changes(
    previous: Check, current: Check, found: Callable[..., Finding]
) -> list[Finding]:
    """With dnssec, when both checks had a TXT answer to validate: it became bogus, stopped
    being secure, or became secure again."""
    before, after = previous.dnssec, current.dnssec
    if before is None or after is None or before == after:
        return []
    if after == "bogus":
        kind = "dnssec_bogus"
    elif before == "secure":
        kind = "dnssec_lost"
    elif after == "secure":
        kind = "dnssec_secure_again"
    else:
        return []  # between insecure and indeterminate: it vouched for nothing either way
    detail = current.dnssec_detail or f"DNSSEC: {after}"
    return [found(kind, detail, before, after)]
