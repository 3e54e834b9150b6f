"""The cache's replacement table: which new answer may replace which held entry."""

from __future__ import annotations

import itertools

import pytest

from cache.policy import Action, Answer, Held, replacement


def test_every_combination_has_a_row() -> None:
    for held, answer in itertools.product(Held, Answer):
        assert replacement(held, answer) in Action


@pytest.mark.parametrize(
    ("held", "answer", "action"),
    [
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
    ],
)
def test_replacement_rows(held: Held, answer: Answer, action: Action) -> None:
    assert replacement(held, answer) is action
