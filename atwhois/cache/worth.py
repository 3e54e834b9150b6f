"""What a resolved part is worth to the cache, as plain functions over data: whether it is
an answer the policy may let replace what is held (`handle_answer`, `document_answer`),
what is held (`held_kind`), which lifetime it gets (`lifetime_kind`), and why a refresh
that kept the old entry failed (`failure_of`)."""

from __future__ import annotations

from atwhois.resolver import Status
from atwhois.resolver.identity import Evidence
from atwhois.resolver.outcome import Outcome
from atwhois.resolver.report import DocumentResolution, HandleResolution
from atwhois.resolver.verdict import Step

from .entry import Cached, Part
from .policy import Answer, Held, Kind


def handle_answer(handle: HandleResolution, held: Cached | None) -> Answer:
    if handle.answer.step is Step.FAILED:
        return Answer.UNCONFIRMED
    if handle.answer.step is Step.OK and not handle.dns.confirmed and held is not None:
        # HTTPS answered while DNS failed: DNS wins a disagreement (H-RES-2), so the answer
        # does not override another DID that DNS itself gave.
        part = held.part
        if isinstance(part, HandleResolution) and part.dns.did not in (None, handle.answer.did):
            return Answer.PROVISIONAL
    return Answer.CONFIRMED


def document_answer(document: DocumentResolution, _: Cached | None) -> Answer:
    confirmed = document.evidence.confirmed and document.plc.confirmed
    return Answer.CONFIRMED if confirmed else Answer.UNCONFIRMED


def is_answer(part: Part) -> bool:
    """A handle's DID, a DID's document: not an absence, not invalid data."""
    if isinstance(part, HandleResolution):
        return part.answer.step is Step.OK
    return part.evidence.outcome is Outcome.OK and part.plc.outcome is not Outcome.INVALID


def held_kind(cached: Cached | None) -> Held:
    if cached is None:
        return Held.NOTHING
    return Held.GOOD if is_answer(cached.part) else Held.NEGATIVE


def lifetime_kind(part: Part, status: Status) -> Kind:
    """How long a confirmed part is worth keeping: answers by the verdict they led to."""
    if is_answer(part):
        return Kind.VERIFIED if status is Status.VERIFIED else Kind.UNVERIFIED
    return Kind.ABSENT


def failure_of(part: Part) -> str:
    evidence: tuple[Evidence, ...]
    if isinstance(part, HandleResolution):
        evidence = (part.dns, part.https)
    else:
        evidence = (part.evidence, part.plc)
    failed = [e.error for e in evidence if not e.confirmed and e.error]
    return failed[0] if failed else "transient failure"
