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


async def test_the_servers_asked_see_the_version_in_the_user_agent(devnet: DevnetState) -> None:
    """The well-known host of a handle resolved over HTTPS logs who asked."""
    async with Resolver(devnet.config()) as resolver:
        identity = await resolver.lookup("carol.test")  # published over HTTPS only
    assert identity.status is Status.VERIFIED and identity.https.did == identity.did
    seen = [json.loads(line) for line in (Path(devnet.workdir) / AGENTS_LOG).open()]
    agents = {line["user_agent"] for line in seen if line["host"] == "carol.test"}
    assert agents == {USER_AGENT} and USER_AGENT.startswith(f"atwhois/{VERSION} ")
