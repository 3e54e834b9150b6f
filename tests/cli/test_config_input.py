"""Configuration is input too: every setting is checked where it enters (flags, ATWHOIS_*
variables, the TOML file) and refused by name, never applied as something else."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from atwhois import settings
from atwhois.cache import open_store
from atwhois.resolver import Config
from atwhois.resolver.errors import InvalidInput
from tests.support.cli import run_here


@pytest.mark.parametrize(
    "changes",
    [
        {"dev": "false"},  # a truthy string
        {"verify_plc": 1},
        {"dns_timeout": -1.0},
        {"https_timeout": math.nan},
        {"document_timeout": math.inf},
        {"dns_timeout": 0},
        {"max_redirects": -1},
        {"plc_url": "ftp://plc.example.com"},
        {"plc_url": "plc.directory"},
        {"ca_bundle": "/nonexistent/ca.pem"},
    ],
)
def test_config_refuses_values_it_would_misread(changes: dict[str, object]) -> None:
    with pytest.raises(InvalidInput) as info:
        Config(**changes)  # type: ignore[arg-type]
    assert info.value.rule == "config" and next(iter(changes)) in str(info.value)


def test_boolean_variables_take_only_the_usual_spellings() -> None:
    assert settings.from_environment({"ATWHOIS_DEV": "false"}) == {"dev": False}
    assert settings.from_environment({"ATWHOIS_DEV": "yes"}) == {"dev": True}
    with pytest.raises(settings.SettingError, match="ATWHOIS_VERIFY_PLC"):
        settings.from_environment({"ATWHOIS_VERIFY_PLC": "maybe"})
    with pytest.raises(settings.SettingError, match="ATWHOIS_HTTPS_PORT"):
        settings.from_environment({"ATWHOIS_HTTPS_PORT": "https"})


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ({"dev": "false"}, "dev must be true or false"),
        ({"refresh_token": 12345}, "refresh_token must be a string"),
        ({"refresh_tokn": "x"}, "did you mean 'refresh_token'"),
        ({"port": "abc"}, "port must be a whole number"),
        ({"port": 70000}, "port must be at most 65535"),
        ({"memory_cache_mb": math.nan}, "finite"),
        ({"max_concurrency": 0}, "at least 1"),
        ({"dns_server": [1, 2]}, "list of strings"),
        ({"audit_db": "mysql://root@127.0.0.1:3306/audits"}, "a file's path or a sqlite://"),
        ({"plc_db": "https://plc.directory"}, "plc_db is a file's path or a sqlite://"),
    ],
)
def test_settings_are_typed(toml: dict[str, object], message: str) -> None:
    with pytest.raises(settings.SettingError, match=message):
        settings.from_file(toml)


def test_settings_from_the_environment_are_converted_and_checked() -> None:
    assert settings.from_environment({"ATWHOIS_PORT": "2600"}) == {"port": 2600}
    with pytest.raises(settings.SettingError, match="ATWHOIS_PORT"):
        settings.from_environment({"ATWHOIS_PORT": "http"})
    assert settings.from_file({"memory_cache_mb": 8, "dns_server": "127.0.0.1:53"}) == {
        "memory_cache_mb": 8.0,
        "dns_server": ["127.0.0.1:53"],
    }


def test_an_audit_database_url_of_another_kind_is_refused_and_creates_nothing(
    tmp_path: Path,
) -> None:
    """The audit store is a SQLite file or a PostgreSQL database: any other URL is a
    configuration error, from a flag or the environment, not a folder named `mysql:`
    holding a SQLite database of its own (what a PostgreSQL URL made before audits could
    live there)."""
    url = "mysql://root@127.0.0.1:3306/audits"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATWHOIS_")}
    for args, extra in (
        (["watch", "list", "--audit-db", url], {}),
        (["watch", "list"], {"ATWHOIS_AUDIT_DB": url}),
    ):
        code, _, err = run_here(args, env={**env, **extra}, cwd=tmp_path)
        assert code == 2, err
        assert "audit_db is a file's path or a sqlite:// or postgresql://" in err
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_cache_url_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for url in ("postgres://x", "postgresql://db/atwhois", "http://cache"):
        with pytest.raises(ValueError, match="not memory:"):
            open_store(url)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "toml",
    [
        'dev = "false"\n',
        "refresh_token = 12345\n",
        'cache = "postgres://x"\n',
        'cache = "redis-cluster://127.0.0.1:7000,127.0.0.1:7001/0"\n',  # a cluster has no db
        'refresh_tokn = "x"\n',
        'port = "abc"\n',
        "dev = \n",  # not TOML
    ],
)
def test_serve_refuses_a_bad_config_file(tmp_path: Path, toml: str) -> None:
    config = tmp_path / "serve.toml"
    config.write_text(toml)
    serve = ["serve", "--config", str(config), "--port", "0"]
    code, _, err = run_here(serve, env=_env(tmp_path), cwd=tmp_path)
    assert code == 2, err
    assert "bad configuration" in err and "Traceback" not in err
    assert not any(p.name.startswith("postgres") for p in tmp_path.iterdir())


@pytest.mark.parametrize(
    "args",
    [
        ["--ca-bundle", "/nonexistent/ca.pem", "alice.example.com"],
        ["--timeout", "-1", "alice.example.com"],
        ["--timeout", "nan", "alice.example.com"],
        ["--plc-url", "ftp://x", "alice.example.com"],
        ["--file", "BINARY"],
    ],
)
def test_lookup_refuses_bad_input_without_a_traceback(tmp_path: Path, args: list[str]) -> None:
    binary = tmp_path / "ids.bin"
    binary.write_bytes(b"\xff\xfe\x00garbage\x80")
    args = [str(binary) if a == "BINARY" else a for a in args]
    code, _, err = run_here(args, env=_env(tmp_path))
    assert code == 2, err
    assert "Traceback" not in err and err.strip()


def _env(tmp_path: Path) -> dict[str, str]:
    import os

    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
