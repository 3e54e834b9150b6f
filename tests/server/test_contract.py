"""The API contract: Schemathesis generates requests for every operation of the daemon's own
`/openapi.json` (the daemon running on the test network) and checks every answer against
it: a documented status, the documented content type, a body matching its schema, and never
a server error other than an upstream failure (502/503 with an XRPC error body)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from atwhois.server import audits_api, labels, oauth, operations, records
from atwhois.server.routes import MIRROR, SERVICE, SERVICE_AUTH, described
from devnet.atwhois import Daemon, daemon_here
from devnet.network import DevnetState

TOKEN = "contract-token"
EXAMPLES = 50  # per operation and mode (an operation that takes no input has one to send)
# A DID the mirror does not hold is answered 404 only once it has read its upstream since
# the question came (P-API-2): a poll of the upstream each (every `POLL` s), so fewer of
# those are asked.
SLOW = {"/{did}", "/{did}/data", "/{did}/log", "/{did}/log/audit", "/{did}/log/last"}
SLOW_EXAMPLES = 8
POLL = 0.1


@pytest.fixture(scope="module")
def contract_daemon(
    devnet: DevnetState, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Daemon]:
    folder = tmp_path_factory.mktemp("contract")
    args = ("--cache", "memory:", "--refresh-token", TOKEN, "--audit-db", str(folder / "a.db"))
    args += ("--plc-mirror", "--plc-db", str(folder / "mirror.db"))  # its routes are the API too
    args += ("--plc-mirror-interval", str(POLL))
    with daemon_here(devnet.env(), folder / "serve.log", *args) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def api(contract_daemon: Daemon) -> Any:
    return schemathesis.openapi.from_url(contract_daemon.url + "/openapi.json")


# what atwhois serve answers (with --plc-mirror, the mirror's read API too)
_PATHS = described(
    (
        *SERVICE,
        *operations.ROUTES,
        *audits_api.ROUTES,
        *MIRROR,
        *SERVICE_AUTH,
        *records.ROUTES,
        *labels.ROUTES,
        *oauth.ROUTES,
    )
)
OPERATIONS = [
    (path, method.upper(), mode)
    for path, methods in _PATHS.items()
    for method, spec in methods.items()
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    # an operation that takes no input has no invalid input to send
    if mode is GenerationMode.POSITIVE or "parameters" in spec or "requestBody" in spec
]
TAKES_INPUT = {
    (path, method.upper())
    for path, methods in _PATHS.items()
    for method, spec in methods.items()
    if "parameters" in spec or "requestBody" in spec
}


def sends(path: str, method: str) -> int:
    """The requests a run of one operation sends at least: its examples, or (with no input
    to vary) one."""
    if (path, method) not in TAKES_INPUT:
        return 1
    return SLOW_EXAMPLES if path in SLOW else EXAMPLES


@schemathesis.check
def no_server_error_but_upstream_failures(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 5xx must be a documented upstream failure or overload, with an error body."""
    if response.status_code < 500:
        return None
    body = response.json()
    if response.status_code not in (502, 503) or not isinstance(body, dict):
        raise AssertionError(f"server error {response.status_code}: {response.text[:300]}")
    if "error" not in body and "status" not in body:  # an XRPC error, or the report
        raise AssertionError(f"5xx without an error body: {response.text[:300]}")
    return None


CHECKS = [
    no_server_error_but_upstream_failures,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.mark.parametrize(
    ("path", "method", "mode"), OPERATIONS, ids=[f"{m.value} {v} {p}" for p, v, m in OPERATIONS]
)
def test_every_answer_matches_the_contract(
    api: Any, contract_daemon: Daemon, path: str, method: str, mode: GenerationMode
) -> None:
    operation = api[path][method]
    sent = 0

    @given(operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=SLOW_EXAMPLES if (path in SLOW and mode.value == "positive") else EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        derandomize=True,
    )
    def call(case: Any) -> None:
        nonlocal sent
        sent += 1
        case.call_and_validate(
            base_url=contract_daemon.url,
            headers={"Authorization": f"Bearer {TOKEN}"},
            checks=CHECKS,
        )

    call()
    assert sent >= sends(path, method), f"{method} {path} ({mode.value}): {sent} requests"
    assert "Traceback" not in contract_daemon.log.read_text()


def test_the_contract_run_covers_every_operation_and_is_large_enough() -> None:
    """What the tests above send, whatever order they run in (each checks its own share):
    every operation the daemon describes (18, and the mirror's 8), and at least 1,000
    requests in all."""
    assert len({(path, method) for path, method, _ in OPERATIONS}) == 27
    assert sum(sends(path, method) for path, method, _ in OPERATIONS) >= 1000
