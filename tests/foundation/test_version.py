"""One version (issue 56): the installed distribution's, shown by `atwhois --version` and
sent in the User-Agent of the requests atwhois makes, as the test network's servers log."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from atwhois.foundation.version import USER_AGENT, VERSION
from atwhois.resolver import Resolver, Status
from devnet.network import AGENTS_LOG, DevnetState


def test_the_version_is_the_distributions() -> None:
    assert metadata.version("atwhois") == VERSION and VERSION != "0+unknown"
    shown = subprocess.run(
        [str(Path(sys.executable).with_name("atwhois")), "--version"],
        capture_output=True,
        text=True,
    )
    assert shown.stdout.strip() == f"atwhois {VERSION}"


def _agents(devnet: DevnetState, host: str) -> set[str]:
    """The User-Agents that ever asked `host` (the hosts log each one once)."""
    lines = (Path(devnet.workdir) / AGENTS_LOG).read_text().splitlines()
    return {entry["user_agent"] for entry in map(json.loads, lines) if entry["host"] == host}


async def test_the_servers_asked_see_the_version_in_the_user_agent(devnet: DevnetState) -> None:
    """The well-known host of a handle resolved over HTTPS logs who asked."""
    async with Resolver(devnet.config()) as resolver:
        identity = await resolver.lookup("carol.test")  # published over HTTPS only
    assert identity.status is Status.VERIFIED and identity.https.did == identity.did
    agents = _agents(devnet, "carol.test")
    assert USER_AGENT in agents and USER_AGENT.startswith(f"atwhois/{VERSION} ")
    assert all(agent.startswith(f"atwhois/{VERSION} (+") for agent in agents)


def test_the_operators_contact_goes_with_the_lookups(devnet: DevnetState) -> None:
    """Issue 57: `contact_url` tells a host's operators where to reach whoever runs atwhois."""
    env = {**devnet.env(), "ATWHOIS_CONTACT_URL": "https://ops.example/atwhois"}
    looked = subprocess.run(
        [str(Path(sys.executable).with_name("atwhois")), "carol.test"],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert looked.returncode == 0, looked.stdout + looked.stderr
    expected = f"atwhois/{VERSION} (+https://ops.example/atwhois)"
    assert expected in _agents(devnet, "carol.test")
