"""The verdict tables, over every combination of step outcomes a lookup can produce, against
the spec checklist's rules restated here in their own words (H-RES-2, H-DNS-3, H-RES-4,
H-RES-5, anchors A2.2), not copied from the `match` tables they check."""

from __future__ import annotations

import itertools

import pytest

from atwhois.resolver.errors import AmbiguousHandle, DidDeactivated, InvalidData, NotFound
from atwhois.resolver.identity import Evidence
from atwhois.resolver.outcome import Outcome, Status
from atwhois.resolver.verdict import (
    Binding,
    HandleAnswer,
    Step,
    combine_methods,
    did_first,
    handle_first,
    step_of,
)

ALICE, BOB = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
# What each handle method can end in (DNS alone can be ambiguous).
DNS_STEPS = [Step.OK, Step.NOT_FOUND, Step.FAILED, Step.INVALID, Step.SKIPPED, Step.AMBIGUOUS]
HTTPS_STEPS = [Step.OK, Step.NOT_FOUND, Step.FAILED, Step.INVALID, Step.SKIPPED]


def evidence(step: Step, did: str = ALICE) -> Evidence:
    match step:
        case Step.OK:
            return Evidence(Outcome.OK, (did,))
        case Step.AMBIGUOUS:
            return Evidence.failure(AmbiguousHandle("two DIDs"), 1.0, None)
        case Step.DEACTIVATED:
            return Evidence.failure(DidDeactivated("tombstoned"), 1.0, None)
        case Step.NOT_FOUND:
            return Evidence.failure(NotFound("absent"), 1.0, None)
        case Step.INVALID:
            return Evidence.failure(InvalidData("nonsense"), 1.0, None)
        case Step.FAILED:
            return Evidence(Outcome.FAILED, error="timeout", error_kind="UpstreamTimeout")
        case Step.SKIPPED:
            return Evidence.skipped("not asked")
    raise AssertionError(step)


def test_step_of_tells_the_error_kinds_apart() -> None:
    for step in Step:
        assert step_of(evidence(step)) is step


def expected_handle(dns: Step, https: Step, dids_differ: bool) -> HandleAnswer:
    """H-DNS-3: conflicting TXT records fail the handle, whatever HTTPS says. H-RES-2: either
    method's success is an answer, DNS preferred, a disagreement reported; HTTPS standing in
    for a failed DNS is said. Without an answer: any transient failure makes the handle
    unavailable (never absent), else invalid data, else not found; a skipped method counts
    as not found (A2.2)."""
    if dns is Step.AMBIGUOUS:
        return HandleAnswer(Step.AMBIGUOUS, None)
    if dns is Step.OK:
        conflict = ("dns_https_conflict",) if https is Step.OK and dids_differ else ()
        return HandleAnswer(Step.OK, ALICE, conflict)
    if https is Step.OK:
        fallback = ("dns_unavailable",) if dns is Step.FAILED else ()
        return HandleAnswer(Step.OK, BOB if dids_differ else ALICE, fallback)
    if Step.FAILED in (dns, https):
        return HandleAnswer(Step.FAILED, None)
    if Step.INVALID in (dns, https):
        return HandleAnswer(Step.INVALID, None)
    return HandleAnswer(Step.NOT_FOUND, None)


@pytest.mark.parametrize(("dns", "https"), list(itertools.product(DNS_STEPS, HTTPS_STEPS)))
def test_combine_methods(dns: Step, https: Step) -> None:
    for differ in (False, True):
        got = combine_methods(evidence(dns, ALICE), evidence(https, BOB if differ else ALICE))
        assert got == expected_handle(dns, https, differ), (dns, https, differ)


HANDLE_STEPS = [Step.OK, Step.NOT_FOUND, Step.FAILED, Step.INVALID, Step.AMBIGUOUS]
DOCUMENT_STEPS = [Step.OK, Step.NOT_FOUND, Step.DEACTIVATED, Step.FAILED, Step.INVALID]


def expected_handle_first(handle: Step, document: Step, binding: Binding) -> Status:
    """H-RES-4: handle -> DID -> document -> declared handle. The first step that does not
    succeed decides; a transient failure anywhere is `unavailable`."""
    if handle is Step.AMBIGUOUS:
        return Status.AMBIGUOUS
    if handle in (Step.NOT_FOUND, Step.INVALID):
        return Status.HANDLE_NOT_FOUND
    if handle is Step.FAILED:
        return Status.UNAVAILABLE
    return {
        Step.NOT_FOUND: Status.DID_NOT_FOUND,
        Step.DEACTIVATED: Status.DID_DEACTIVATED,
        Step.FAILED: Status.UNAVAILABLE,
        Step.INVALID: Status.INVALID_DOCUMENT,
        Step.OK: Status.VERIFIED if binding is Binding.MATCH else Status.HANDLE_MISMATCH,
    }[document]


@pytest.mark.parametrize(
    ("handle", "document", "binding"),
    [
        (handle, document if handle is Step.OK else Step.SKIPPED, binding)
        for handle in HANDLE_STEPS
        for document in DOCUMENT_STEPS
        for binding in (Binding.MATCH, Binding.MISMATCH)
    ],
)
def test_handle_first(handle: Step, document: Step, binding: Binding) -> None:
    got = handle_first(handle, document, binding)
    assert got is expected_handle_first(handle, document, binding)


def expected_did_first(document: Step, handle: Step, binding: Binding) -> Status:
    """H-RES-5: document -> declared handle -> that handle resolves back to the DID. A
    document with no declared handle, or one that does not resolve (absent, invalid), has no
    verified handle; a transient failure is `unavailable`."""
    if document is not Step.OK:
        return {
            Step.NOT_FOUND: Status.DID_NOT_FOUND,
            Step.DEACTIVATED: Status.DID_DEACTIVATED,
            Step.FAILED: Status.UNAVAILABLE,
            Step.INVALID: Status.INVALID_DOCUMENT,
        }[document]
    if handle in (Step.SKIPPED, Step.NOT_FOUND, Step.INVALID):
        return Status.HANDLE_NOT_FOUND
    if handle is Step.AMBIGUOUS:
        return Status.AMBIGUOUS
    if handle is Step.FAILED:
        return Status.UNAVAILABLE
    return Status.VERIFIED if binding is Binding.MATCH else Status.HANDLE_MISMATCH


@pytest.mark.parametrize(
    ("document", "handle", "binding"),
    [
        (document, handle if document is Step.OK else Step.SKIPPED, binding)
        for document in DOCUMENT_STEPS
        for handle in [*HANDLE_STEPS, Step.SKIPPED]
        for binding in (Binding.MATCH, Binding.MISMATCH)
    ],
)
def test_did_first(document: Step, handle: Step, binding: Binding) -> None:
    got = did_first(document, handle, binding)
    assert got is expected_did_first(document, handle, binding)


def test_impossible_combinations_raise_instead_of_guessing() -> None:
    """A combination with no row is a bug in the caller, never a default verdict."""
    with pytest.raises(AssertionError, match="no row"):
        handle_first(Step.OK, Step.SKIPPED, Binding.NOT_CHECKED)
    with pytest.raises(AssertionError, match="no row"):
        did_first(Step.SKIPPED, Step.SKIPPED, Binding.NOT_CHECKED)
    with pytest.raises(AssertionError, match="no row"):
        combine_methods(evidence(Step.DEACTIVATED), evidence(Step.DEACTIVATED))
