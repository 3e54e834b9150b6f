"""Reading the settings (`settings.Values`) from where they are given: the TOML file, the
environment, the command line. What enters is checked against the table: a key nobody
knows, a value of the wrong type (`dev = "false"` is a string, and a truthy one) or out of
range is refused with its name, never applied as something else."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atwhois.foundation.defaults import MIB
from atwhois.foundation.version import user_agent
from atwhois.resolver.addresses import nat64_prefix
from atwhois.resolver.config import Config, parse_bool, parse_nameservers, parse_networks
from atwhois.resolver.errors import AtwhoisError, InvalidInput

from .settings import GROUP_TITLES, SETTINGS, Setting, Values


class SettingError(AtwhoisError):
    """A setting that cannot be used as given."""


CONFIG_ENV = "ATWHOIS_CONFIG"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


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
    return {name: check(name, value) for name, value in data.items()}


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, setting in SETTINGS.items():
        text = environ.get(setting.env)
        if text:
            values[name] = check(name, _convert(setting, text))
    return values


def _convert(setting: Setting, text: str) -> Any:
    if setting.kind is bool:
        try:
            return parse_bool(setting.env, text)
        except InvalidInput as err:
            raise SettingError(str(err)) from None
    if setting.kind is list:
        return [item.strip() for item in text.split(",") if item.strip()]
    if setting.kind in (int, float):
        try:
            return setting.kind(text)
        except ValueError:
            kind = _KIND_NAMES[setting.kind]
            raise SettingError(f"{setting.env} must be {kind}, not {text!r}") from None
    return text


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
        import tomllib  # here: most runs have no settings file

        try:
            data = tomllib.loads(Path(path).read_text())
        except OSError as err:
            raise SettingError(f"cannot read the settings file: {err}") from None
        except tomllib.TOMLDecodeError as err:
            raise SettingError(f"{path} is not TOML: {err}") from None
        given.update((k, (v, str(path))) for k, v in from_file(data).items() if k in wanted)
    for name, value in from_environment(environ).items():
        if name in wanted:
            given[name] = (value, f"${SETTINGS[name].env}")
    for name in wanted:
        if hasattr(args, name):
            given[name] = (check(name, getattr(args, name)), "flag")
    return given


# How each resolution setting lands in the resolver's `Config`, and back (for `config show`).
_TO_CONFIG: dict[str, Callable[[Any], dict[str, Any]]] = {
    "plc_url": lambda v: {"plc_url": v},
    "dev": lambda v: {"dev": v},
    "verify_plc": lambda v: {"verify_plc": v},
    "check_pds": lambda v: {"check_pds": v},
    "dnssec": lambda v: {"dnssec": v},
    "dnssec_anchor": lambda v: {"dnssec_anchors": tuple(v)} if v else {},
    "dnssec_memory_mb": lambda v: {"dnssec_memory_bytes": int(v * MIB)},
    "ca_bundle": lambda v: {"ca_bundle": v},
    "https_port": lambda v: {"https_port": v},
    "dns_authoritative": lambda v: {"dns_authoritative": v},
    "dns_authoritative_port": lambda v: {"dns_authoritative_port": v},
    "plc_rate": lambda v: {"plc_rate": v},
    "host_rate": lambda v: {"host_rate": v},
    "max_park": lambda v: {"max_park": v},
    "service_auth_share": lambda v: {"service_auth_share": v},
    "reverify_share": lambda v: {"reverify_share": v},
    "contact_url": lambda v: {"user_agent": user_agent(v)} if v else {},
    "dns_server": lambda v: {"dns_servers": parse_nameservers(v)},
    "dns_fallback": lambda v: {"dns_fallback_servers": parse_nameservers(v)},
    "allow_net": lambda v: {"allow_nets": parse_networks(v)},
    "nat64_prefix": lambda v: {"nat64_prefixes": tuple(nat64_prefix(p) for p in v)},
    "timeout": lambda v: dict.fromkeys(("dns_timeout", "https_timeout", "document_timeout"), v),
}


FROM_CONFIG: dict[str, Callable[[Config], Any]] = {
    "plc_url": lambda c: c.plc_url,
    "dev": lambda c: c.dev,
    "verify_plc": lambda c: c.verify_plc,
    "check_pds": lambda c: c.check_pds,
    "dnssec": lambda c: c.dnssec,
    "dnssec_anchor": lambda c: list(c.dnssec_anchors),
    "dnssec_memory_mb": lambda c: c.dnssec_memory_bytes / MIB,
    "ca_bundle": lambda c: c.ca_bundle,
    "https_port": lambda c: c.https_port,
    "dns_authoritative": lambda c: c.dns_authoritative,
    "dns_authoritative_port": lambda c: c.dns_authoritative_port,
    "plc_rate": lambda c: c.plc_rate,
    "host_rate": lambda c: c.host_rate,
    "max_park": lambda c: c.max_park,
    "service_auth_share": lambda c: c.service_auth_share,
    "reverify_share": lambda c: c.reverify_share,
    "contact_url": lambda c: c.user_agent,
    "dns_server": lambda c: [str(n) for n in c.dns_servers] or "the system's",
    "dns_fallback": lambda c: [str(n) for n in c.dns_fallback_servers],
    "allow_net": lambda c: [str(net) for net in c.allow_nets],
    "nat64_prefix": lambda c: [str(net) for net in c.nat64_prefixes],
    "timeout": lambda c: [c.dns_timeout, c.https_timeout, c.document_timeout],
}


def resolver_config(given: Mapping[str, Any]) -> Config:
    """The resolver's configuration from the resolution settings among `given` (checked by
    `Config` itself: a directory that is not an http(s) URL, a deadline out of range)."""
    fields: dict[str, Any] = {}
    for name, convert in _TO_CONFIG.items():
        if name in given:
            fields.update(convert(given[name]))
    return Config(**fields)


def config_of(values: Values) -> Config:
    """The resolver's configuration from a command's settings (those left to their
    defaults included)."""
    return resolver_config({k: v for k, v in dataclasses.asdict(values).items() if v is not None})


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
        config = resolver_config(given)
    except InvalidInput as err:
        raise SettingError(str(err)) from None
    origins = {name: origin for name, (_, origin) in loaded.items()}
    return Resolved(Values(**given), origins, config)
