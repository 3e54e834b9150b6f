"""`foundation.bounded.BoundedBody`, the one bounded read of every outbound client: a body
past its cap or its deadline is refused the moment it is, with the caller's own error."""

from __future__ import annotations

import pytest

from atwhois.foundation.bounded import BoundedBody


class Large(Exception):
    pass


class Slow(Exception):
    pass


def test_a_body_within_its_cap_is_kept_whole() -> None:
    body = BoundedBody(6, Large)
    for chunk in (b"ab", b"cd", b"ef"):
        body.add(chunk)
    assert body.value() == b"abcdef" and body.size == 6


def test_past_the_cap_the_callers_error_says_how_much_came() -> None:
    body = BoundedBody(5, lambda size: Large(size))
    body.add(b"abc")
    with pytest.raises(Large) as raised:
        body.add(b"def")
    assert raised.value.args == (6,)
    with pytest.raises(Large):
        BoundedBody(5, Large).announced(6)  # refused unread from the announced length
    BoundedBody(5, Large).announced(None)  # none announced: read, and counted


def test_past_its_deadline_a_trickle_is_refused() -> None:
    body = BoundedBody(100, Large, deadline=0.0, too_slow=lambda size: Slow(size))
    with pytest.raises(Slow):
        body.add(b"a")
