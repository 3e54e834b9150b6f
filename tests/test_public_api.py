"""`import atwhois` (issue 56): the public surface is pinned (as httpx's `test_exported_members`
pins its own), each name is documented and lives under `atwhois.`, the synchronous and the
async lookups answer on the test network, through a resolver or through a running daemon."""

from __future__ import annotations

import inspect
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import atwhois
from atwhois.resolver.errors import AtwhoisError
from devnet.atwhois import Daemon
from devnet.network import DevnetState
from tests.test_layers import imported, part

EXPORTED = {
    "AtwhoisError", "CachedResolver", "Client", "Config", "DidDeactivated", "Directory",
    "Identity", "InvalidData", "InvalidInput", "NotFound", "ResolutionError", "Resolver",
    "ServiceAuthVerifier", "Status", "UpstreamFailure", "Verification", "__version__",
    "alookup", "averify_service_auth", "lookup", "verify_service_auth",
}  # fmt: skip


def test_the_exported_names_are_pinned_and_each_is_documented() -> None:
    assert set(atwhois.__all__) == EXPORTED and dir(atwhois) == sorted(EXPORTED)
    for name in EXPORTED - {"__version__"}:
        value = getattr(atwhois, name)
        assert value.__module__.split(".")[0] == "atwhois", name
        assert inspect.getdoc(value), f"{name} has no documentation"
    for name in EXPORTED:
        if inspect.isclass(value := getattr(atwhois, name)) and issubclass(value, Exception):
            assert issubclass(value, AtwhoisError), name  # one root for every error


def test_the_version_is_the_distributions() -> None:
    assert atwhois.__version__ == metadata.version("atwhois")


def test_the_public_face_rests_on_the_parts_not_on_the_daemon() -> None:
    """`atwhois` imports the library's parts (the command line's configuration reader for
    the settings in the environment), never the HTTP faces: a library user does not load
    the daemon."""
    root = imported("atwhois", Path(atwhois.__file__ or ""))
    parts = {part(module) for module in root if module.startswith("atwhois")}
    assert parts <= {"resolver", "cache", "auth", "cli", "foundation"}, parts
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, atwhois; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "aiohttp" not in loaded and "atwhois.server" not in loaded  # names load on use


def test_a_script_looks_up_with_the_settings_in_its_environment(devnet: DevnetState) -> None:
    """The issue's one-liner, with the test network's settings (`ATWHOIS_*`)."""
    script = "import atwhois; print(atwhois.lookup('alice.test').status)"
    ran = subprocess.run(
        [sys.executable, "-c", script], env=devnet.env(), capture_output=True, text=True
    )
    assert ran.stdout.strip() == "verified", ran.stderr


async def test_the_async_lookup_and_a_client_of_a_daemon_agree(
    devnet: DevnetState, daemon: Daemon
) -> None:
    local = await atwhois.alookup("alice.test", config=devnet.config())
    remote = await atwhois.alookup("alice.test", directory=atwhois.Client(daemon.url))
    assert local.status is remote.status is atwhois.Status.VERIFIED
    assert local.did == remote.did == devnet.did("alice")


def test_the_synchronous_lookup_through_a_client(devnet: DevnetState, daemon: Daemon) -> None:
    identity = atwhois.lookup("bob.test", directory=atwhois.Client(daemon.url))
    assert (identity.status, identity.did) == (atwhois.Status.VERIFIED, devnet.did("bob"))
