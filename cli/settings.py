"""The daemon's settings, from flags, `ATWHOIS_*` variables and a TOML file, checked against
one table: a key nobody knows, a value of the wrong type (`dev = "false"` is a string, and
a truthy one) or out of range is refused with its name, never applied as something else."""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from resolver.config import parse_bool


class SettingError(ValueError):
    """A setting that cannot be used as given."""


@dataclass(frozen=True, slots=True)
class Setting:
    kind: type  # bool, int, float, str or list (of strings)
    env: str | None = None
    low: float | None = None  # numbers: the smallest allowed value
    high: float | None = None


_PORT = {"low": 0, "high": 65535}
SETTINGS: dict[str, Setting] = {
    "host": Setting(str, "ATWHOIS_HOST"),
    "port": Setting(int, "ATWHOIS_PORT", **_PORT),
    "cache": Setting(str, "ATWHOIS_CACHE"),
    "redis": Setting(str, "ATWHOIS_REDIS"),
    "refresh_token": Setting(str, "ATWHOIS_REFRESH_TOKEN"),
    "memory_cache_mb": Setting(float, low=1, high=1024 * 1024),
    "max_concurrency": Setting(int, low=1),
    "max_resolutions": Setting(int, low=1),
    "request_timeout": Setting(float, low=0.001, high=3600),
    "request_log": Setting(bool),
    "ttl_verified": Setting(str),
    "ttl_unverified": Setting(str),
    "ttl_absent": Setting(str),
    "audit_interval": Setting(float, low=0.01),
    "audit_db": Setting(str, "ATWHOIS_AUDIT_DB"),
    "webhook": Setting(str),
    "unreachable_after": Setting(int, low=1),
    # resolution: the same as `atwhois lookup`'s flags (its variables are read by Config)
    "plc_url": Setting(str),
    "dev": Setting(bool),
    "verify_plc": Setting(bool),
    "ca_bundle": Setting(str),
    "https_port": Setting(int, low=1, high=65535),
    "dns_server": Setting(list),
    "dns_fallback": Setting(list),
    "allow_net": Setting(list),
    "timeout": Setting(float),  # its range is Config's to check, as for the flag
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
    if kind is str and isinstance(value, os.PathLike):  # a flag typed as a path
        value = os.fspath(value)
    if type(value) is not kind:
        raise SettingError(f"{name} must be {_KIND_NAMES[kind]}, not {value!r}")
    if isinstance(value, list) and not all(isinstance(item, str) for item in value):
        raise SettingError(f"{name} must be a list of strings, not {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise SettingError(f"{name} must be a finite number, not {value!r}")
        if setting.low is not None and value < setting.low:
            raise SettingError(f"{name} must be at least {setting.low:g}, not {value!r}")
        if setting.high is not None and value > setting.high:
            raise SettingError(f"{name} must be at most {setting.high:g}, not {value!r}")
    return value


_KIND_NAMES = {
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    str: "a string",
    list: "a list of strings",
}


def from_file(data: Mapping[str, Any]) -> dict[str, Any]:
    return {name: check(name, value) for name, value in data.items()}


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, setting in SETTINGS.items():
        text = environ.get(setting.env) if setting.env else None
        if not text:
            continue
        values[name] = check(name, _convert(setting.env or name, setting.kind, text))
    return values


def _convert(variable: str, kind: type, text: str) -> Any:
    if kind is bool:
        return parse_bool(variable, text)
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            raise SettingError(f"{variable} must be {_KIND_NAMES[kind]}, not {text!r}") from None
    return text
