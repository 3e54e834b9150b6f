"""Reading the settings from where they are given besides the command line: the TOML file
(`ATWHOIS_CONFIG`) and the `ATWHOIS_*` variables. What enters is checked against the table:
a key nobody knows, a value of the wrong type (`dev = "false"` is a string, and a truthy
one) or out of range is refused with its name, never applied as something else."""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from atwhois.foundation.errors import AtwhoisError

from .table import SETTINGS, Setting

CONFIG_ENV = "ATWHOIS_CONFIG"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class SettingError(AtwhoisError):
    """A setting that cannot be used as given."""


_KIND_NAMES = {
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    str: "a string",
    Path: "a path (a string)",
    list: "a list of strings",
}


def check(name: str, value: Any) -> Any:
    """A typed value (TOML, a flag, a converted variable) against its setting."""
    setting = SETTINGS.get(name)
    if setting is None:
        near = difflib.get_close_matches(name, SETTINGS, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise SettingError(f"unknown setting {name!r}{hint}")
    kind = setting.kind
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is list and isinstance(value, str):
        value = [value]
    if kind is Path and isinstance(value, str | os.PathLike):
        if isinstance(value, str) and _URL.match(value):  # a URL made a path is a folder
            raise SettingError(f"{name} is a file's path, not a URL: {value[:80]!r}")
        value = Path(value)
    unknown_url = (
        isinstance(value, str) and _URL.match(value) and not value.startswith(setting.schemes)
    )
    if setting.schemes and unknown_url:  # nor is any other URL a path
        known = " or ".join(setting.schemes)
        raise SettingError(f"{name} is a file's path or a {known} URL: {value[:80]!r}")
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise SettingError(f"{name} must be {_KIND_NAMES[kind]}, not {value!r}")
    if setting.choices and value not in setting.choices:
        raise SettingError(f"{name} must be one of {', '.join(setting.choices)}, not {value!r}")
    if isinstance(value, list) and not all(isinstance(item, str) for item in value):
        raise SettingError(f"{name} must be a list of strings, not {value!r}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise SettingError(f"{name} must be a finite number, not {value!r}")
        if setting.low is not None and value < setting.low:
            raise SettingError(f"{name} must be at least {setting.low:g}, not {value!r}")
        if setting.high is not None and value > setting.high:
            raise SettingError(f"{name} must be at most {setting.high:g}, not {value!r}")
    return value


def from_file(data: Mapping[str, Any]) -> dict[str, Any]:
    """A TOML file's settings, each checked (every key: one file serves every command)."""
    return {name: check(name, value) for name, value in data.items()}


def read_file(path: str | Path) -> dict[str, Any]:
    """The settings of the TOML file at `path`."""
    import tomllib  # here: most runs have no settings file

    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as err:
        raise SettingError(f"cannot read the settings file: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise SettingError(f"{path} is not TOML: {err}") from None
    return from_file(data)


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings the `ATWHOIS_*` variables give (the file is not read: `given`)."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, setting in SETTINGS.items():
        text = environ.get(setting.env)
        if text:
            values[name] = check(name, _convert(setting, text))
    return values


def given(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What the environment gives, as the command reads it without flags: the file named by
    `ATWHOIS_CONFIG`, then the `ATWHOIS_*` variables over it."""
    environ = os.environ if environ is None else environ
    path = environ.get(CONFIG_ENV)
    values = read_file(path) if path else {}
    values.update(from_environment(environ))
    return values


def parse_bool(name: str, text: str) -> bool:
    """A boolean written as text (an environment variable): only the usual spellings; any
    other word is refused rather than read as true."""
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise SettingError(f"{name} must be one of 1/true/yes/on or 0/false/no/off, not {text!r}")


def _convert(setting: Setting, text: str) -> Any:
    if setting.kind is bool:
        return parse_bool(setting.env, text)
    if setting.kind is list:
        return [item.strip() for item in text.split(",") if item.strip()]
    if setting.kind in (int, float):
        try:
            return setting.kind(text)
        except ValueError:
            kind = _KIND_NAMES[setting.kind]
            raise SettingError(f"{setting.env} must be {kind}, not {text!r}") from None
    return text
