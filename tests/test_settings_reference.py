"""The settings reference cannot drift from the code: the example file names every setting
the daemon knows and loads cleanly, and the README's table lists every one of them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from cli import settings
from cli.serve import resolver_config
from resolver import Config

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "atwhois.example.toml"


def test_the_example_file_names_every_setting_and_loads() -> None:
    text = EXAMPLE.read_text()
    named = set(re.findall(r"^#? ?([a-z_]+) = ", text, re.M))
    assert named == set(settings.SETTINGS)
    merged = settings.from_file(tomllib.loads(text))
    config = resolver_config(merged, Config())
    assert config.plc_url == "https://plc.directory" and config.dns_timeout == 5.0
    # every commented line is valid too, once uncommented
    uncommented = re.sub(r"^# ([a-z_]+ = )", r"\1", text, flags=re.M)
    settings.from_file(tomllib.loads(uncommented))


def test_the_readme_table_lists_every_setting() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| setting (flag / TOML key)") :]
    table = table[: table.index("\n\n")]
    listed = set(re.findall(r"`([a-z_]+)`", table))
    assert set(settings.SETTINGS) <= listed, set(settings.SETTINGS) - listed
