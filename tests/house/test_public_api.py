"""`import atwhois` (issue 56): the public surface is pinned (as httpx's `test_exported_members`
pins its own), each name is documented and lives under `atwhois.`, the synchronous and the
async lookups answer on the test network, through a resolver or through a running daemon."""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import pytest

import atwhois
from atwhois.foundation.loop import run_sync
from atwhois.resolver.errors import AtwhoisError
from atwhois.testing import World
from devnet.atwhois import Daemon
from devnet.network import DevnetState
from tests.house.test_layers import imported, part

EXPORTED = {
    "AtwhoisError", "CachedResolver", "Client", "Config", "DidDeactivated", "Directory",
    "Expected", "Identity", "InvalidData", "InvalidInput", "LabelVerification",
    "LabelVerifier", "Lifetime", "MemoryStore", "NonceStore", "NotFound", "OAuthServer",
    "Policy", "RecordVerification", "RedisStore", "ReplayNeedsAVerifier", "ResolutionError",
    "Resolver", "ServiceAuthVerifier", "SqliteStore", "Status", "Store", "TokenCheck",
    "UpstreamFailure", "Verification", "WrongEventLoop", "__version__",
    "acheck_token_response", "alookup", "aoauth_server", "averify_label", "averify_record",
    "averify_service_auth", "check_token_response", "lookup", "oauth_server", "verify_label",
    "verify_record", "verify_service_auth",
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


def test_a_resolver_answers_two_sync_lookups_and_its_own_loop_refuses_a_third(
    devnet: DevnetState,
) -> None:
    """The sync calls run on the library's one loop: a `Resolver` given to two of them keeps
    its connections (each call used to make a loop and close it: "Event loop is closed").
    The same object opened in a loop of the caller's belongs to it: a sync call with it is
    refused, saying so, never an error from deep inside aiohttp."""
    resolver = atwhois.Resolver(devnet.config())
    first = atwhois.lookup("alice.test", directory=resolver)
    second = atwhois.lookup("bob.test", directory=resolver)
    assert (first.did, second.did) == (devnet.did("alice"), devnet.did("bob"))
    assert first.verified and second.verified
    run_sync(resolver.aclose())  # on the loop its connections belong to

    async def opened_here() -> None:
        async with atwhois.Resolver(devnet.config()) as mine:
            assert (await mine.lookup("carol.test")).verified
            with pytest.raises(atwhois.WrongEventLoop, match="another event loop"):
                await asyncio.to_thread(atwhois.lookup, "carol.test", directory=mine)

    asyncio.run(opened_here())


async def test_a_sync_lookup_works_where_a_loop_runs_as_in_a_notebook() -> None:
    world = World()
    did = world.add("alice.example.org")
    identity = atwhois.lookup("alice.example.org", directory=world)  # this loop is running
    assert identity.verified and identity.did == did
    assert (await atwhois.alookup("alice.example.org", directory=world)).did == did


def test_a_world_lookup_twice_through_the_sync_call_loads_nothing_of_the_command_line() -> None:
    script = (
        "import sys, atwhois\n"
        "from atwhois.testing import World\n"
        "world = World(); did = world.add('alice.example.org')\n"
        "for _ in range(2):\n"
        "    assert atwhois.lookup('alice.example.org', directory=world).did == did\n"
        "print(sorted(m for m in sys.modules if m.startswith('atwhois.cli')))\n"
    )
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"


async def test_a_world_daemon_leaves_no_folder_behind() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    before = set(Path(tempfile.gettempdir()).glob("atwhois-world-*"))
    world = World()
    world.add("alice.example.org")
    async with TestClient(TestServer(world.daemon())) as client:
        answer = await client.get(
            "/xrpc/com.atproto.identity.resolveHandle", params={"handle": "alice.example.org"}
        )
        assert answer.status == 200
        assert set(Path(tempfile.gettempdir()).glob("atwhois-world-*")) - before  # in use
    assert set(Path(tempfile.gettempdir()).glob("atwhois-world-*")) - before == set()


def test_a_typo_in_a_name_of_the_front_door_fails_the_type_check(tmp_path: Path) -> None:
    """The names `atwhois` loads on first use are its imports to a type checker (no module
    `__getattr__` answering Any): `atwhois.lokup` fails mypy, `atwhois.Resolver` is a type."""
    script = tmp_path / "user.py"
    script.write_text(
        "import atwhois\n"
        "resolver: atwhois.Resolver = atwhois.Resolver()\n"
        "identity: atwhois.Identity = atwhois.lokup('alice.example.com')\n"
    )
    root = Path(atwhois.__file__ or "").parents[1]
    cache = root / ".mypy_cache" / "front-door"  # warm after a first run
    command = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent"]
    checked = subprocess.run(
        [*command, "--cache-dir", str(cache), str(script)],
        env={**os.environ, "MYPYPATH": str(root)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and 'has no attribute "lokup"' in errors[0], checked.stdout


def test_the_library_reads_the_settings_as_the_command_does(tmp_path: Path) -> None:
    """`Config.from_environment()`: the TOML file `ATWHOIS_CONFIG` names, the `ATWHOIS_*`
    variables over it, from the one settings table, with nothing of the command line; a
    setting that is not one is refused under the one root."""
    file = tmp_path / "atwhois.toml"
    file.write_text('plc_url = "https://plc.example.com"\ntimeout = 4.0\ndev = true\n')
    environ = {"ATWHOIS_CONFIG": str(file), "ATWHOIS_TIMEOUT": "2.5"}
    config = atwhois.Config.from_environment(environ)
    assert config.plc_url == "https://plc.example.com" and config.dev  # from the file
    assert config.dns_timeout == config.https_timeout == 2.5  # the variable wins
    assert atwhois.Config.from_environment({}) == atwhois.Config()
    with pytest.raises(atwhois.AtwhoisError, match="did you mean 'plc_url'"):
        file.write_text('plc_ulr = "https://plc.example.com"\n')
        atwhois.Config.from_environment(environ)
    script = (
        "import sys, atwhois\n"
        "atwhois.Config.from_environment()\n"
        "print(sorted(m for m in sys.modules if m.startswith('atwhois.cli')))\n"
    )
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.strip() == "[]", ran.stderr


def test_no_part_of_the_library_imports_the_command_line() -> None:
    """Issue 67: nothing under `atwhois` but the command line's own modules imports
    `atwhois.cli`, except the in-process daemon of `atwhois.testing` (`World.daemon`, the
    daemon's entry point for tests)."""
    root = Path(atwhois.__file__ or "").parent
    importing = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] == "cli":
            continue
        name = ".".join(["atwhois", *relative.with_suffix("").parts]).removesuffix(".__init__")
        if any(m.startswith("atwhois.cli") for m in imported(name, path)):
            importing.append(str(relative))
    assert importing == ["testing/__init__.py"]


# What a plain install leaves out (`pip install atwhois`, no extra): a process that cannot
# import these plays one (tests/house/test_dependencies.py holds the list to pyproject.toml).
_LEFT_OUT = ("uvloop", "jinja2", "prometheus_client", "websockets", "zstandard", "redis", "psycopg")
_PLAIN = f"import sys\nfor name in {_LEFT_OUT!r}:\n    sys.modules[name] = None\n"


def test_the_library_and_its_cache_stand_on_a_plain_install() -> None:
    """Issue 67: a lookup, a cached one and a service-auth token's verification, with none
    of the daemon's stack, Redis or PostgreSQL importable."""
    script = _PLAIN + (
        "import asyncio, atwhois\n"
        "from atwhois.testing import World\n"
        "world = World(); did = world.add('alice.example.org')\n"
        "assert atwhois.lookup('alice.example.org', directory=world).did == did\n"
        "async def main():\n"
        "    async with world.cached() as cached:\n"
        "        assert (await cached.lookup('alice.example.org')).did == did\n"
        "        verifier = atwhois.ServiceAuthVerifier(cached)\n"
        "        token = world.service_token(did, 'did:web:feed.example#svc', method='a.b.c')\n"
        "        expected = atwhois.Expected('did:web:feed.example#svc', 'a.b.c')\n"
        "        assert (await verifier.verify(token, expected)).outcome == 'valid'\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.startswith('atwhois.server')))\n"
    )
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"


def test_the_command_lines_lookup_stands_on_a_plain_install_and_a_daemon_says_its_extra(
    devnet: DevnetState,
) -> None:
    def atwhois_plain(*args: str, given: str = "") -> subprocess.CompletedProcess[str]:
        script = _PLAIN + f"from atwhois.cli.main import main\nsys.exit(main({list(args)!r}))\n"
        return subprocess.run(
            [sys.executable, "-c", script],
            env=devnet.env(),
            input=given,
            capture_output=True,
            text=True,
        )

    # two at once: uvloop's loop where it is there, asyncio's here
    looked = atwhois_plain("-", "--json", given="alice.test\nbob.test\n")
    assert looked.returncode == 0, looked.stderr
    assert looked.stdout.count('"status": "verified"') == 2
    served = atwhois_plain("serve")
    assert served.returncode == 2
    assert "atwhois serve: needs the server extra" in served.stderr
    assert "pip install 'atwhois[server]'" in served.stderr and "Traceback" not in served.stderr
