"""The settings reference cannot drift from the code: the example file names every setting
the daemon knows and loads cleanly (the documentation's table is made from the code:
tests/house/test_docs.py)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from atwhois import settings
from atwhois.resolver import Config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "atwhois.example.toml"


def test_the_example_file_names_every_setting_and_loads() -> None:
    text = EXAMPLE.read_text()
    named = set(re.findall(r"^#? ?([a-z0-9_]+) = ", text, re.M))
    assert named == set(settings.SETTINGS)
    merged = settings.from_file(tomllib.loads(text))
    config = Config.from_settings(merged)
    assert config.plc_url == "https://plc.directory" and config.dns_timeout == 5.0
    # every commented line is valid too, once uncommented
    uncommented = re.sub(r"^# ([a-z0-9_]+ = )", r"\1", text, flags=re.M)
    settings.from_file(tomllib.loads(uncommented))


def test_every_setting_has_one_name_in_flag_variable_and_file() -> None:
    from atwhois.cli.main import build_parser

    serve_help = _help(build_parser(), ["serve", "--help"])
    for name, setting in settings.SETTINGS.items():
        assert (
            setting.flag == "--" + name.replace("_", "-")
            and setting.env == "ATWHOIS_" + name.upper()
        )
        assert f"{setting.flag} " in serve_help or f"{setting.flag}\n" in serve_help, name
        assert f"(env {setting.env};" in " ".join(serve_help.split()), name


def _help(parser: object, argv: list[str]) -> str:
    import contextlib
    import io

    import pytest

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args(argv)  # type: ignore[attr-defined]
    return out.getvalue()


def test_config_show_says_where_each_setting_came_from(tmp_path: Path) -> None:
    import json
    import os

    from tests.support.cli import run_here as run

    config = tmp_path / "atwhois.toml"
    config.write_text('port = 2600\nrefresh_token = "s3cret-token"\ndns_server = ["10.0.0.1"]\n')
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "ATWHOIS_HOST": "0.0.0.0",
        "ATWHOIS_PLC_URL": "https://plc.example.com",
    }
    code, out, err = run(
        ["config", "show", "--config", str(config), "--max-resolutions", "8", "--json"], env
    )
    assert code == 0, err
    rows = {row["setting"]: (row["value"], row["from"]) for row in json.loads(out)}
    assert set(rows) == set(settings.SETTINGS)
    assert rows["port"] == (2600, str(config))
    assert rows["host"] == ("0.0.0.0", "$ATWHOIS_HOST")
    assert rows["max_resolutions"] == (8, "flag")
    assert rows["plc_url"] == ("https://plc.example.com", "$ATWHOIS_PLC_URL")
    assert rows["dns_server"] == (["10.0.0.1:53"], str(config))
    # where the daemon keeps things when not told, not "no value"
    assert rows["cache"] == (f"sqlite://{tmp_path}/.cache/atwhois/cache.db", "default")
    assert rows["audit_db"] == (f"{tmp_path}/.local/share/atwhois/audit.db", "default")
    assert rows["refresh_token"] == ("(set)", str(config))
    assert "s3cret-token" not in out
    text_code, text, _ = run(["config", "show", "--config", str(config)], env)
    assert text_code == 0 and "s3cret-token" not in text
    assert re.search(r"^port +2600 +\S*atwhois.toml$", text, re.M)
    config.write_text("refresh_tokn = 1\n")
    code, _, err = run(["config", "show", "--config", str(config)], env)
    assert code == 2 and "did you mean 'refresh_token'" in err


def test_config_show_prints_every_value_in_effect_aligned(tmp_path: Path) -> None:
    """Issue 31, item 4: defaults are shown as the values they are (not "built-in
    default"), a setting without a value says what that means, and the columns line up
    whatever the longest name."""
    import json
    import os

    from tests.support.cli import run_here as run

    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    code, out, err = run(["config", "show", "--json"], env)
    assert code == 0, err
    rows = {row["setting"]: (row["value"], row["from"]) for row in json.loads(out)}
    assert rows["host"] == ("127.0.0.1", "default") and rows["port"] == (2584, "default")
    assert rows["ttl_verified"] == ("3600:86400", "default")
    assert rows["memory_cache_mb"] == (64.0, "default")
    assert rows["plc_mirror_interval"] == (5.0, "default")
    for name, (value, _) in rows.items():  # no value only where none is the default
        if value is None:
            setting = settings.SETTINGS[name]
            assert setting.default is None and setting.shown, name
    assert sum(value is None for value, _ in rows.values()) <= 10
    code, text, _ = run(["config", "show"], env)
    lines = text.splitlines()
    assert len(lines) == len(settings.SETTINGS)
    assert "built-in default" not in text
    assert len({line.rindex(" default") for line in lines}) == 1  # one column for origins
    assert re.search(r"^refresh_token +none: refreshIdentity refused +default$", text, re.M)


def test_a_default_is_the_parts_own_default_not_a_copy() -> None:
    """What a setting defaults to is what the part uses when nobody configures it: the
    daemon's limits, the cache's budget and lifetimes, the audits', the mirror's."""
    import inspect

    from atwhois.audit import Auditor
    from atwhois.audit.webhook import Webhook
    from atwhois.cache import CachedResolver, Policy
    from atwhois.cache.stores import DEFAULT_MEMORY_BYTES
    from atwhois.cli.serve import _policy
    from atwhois.foundation.defaults import MIB
    from atwhois.mirror import MirrorApi
    from atwhois.mirror.follow import Follower
    from atwhois.resolver import Config
    from atwhois.server import Settings

    def default(part: object, name: str) -> object:
        return inspect.signature(part).parameters[name].default  # type: ignore[arg-type]

    values = settings.Values()
    service = Settings()
    assert (values.max_concurrency, values.request_timeout, values.request_log) == (
        service.max_concurrency,
        service.request_timeout,
        service.request_log,
    )
    assert values.memory_cache_mb * MIB == DEFAULT_MEMORY_BYTES
    assert values.max_resolutions == default(CachedResolver, "max_resolutions")
    assert _policy(values) == Policy()
    assert values.unreachable_after == default(Auditor, "unreachable_after")
    assert values.webhook_format == default(Webhook, "format")
    assert values.plc_mirror_interval == default(Follower, "interval")
    assert values.plc_mirror_profile == default(MirrorApi, "profile")
    assert (values.plc_url, values.dev, values.verify_plc) == (
        Config().plc_url,
        Config().dev,
        Config().verify_plc,
    )
