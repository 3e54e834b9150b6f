"""The command line's settings: the flags of the table's settings (`atwhois.settings`), and
what a command runs with, read once from the file, the environment and its flags, each
value checked against the table (`settings.check`) and where it came from kept."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atwhois.resolver.config import Config
from atwhois.resolver.errors import InvalidInput
from atwhois.settings import (
    CONFIG_ENV,
    GROUP_TITLES,
    SETTINGS,
    SettingError,
    Values,
    check,
    from_environment,
    read_file,
)


def add_flags(parser: argparse.ArgumentParser, names: Iterable[str]) -> None:
    """The flags of these settings, by group, and `--config`. A flag not given leaves no
    attribute behind (SUPPRESS), so that a variable or the file can supply the value and
    `load` can say where each value came from."""
    wanted = set(names)
    for group_name, title in GROUP_TITLES.items():
        members = [s for s in SETTINGS.values() if s.group == group_name and s.name in wanted]
        if not members:
            continue
        group = parser.add_argument_group(title)
        for setting in members:
            options: dict[str, Any] = {
                "dest": setting.name,
                "default": argparse.SUPPRESS,
                "help": f"{setting.help} (env {setting.env}; default {setting.default_text})",
            }
            if setting.kind is bool:
                options["action"] = argparse.BooleanOptionalAction
            else:
                options["metavar"] = setting.metavar
                options["type"] = str if setting.kind in (list, Path) else setting.kind
                if setting.choices:
                    options["choices"] = setting.choices
                if setting.kind is list:
                    options["action"] = "append"
            group.add_argument(setting.flag, **options)
    parser.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="FILE",
        help=f"TOML file of settings, keys as the flags' names (env {CONFIG_ENV})",
    )


Loaded = dict[str, tuple[Any, str]]  # name -> (value, where it came from)


def load(
    args: argparse.Namespace, names: Iterable[str], environ: Mapping[str, str] | None = None
) -> Loaded:
    """The given settings among `names` and where each came from: the file (every key in it
    is checked, also the ones this command does not use: one file serves them all), then
    the environment, then the flags."""
    environ = os.environ if environ is None else environ
    wanted = set(names)
    given: Loaded = {}
    path = getattr(args, "config", None) or environ.get(CONFIG_ENV)
    if path:
        given.update((k, (v, str(path))) for k, v in read_file(path).items() if k in wanted)
    for name, value in from_environment(environ).items():
        if name in wanted:
            given[name] = (value, f"${SETTINGS[name].env}")
    for name in wanted:
        if hasattr(args, name):
            given[name] = (check(name, getattr(args, name)), "flag")
    return given


def config_of(values: Values) -> Config:
    """The resolver's configuration from a command's settings (those left to their
    defaults included)."""
    return Config.from_settings(
        {k: v for k, v in dataclasses.asdict(values).items() if v is not None}
    )


@dataclass(frozen=True, slots=True)
class Resolved:
    """The settings a command runs with, read once: every value (`values`), where each
    given one came from (`origins`: "flag", "$ATWHOIS_...", or the file's path; one not
    there has its default), and the resolver's configuration they make (`config`)."""

    values: Values
    origins: dict[str, str]
    config: Config

    def given(self, name: str) -> bool:
        return name in self.origins


def resolve(loaded: Loaded) -> Resolved:
    """`loaded` as a command uses it; a setting `Config` refuses is a `SettingError`."""
    given = {name: value for name, (value, _) in loaded.items()}
    try:
        config = Config.from_settings(given)
    except InvalidInput as err:
        raise SettingError(str(err)) from None
    origins = {name: origin for name, (_, origin) in loaded.items()}
    return Resolved(Values(**given), origins, config)
