"""The verdict: pure tables from the steps' outcomes to a lookup's status.

Written as `match` tables so each row can be checked against the rules (docs/spec.md); a
combination with no row is a bug and raises, it never falls through to a default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

from .identity import Evidence
from .outcome import Status


class Step(StrEnum):
    """A step's outcome, with the two cases the verdict tells apart by error kind."""

    OK = "ok"
    NOT_FOUND = "not_found"
    DEACTIVATED = "deactivated"
    AMBIGUOUS = "ambiguous"
    FAILED = "failed"
    INVALID = "invalid"
    SKIPPED = "skipped"


def step_of(evidence: Evidence) -> Step:
    if evidence.error_kind == "DidDeactivated":
        return Step.DEACTIVATED
    if evidence.error_kind == "AmbiguousHandle":
        return Step.AMBIGUOUS
    return Step(str(evidence.outcome))


class Binding(StrEnum):
    MATCH = "match"
    MISMATCH = "mismatch"
    NOT_CHECKED = "not_checked"


@dataclass(frozen=True, slots=True)
class HandleAnswer:
    """DNS and HTTPS taken together: one step, the DID it settles on, and what to warn."""

    step: Step
    did: str | None
    warnings: tuple[str, ...] = ()


def combine_methods(dns: Evidence, https: Evidence) -> HandleAnswer:
    """`combined`, and H-DNS-10: a recursive resolver that said otherwise than the zone's
    own nameservers is worth a warning (its other users still see the old answer)."""
    answer = combined(dns, https)
    if dns.stale_resolver is None:
        return answer
    return dataclasses.replace(answer, warnings=(*answer.warnings, "dns_stale_resolver"))


def combined(dns: Evidence, https: Evidence) -> HandleAnswer:
    """H-RES-2: DNS wins when both answer; a disagreement is reported, not hidden. H-DNS-3:
    an ambiguous DNS answer fails the handle whatever HTTPS says. A skipped method counts
    as not found (indigo's nil-error bug, anchors A2.2)."""
    match step_of(dns), step_of(https):
        case Step.AMBIGUOUS, _:
            return HandleAnswer(Step.AMBIGUOUS, None)
        case Step.OK, Step.OK:
            conflict = ("dns_https_conflict",) if dns.did != https.did else ()
            return HandleAnswer(Step.OK, dns.did, conflict)
        case Step.OK, _:
            return HandleAnswer(Step.OK, dns.did)
        case Step.FAILED, Step.OK:
            return HandleAnswer(Step.OK, https.did, ("dns_unavailable",))
        case _, Step.OK:
            return HandleAnswer(Step.OK, https.did)
        case Step.FAILED, _:
            return HandleAnswer(Step.FAILED, None)
        case _, Step.FAILED:
            return HandleAnswer(Step.FAILED, None)
        case Step.INVALID, _:
            return HandleAnswer(Step.INVALID, None)
        case _, Step.INVALID:
            return HandleAnswer(Step.INVALID, None)
        case Step.NOT_FOUND | Step.SKIPPED, Step.NOT_FOUND | Step.SKIPPED:
            return HandleAnswer(Step.NOT_FOUND, None)
    raise AssertionError(f"no row for dns={dns.outcome}, https={https.outcome}")


def handle_first(handle: Step, document: Step, binding: Binding) -> Status:
    """A handle was asked (H-RES-4): handle -> DID -> document -> first alias -> same handle."""
    match handle, document, binding:
        case Step.AMBIGUOUS, Step.SKIPPED, _:
            return Status.AMBIGUOUS
        case Step.NOT_FOUND | Step.INVALID, Step.SKIPPED, _:
            return Status.HANDLE_NOT_FOUND
        case Step.FAILED, Step.SKIPPED, _:
            return Status.UNAVAILABLE
        case Step.OK, Step.NOT_FOUND, _:
            return Status.DID_NOT_FOUND
        case Step.OK, Step.DEACTIVATED, _:
            return Status.DID_DEACTIVATED
        case Step.OK, Step.FAILED, _:
            return Status.UNAVAILABLE
        case Step.OK, Step.INVALID, _:
            return Status.INVALID_DOCUMENT
        case Step.OK, Step.OK, Binding.MATCH:
            return Status.VERIFIED
        case Step.OK, Step.OK, Binding.MISMATCH:
            return Status.HANDLE_MISMATCH
    raise AssertionError(f"no row for handle={handle}, document={document}, binding={binding}")


def did_first(document: Step, handle: Step, binding: Binding) -> Status:
    """A DID was asked (H-RES-5): document -> declared handle -> resolves to the same DID."""
    match document, handle, binding:
        case Step.NOT_FOUND, Step.SKIPPED, _:
            return Status.DID_NOT_FOUND
        case Step.DEACTIVATED, Step.SKIPPED, _:
            return Status.DID_DEACTIVATED
        case Step.FAILED, Step.SKIPPED, _:
            return Status.UNAVAILABLE
        case Step.INVALID, Step.SKIPPED, _:
            return Status.INVALID_DOCUMENT
        case Step.OK, Step.SKIPPED | Step.NOT_FOUND | Step.INVALID, _:
            return Status.HANDLE_NOT_FOUND  # none declared, unresolvable, or absent
        case Step.OK, Step.AMBIGUOUS, _:
            return Status.AMBIGUOUS
        case Step.OK, Step.FAILED, _:
            return Status.UNAVAILABLE
        case Step.OK, Step.OK, Binding.MATCH:
            return Status.VERIFIED
        case Step.OK, Step.OK, Binding.MISMATCH:
            return Status.HANDLE_MISMATCH
    raise AssertionError(f"no row for document={document}, handle={handle}, binding={binding}")


def with_plc_log(status: Status, plc_log: Step) -> Status:
    """With --verify-plc: the directory's answer stands only if its signed log agrees. Total:
    every step the audit-log fetch can end in has a row, whatever the document said."""
    match plc_log, status:
        case Step.SKIPPED | Step.OK, _:
            return status
        case Step.NOT_FOUND, Status.DID_NOT_FOUND:
            return status  # no document and no log: absent either way
        case Step.DEACTIVATED, Status.DID_DEACTIVATED | Status.UNAVAILABLE:
            return status  # the log refused as tombstoned: agrees, or nothing to compare
        case Step.DEACTIVATED, _:
            return Status.PLC_LOG_INVALID  # a live document, yet the log says tombstoned
        case Step.NOT_FOUND | Step.INVALID | Step.AMBIGUOUS, _:
            return Status.PLC_LOG_INVALID
        case Step.FAILED, _:
            return Status.UNAVAILABLE  # asked to verify, could not
    raise AssertionError(f"no row for plc_log={plc_log}, status={status}")
