"""docker-compose.yml and the Dockerfile: Docker cannot run on these machines, so their
structure is checked here instead."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_compose_file_structure() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"atwhois", "redis"}
    for name, service in services.items():
        assert service["healthcheck"]["test"][0] == "CMD", name
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    daemon = services["atwhois"]
    assert daemon["build"] == "."
    assert daemon["depends_on"]["redis"]["condition"] == "service_healthy"
    assert daemon["environment"]["ATWHOIS_REDIS"].startswith("redis://redis:6379/")
    volume = daemon["volumes"][0].split(":")
    assert volume[0] in compose["volumes"] and volume[1] == "/data"
    assert daemon["environment"]["ATWHOIS_CACHE"] == "sqlite:////data/cache.db"


def test_dockerfile_runs_the_daemon_it_builds() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    assert lines[1].startswith("FROM python:3.11")
    copied = {line.split()[1] for line in lines if line.startswith("COPY ")}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    top_level = {p.split(".")[0] for p in project["tool"]["setuptools"]["packages"]}
    assert top_level | {"pyproject.toml"} <= copied  # every package the image installs
    assert 'ENTRYPOINT ["atwhois", "serve"]' in lines
    assert any(line.startswith("USER ") and "root" not in line for line in lines)
    assert "EXPOSE 2584" in lines


def test_every_package_is_typed_and_the_licence_is_shipped() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    top_level = {p.split(".")[0] for p in project["tool"]["setuptools"]["packages"]}
    data = project["tool"]["setuptools"]["package-data"]
    for package in top_level:
        assert (ROOT / package / "py.typed").is_file(), package
        assert "py.typed" in data.get(package, []), package
    assert project["project"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
