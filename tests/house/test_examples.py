"""The Python examples of the README and the library guide run as written: those over
`atwhois.testing.World` here, their test functions called; those that reach the network on
the test network, with its names for the guide's (`alice.example.com` is an account of the
test network's PDS, a token is one its PDS minted) and the settings read from the
`ATWHOIS_*` variables, as a user's would be."""

from __future__ import annotations

import ast
import inspect
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from devnet import world
from devnet.network import DevnetState
from devnet.pds import create_account
from tests.auth.test_service_auth_network import METHOD, pds_token

ROOT = Path(__file__).parents[2]
PAGES = ("README.md", "docs/guides/library.md")
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks(page: str) -> list[str]:
    return _BLOCK.findall((ROOT / page).read_text())


def in_memory(block: str) -> bool:
    return "World(" in block


async def run(block: str, names: dict[str, Any]) -> dict[str, Any]:
    """The block run as a notebook cell would be (a top-level `await` allowed; the names of
    the page's blocks before it at hand, as a reader has them), then every `test_…`
    function it defines called; the names it left."""
    code = compile(block, "<example>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, names)  # the examples are the project's own text
    if inspect.iscoroutine(result):
        await result
    for name, value in list(names.items()):
        if name.startswith("test_") and name not in names["_tests_run"]:
            assert inspect.iscoroutinefunction(value), name
            await value()
            names["_tests_run"].append(name)
    return names


def test_the_pages_hold_examples_of_both_kinds() -> None:
    for page in PAGES:
        found = blocks(page)
        assert any(in_memory(block) for block in found), page
        assert any(not in_memory(block) for block in found), page


@pytest.mark.parametrize("page", PAGES)
async def test_the_examples_over_a_world_run_as_written(page: str) -> None:
    names: dict[str, Any] = {"__name__": "example", "_tests_run": []}
    for block in filter(in_memory, blocks(page)):
        before = len(names["_tests_run"])
        await run(block, names)
        assert len(names["_tests_run"]) > before, f"an example over World tests nothing:\n{block}"


@pytest.mark.network
@pytest.mark.parametrize("page", PAGES)
async def test_the_examples_that_reach_the_network_run_on_the_test_network(
    page: str, devnet: DevnetState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable, value in devnet.env().items():
        monkeypatch.setenv(variable, value)
    accounts = {}
    for guide_name in ("alice", "bob"):
        name = f"{guide_name}{uuid.uuid4().hex[:6]}"
        accounts[guide_name] = (create_account(devnet.pds_url, name), name)
    token = pds_token(devnet, accounts["alice"][1], METHOD)
    replaced = {
        f"{guide_name}.example.com": name + world.LIVE_HANDLE_SUFFIX
        for guide_name, (_, name) in accounts.items()
    }
    replaced |= {
        "https://plc.directory": devnet.plc_url,
        "/var/lib/my-feed/": f"{tmp_path}/",
    }
    names: dict[str, Any] = {"__name__": "example", "_tests_run": [], "token": token, "jwt": token}
    for block in [block for block in blocks(page) if not in_memory(block)]:
        for said, here in replaced.items():
            block = block.replace(said, here)
        names.pop("identity", None), names.pop("verification", None)
        await run(block, names)
        identity = names.get("identity")
        if identity is not None:
            assert identity.verified, identity.to_json()
            assert identity.did in {did for did, _ in accounts.values()}
        verification = names.get("verification")
        if verification is not None:
            assert verification.valid, verification
            assert verification.issuer == accounts["alice"][0]
