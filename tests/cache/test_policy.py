"""The cache's rules: which new answer may replace which held entry (the replacement
table), and what a resolved part is worth to it (`cache.worth`)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from atwhois.cache import claims
from atwhois.cache.entry import Cached, Entry
from atwhois.cache.policy import Action, Answer, Held, Kind, replacement
from atwhois.cache.worth import document_answer, failure_of, handle_answer, held_kind, lifetime_kind
from atwhois.resolver import Evidence, Outcome, Status
from atwhois.resolver.errors import MalformedAnswer, NotFound, UpstreamTimeout
from atwhois.resolver.report import DocumentResolution, HandleResolution

ROWS = [
    # A confirmed answer (an answer, a 404/410/NXDOMAIN, invalid data really served)
    # replaces anything.
    (Held.NOTHING, Answer.CONFIRMED, Action.STORE),
    (Held.GOOD, Answer.CONFIRMED, Action.STORE),
    (Held.NEGATIVE, Answer.CONFIRMED, Action.STORE),
    # A failure or a broken answer never replaces a good entry, nor becomes absence.
    (Held.GOOD, Answer.UNCONFIRMED, Action.KEEP),
    (Held.NEGATIVE, Answer.UNCONFIRMED, Action.KEEP),
    (Held.NOTHING, Answer.UNCONFIRMED, Action.NONE),
    # HTTPS's DID while DNS failed does not override the DID DNS gave (H-RES-2).
    (Held.GOOD, Answer.PROVISIONAL, Action.KEEP),
    (Held.NOTHING, Answer.PROVISIONAL, Action.STORE),
    (Held.NEGATIVE, Answer.PROVISIONAL, Action.STORE),
]


def test_every_combination_has_a_row_and_the_table_is_these_rows() -> None:
    """The table answers every combination, and each answer is the one written here: a
    combination added to the enums without its row here fails, as does a row changed."""
    assert {(held, answer) for held, answer, _ in ROWS} == set(itertools.product(Held, Answer))
    assert {(h, a): replacement(h, a) for h, a, _ in ROWS} == {(h, a): x for h, a, x in ROWS}


@pytest.mark.parametrize(("held", "answer", "action"), ROWS)
def test_replacement_rows(held: Held, answer: Answer, action: Action) -> None:
    assert replacement(held, answer) is action


# --- what a resolved part is worth (cache/worth.py) -------------------------------------

DID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
OTHER = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
ANSWER = Evidence(Outcome.OK, (DID,))
TIMEOUT = Evidence.failure(UpstreamTimeout("took too long"), 1.0, None)
ABSENT = Evidence.failure(NotFound("NXDOMAIN"), 1.0, None)
BROKEN = Evidence.failure(MalformedAnswer("an HTML page"), 1.0, None)


def _held(part: HandleResolution | DocumentResolution) -> Cached:
    times = Entry({}, 0.0, 1.0, 2.0)
    return Cached(times, part, b"")


def test_a_handles_worth_failed_unconfirmed_and_provisional_answers() -> None:
    both = HandleResolution.of("a.example.com", ANSWER, ANSWER)
    assert handle_answer(both, None) is Answer.CONFIRMED
    failed = HandleResolution.of("a.example.com", TIMEOUT, TIMEOUT)
    assert handle_answer(failed, None) is Answer.UNCONFIRMED
    https_only = HandleResolution.of("a.example.com", TIMEOUT, ANSWER)
    assert handle_answer(https_only, None) is Answer.CONFIRMED  # nothing held to disagree with
    dns_said_other = _held(
        HandleResolution.of("a.example.com", Evidence(Outcome.OK, (OTHER,)), ANSWER)
    )
    assert handle_answer(https_only, dns_said_other) is Answer.PROVISIONAL  # H-RES-2: DNS wins
    dns_said_same = _held(both)
    assert handle_answer(https_only, dns_said_same) is Answer.CONFIRMED
    dns_confirmed_absent = HandleResolution.of("a.example.com", ABSENT, ANSWER)
    assert handle_answer(dns_confirmed_absent, dns_said_other) is Answer.CONFIRMED


def test_a_documents_worth_needs_the_fetch_and_the_log_confirmed() -> None:
    assert document_answer(DocumentResolution(DID, ANSWER), None) is Answer.CONFIRMED
    assert document_answer(DocumentResolution(DID, ABSENT), None) is Answer.CONFIRMED
    assert document_answer(DocumentResolution(DID, BROKEN), None) is Answer.UNCONFIRMED
    assert document_answer(DocumentResolution(DID, TIMEOUT), None) is Answer.UNCONFIRMED
    log_failed = DocumentResolution(DID, ANSWER, plc=TIMEOUT)
    assert document_answer(log_failed, None) is Answer.UNCONFIRMED


def test_what_is_held_an_answer_or_a_negative() -> None:
    assert held_kind(None) is Held.NOTHING
    assert held_kind(_held(HandleResolution.of("a.example.com", ANSWER, ANSWER))) is Held.GOOD
    assert held_kind(_held(HandleResolution.of("a.example.com", ABSENT, ABSENT))) is Held.NEGATIVE
    assert held_kind(_held(DocumentResolution(DID, ANSWER))) is Held.GOOD
    assert held_kind(_held(DocumentResolution(DID, ABSENT))) is Held.NEGATIVE
    invalid_log = Evidence(Outcome.INVALID, (), "a forged op")
    assert held_kind(_held(DocumentResolution(DID, ANSWER, plc=invalid_log))) is Held.NEGATIVE
    log_unchecked = Evidence(Outcome.FAILED, (), "timeout")
    assert held_kind(_held(DocumentResolution(DID, ANSWER, plc=log_unchecked))) is Held.GOOD


def test_a_parts_lifetime_follows_the_verdict_it_led_to() -> None:
    answer = DocumentResolution(DID, ANSWER)
    assert lifetime_kind(answer, Status.VERIFIED) is Kind.VERIFIED
    assert lifetime_kind(answer, Status.HANDLE_MISMATCH) is Kind.UNVERIFIED
    assert lifetime_kind(DocumentResolution(DID, ABSENT), Status.VERIFIED) is Kind.ABSENT


def test_why_a_refresh_failed_names_the_unconfirmed_step() -> None:
    assert failure_of(HandleResolution.of("a.example.com", ANSWER, TIMEOUT)) == "took too long"
    assert failure_of(DocumentResolution(DID, ANSWER, plc=TIMEOUT)) == "took too long"
    assert failure_of(DocumentResolution(DID, ANSWER)) == "transient failure"


# --- claims: an event says a DID changed, the source may not show it yet ----------------

DID = "did:plc:" + "c" * 24


def _document(body: bytes | None, outcome: Outcome = Outcome.OK) -> DocumentResolution:
    return DocumentResolution(DID, Evidence(outcome, (DID,) if body else ()), None, body)


def test_a_claim_holds_the_old_document_stale_until_a_resolution_shows_the_change() -> None:
    """An open claim: a resolution showing the document held is stored stale from the start
    (revalidating, no background refresh before the window ends); one showing another
    document, an absence or a tombstone settles and closes it, naming it; past the window,
    what the source says is taken as it is; a did:web document (its own host) settles at
    once."""
    old, new = _document(b'{"v":1}'), _document(b'{"v":2}')
    claim = claims.Claim("#identity seq 7", 100.0, 130.0, claims.seen(old))
    entry = Entry({}, 101.0, 101.0 + 3600, 101.0 + 86400)
    open_claims = {"d:x": claim}
    same = claims.as_claimed(open_claims, "d:x", old, entry, 101.0, None)
    assert same.fresh_until == 100.0 and same.revalidating == "#identity seq 7"
    assert same.retry_at == 130.0 and "d:x" in open_claims
    for shown in (new, _document(None, Outcome.NOT_FOUND)):
        still = {"d:x": claim}
        changed = claims.as_claimed(still, "d:x", shown, entry, 102.5, None)
        assert changed.fresh_until == entry.fresh_until and changed.revalidating is None
        assert changed.changed_by == "#identity seq 7; the change showed 2.5 s after it"
        assert still == {}
    expired = {"d:x": claim}
    late = claims.as_claimed(expired, "d:x", old, entry, 130.0, None)
    assert late == entry and expired == {}
    web = DocumentResolution("did:web:example.com", old.evidence, None, old.body)
    assert claims.settles(claim, web)


def test_the_change_a_claim_settled_stays_named_while_the_document_is_the_same() -> None:
    """The handles re-verified after a claim settles resolve the document again: the same
    document keeps the claim it settled; another one does not. A later claim that has not
    shown (yet) leaves it named too, while it is re-checked."""
    old, new = _document(b'{"v":1}'), _document(b'{"v":2}')
    settled = dataclasses.replace(Entry({}, 1.0, 2.0, 3.0), changed_by="#identity seq 7; …")
    held = Cached(settled, new, b"")
    entry = Entry({}, 5.0, 6.0, 7.0)
    assert claims.as_claimed({}, "d:x", new, entry, 5.0, held).changed_by == settled.changed_by
    assert claims.as_claimed({}, "d:x", old, entry, 5.0, held).changed_by is None
    later = {"d:x": claims.Claim("#identity seq 9", 4.0, 34.0, claims.seen(new))}
    waiting = claims.as_claimed(later, "d:x", new, entry, 5.0, held)
    assert waiting.revalidating == "#identity seq 9" and "d:x" in later
    assert waiting.changed_by == settled.changed_by
