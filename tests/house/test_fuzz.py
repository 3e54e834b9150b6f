"""A short, fixed-seed run of every fuzz target (`tests/support/fuzz.py`); `make fuzz` runs
them long."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fuzz import TARGETS, Target, XrpcTarget, fuzz

EXAMPLES = 100  # a smoke run of each target; `make fuzz` runs 100,000


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_no_input_crashes_the_parser(target: Target) -> None:
    ran, crash = fuzz(target, EXAMPLES, fixed_seed=20261130)
    assert crash == ""
    assert ran >= EXAMPLES


@pytest.fixture(scope="module")
def xrpc() -> Iterator[XrpcTarget]:
    target = XrpcTarget()
    yield target
    target.close()


def test_no_request_crashes_the_daemon(xrpc: XrpcTarget) -> None:
    ran, crash = fuzz(xrpc, EXAMPLES, fixed_seed=20261130)
    assert crash == ""
    assert ran >= EXAMPLES
