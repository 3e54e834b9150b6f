"""docker-compose.yml and the Dockerfile: Docker cannot run on these machines, so their
structure is checked here instead."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import tomllib
from pathlib import Path

import yaml

from devnet.network import DevnetState

ROOT = Path(__file__).resolve().parents[2]


def test_compose_file_structure() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"atwhois", "redis"}
    for name, service in services.items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    assert "ports" not in services["redis"]  # reached in the compose network only
    assert services["redis"]["healthcheck"]["test"][0] == "CMD"
    daemon = services["atwhois"]
    assert daemon["build"] == "."
    assert "healthcheck" not in daemon  # the image's, which follows ATWHOIS_PORT
    assert daemon["depends_on"]["redis"]["condition"] == "service_healthy"
    environment = daemon["environment"]
    # one cache setting (ATWHOIS_REDIS would override ATWHOIS_CACHE), the history on /data
    assert "ATWHOIS_REDIS" not in environment
    assert environment["ATWHOIS_CACHE"].startswith("redis://redis:6379/")
    volume = daemon["volumes"][0].split(":")
    assert volume[0] in compose["volumes"] and volume[1] == "/data"
    assert environment["ATWHOIS_AUDIT_DB"].startswith("/data/")


def test_the_cluster_compose_file_creates_the_cluster_its_fleet_names() -> None:
    """deploy/cluster: 6 cluster nodes, a one-shot service making them one cluster (3
    masters, a replica each) before the daemons start, each daemon's cache on it."""
    compose = yaml.safe_load((ROOT / "deploy" / "cluster" / "docker-compose.yml").read_text())
    services = compose["services"]
    nodes = {name: s for name, s in services.items() if name.startswith("redis-")}
    addresses = {s["networks"]["fleet"]["ipv4_address"] + ":6379" for s in nodes.values()}
    assert len(nodes) == len(addresses) == 6
    for node in nodes.values():
        command = node["command"]
        assert command[command.index("--cluster-enabled") + 1] == "yes"
        assert "ports" not in node  # reached in the compose network only
    create = services["cluster"]["command"][0]
    assert "--cluster create" in create and "--cluster-replicas 1" in create
    assert set(re.findall(r"172\.28\.0\.\d+:6379", create)) == addresses
    assert services["cluster"]["depends_on"] == {n: {"condition": "service_healthy"} for n in nodes}
    daemons = [s for name, s in services.items() if name.startswith("atwhois-")]
    assert len(daemons) == 2
    for daemon in daemons:
        assert daemon["build"] == "../.."
        assert daemon["depends_on"]["cluster"]["condition"] == "service_completed_successfully"
        assert all(port.startswith("127.0.0.1:") for port in daemon["ports"])
        cache = daemon["environment"]["ATWHOIS_CACHE"]
        named = cache.removeprefix("redis-cluster://").split("@")[1].split("?")[0].split(",")
        assert cache.startswith("redis-cluster://") and set(named) <= addresses


def test_dockerfile_runs_the_daemon_it_builds() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    assert lines[1].startswith("FROM python:3.11")
    copied = {line.split()[1] for line in lines if line.startswith("COPY ")}
    assert {"atwhois", "pyproject.toml"} <= copied  # the one package, every part inside it
    assert 'ENTRYPOINT ["atwhois", "serve"]' in lines
    assert any(line.startswith("USER ") and "root" not in line for line in lines)
    assert "EXPOSE 2584" in lines
    text = "\n".join(lines)
    assert "ATWHOIS_CACHE=sqlite:////data/" in text and "ATWHOIS_AUDIT_DB=/data/" in text
    healthcheck = next(line for line in lines if line.startswith("HEALTHCHECK"))
    assert "${ATWHOIS_PORT}" in healthcheck and "2584" not in healthcheck


def test_every_package_is_typed_and_the_licence_is_shipped() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # one name in site-packages, typed as a whole (PEP 561): every part is found inside it
    assert project["tool"]["setuptools"]["packages"]["find"]["include"] == ["atwhois*"]
    parts = {p.parent.name for p in (ROOT / "atwhois").glob("*/__init__.py")}
    assert {"resolver", "cache", "cli", "server", "mirror", "stream", "audit"} <= parts
    assert (ROOT / "atwhois" / "py.typed").is_file()
    assert project["tool"]["setuptools"]["package-data"]["atwhois"] == ["py.typed"]
    assert project["project"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")


def test_the_image_installs_the_locked_versions() -> None:
    from packaging.requirements import Requirement

    locked = dict(
        line.split("==")
        for line in (ROOT / "requirements.lock").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    image = [*project["project"]["dependencies"], *extras["server"], *extras["redis"]]
    for dependency in [*image, *extras["postgres"]]:
        requirement = Requirement(dependency)
        name = requirement.name.lower()
        assert name in locked, f"{name} is not in requirements.lock"
        assert requirement.specifier.contains(locked[name]), (name, locked[name])
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    install_lock = lines.index("RUN pip install --no-cache-dir -r requirements.lock")
    first_source = lines.index("COPY atwhois ./atwhois")
    assert install_lock < first_source  # the locked layer does not change with the code
    assert any("pip install --no-cache-dir --no-deps ." in line for line in lines)


def test_the_systemd_unit() -> None:
    import configparser

    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((ROOT / "atwhois.service").read_text())
    service = unit["Service"]
    assert service["ExecStart"].endswith("atwhois serve --config /etc/atwhois/atwhois.toml")
    assert service["StateDirectory"] == "atwhois" and service["DynamicUser"] == "yes"
    environment = [
        line.split("=", 1)[1]
        for line in (ROOT / "atwhois.service").read_text().splitlines()
        if line.startswith("Environment=")
    ]
    assert environment and all("/var/lib/atwhois/" in value for value in environment)
    assert service["KillSignal"] == "SIGTERM" and int(service["TimeoutStopSec"]) > 30
    assert service["NoNewPrivileges"] == "yes" and service["ProtectSystem"] == "strict"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def _kept_in_files() -> dict[str, str]:
    """The settings whose default is a file in the user's folders: name -> variable."""
    from atwhois.cli.config import _DEFAULT_PLACES
    from atwhois.settings import SETTINGS

    return {name: SETTINGS[name].env for name in _DEFAULT_PLACES}


def test_everything_kept_lives_on_the_volume_or_the_state_directory() -> None:
    """Issue 31, item 12: each setting whose default is a file under the user's home (the
    cache, the audit history, the PLC mirror: the settings table's default places) is set
    to the image's /data volume and to the unit's state directory, and the folders other
    parts default to are pointed there too: nothing is written outside them."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    unit = (ROOT / "atwhois.service").read_text()
    for name, variable in _kept_in_files().items():
        assert re.search(rf"{variable}=(sqlite:///)?/data/", dockerfile), name
        assert re.search(rf"Environment={variable}=(sqlite:///)?/var/lib/atwhois/", unit), name
    for folder in ("XDG_DATA_HOME", "XDG_CACHE_HOME"):
        assert f"{folder}=/data" in dockerfile and f"Environment={folder}=/var/lib/atwhois" in unit


def test_installing_the_package_says_nothing_to_warn_about(tmp_path: Path) -> None:
    """Issue 31, item 12: building the wheel gives no setuptools warning (the templates and
    the stylesheet are declared with their packages)."""
    import shutil
    import subprocess
    import sys

    leftover = not (ROOT / "build").exists()  # setuptools builds in the tree: tidy up after
    # the build backend pip would call (PEP 517), called at once: pip adds only its start-up
    build = f"from setuptools import build_meta; build_meta.build_wheel({str(tmp_path)!r})"
    built = subprocess.run(
        [sys.executable, "-W", "always", "-c", build],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if leftover:
        shutil.rmtree(ROOT / "build", ignore_errors=True)
    assert built.returncode == 0, built.stderr
    output = built.stdout + built.stderr
    assert "is absent from the `packages` configuration" not in output, output
    wheel = next(tmp_path.glob("atwhois-*.whl"))
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    # issue 56: one package at site-packages' top level (and its metadata), nothing else
    assert {name.split("/")[0] for name in names} == {
        "atwhois",
        wheel.name.split("-py")[0] + ".dist-info",
    }
    top_level = next(n for n in names if n.endswith("top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["atwhois"]
    assert "atwhois/server/templates/identity.html" in names
    assert "atwhois/server/static/atwhois.css" in names


def test_a_users_own_cache_server_and_cli_modules_do_not_shadow_atwhois(
    devnet: DevnetState, tmp_path: Path
) -> None:
    """Issue 56: in a folder of the user's own code with `cache.py`, `server.py` and
    `cli.py` (each refusing to be imported), the daemon's help, a lookup and the library
    still work: atwhois imports its parts by one name, `atwhois.…`."""
    import subprocess
    import sys

    for name in ("cache", "server", "cli", "resolver", "foundation"):
        (tmp_path / f"{name}.py").write_text(f"raise ImportError('the user\\'s own {name}')\n")
    atwhois = str(Path(sys.executable).with_name("atwhois"))
    env = {**devnet.env(), "PYTHONPATH": str(tmp_path)}  # the user's folder first, as in an app

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)

    helped = run(atwhois, "serve", "--help")
    assert helped.returncode == 0 and "--max-connections" in helped.stdout, helped.stderr
    looked = run(atwhois, "lookup", "alice.test", "--short")
    assert looked.returncode == 0 and looked.stdout.strip() == devnet.did("alice"), looked.stderr
    library = run(sys.executable, "-c", "import atwhois, atwhois.cli.serve; print('ok')")
    assert library.stdout.strip() == "ok", library.stderr


def test_the_package_is_one_tree_with_one_path_per_module() -> None:
    """Issue 67: `atwhois/` holds its parts as real folders, no link anywhere in the
    repository, so a module has one path for every tool that maps a name to a file
    (coverage over `atwhois`, tracebacks, mypy, git blame)."""
    tracked = subprocess.run(
        ["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert [line for line in tracked if line.startswith("120000")] == []
    files = sorted((ROOT / "atwhois").rglob("*.py"))
    assert len(files) > 100
    for path in files:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        spec = importlib.util.find_spec(".".join(parts))
        assert spec is not None and spec.origin == str(path), path
