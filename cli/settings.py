"""Every setting of atwhois, in one table: its type, its range and its help. A setting has one
name, spelt the same way everywhere: `--plc-url` on the command line, `ATWHOIS_PLC_URL` in the
environment, `plc_url` in the TOML file. Flags win over variables, variables over the file, the
file over the built-in default.

What enters is checked against the table: a key nobody knows, a value of the wrong type
(`dev = "false"` is a string, and a truthy one) or out of range is refused with its name,
never applied as something else."""

from __future__ import annotations

import argparse
import difflib
import math
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resolver.config import Config, parse_bool, parse_nameservers, parse_networks
from resolver.errors import InvalidInput


class SettingError(ValueError):
    """A setting that cannot be used as given."""


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    kind: type  # bool, int, float, str or list (of strings)
    group: str
    help: str
    default: str  # as the reference shows it
    metavar: str | None = None
    low: float | None = None  # numbers: the smallest allowed value
    high: float | None = None
    secret: bool = field(default=False)
    choices: tuple[str, ...] = ()  # strings: the only values allowed

    @property
    def env(self) -> str:
        return "ATWHOIS_" + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


RESOLUTION, STORAGE, SERVICE, AUDITS = "resolution", "cache", "service", "audits"
MIRROR = "mirror"
_TTL = "FRESH:MAX"
_TABLE = [
    Setting("plc_url", str, RESOLUTION, "PLC directory base URL", "https://plc.directory", "URL"),
    Setting(
        "dns_server",
        list,
        RESOLUTION,
        "nameserver to ask (repeatable; the variable takes a comma-separated list)",
        "the system's resolvers",
        "HOST[:PORT]",
    ),
    Setting(
        "dns_fallback",
        list,
        RESOLUTION,
        "nameserver asked when the others fail (repeatable)",
        "none",
        "HOST[:PORT]",
    ),
    Setting("ca_bundle", str, RESOLUTION, "PEM file of trusted CAs", "the system's", "FILE"),
    Setting(
        "allow_net",
        list,
        RESOLUTION,
        "let fetches reach this private or loopback range (repeatable)",
        "none: private, loopback, link-local, multicast and reserved addresses are refused",
        "CIDR",
    ),
    Setting(
        "dev",
        bool,
        RESOLUTION,
        "development: .test handles, did:web:localhost, plain http for localhost",
        "false",
    ),
    Setting(
        "verify_plc",
        bool,
        RESOLUTION,
        "replay the did:plc operation log instead of trusting the directory",
        "false",
    ),
    Setting(
        "timeout",
        float,
        RESOLUTION,
        "deadline of each step: DNS, HTTPS well-known, DID document",
        "3 for DNS, 5 for each fetch",
        "SECONDS",
    ),
    Setting(
        "https_port",
        int,
        RESOLUTION,
        "the port that stands for 443 (test networks)",
        "443",
        "PORT",
        low=1,
        high=65535,
    ),
    Setting(
        "cache",
        str,
        STORAGE,
        "cache of verified bindings: sqlite:///PATH, memory:, redis://HOST:PORT/DB",
        "lookup: none; serve: the embedded SQLite file",
        "URL",
    ),
    Setting("host", str, SERVICE, "address to bind", "127.0.0.1", "ADDRESS"),
    Setting("port", int, SERVICE, "port to bind (0: any)", "2584", "PORT", low=0, high=65535),
    Setting(
        "refresh_token",
        str,
        SERVICE,
        "bearer token that allows refreshIdentity",
        "none: refreshIdentity refused",
        "TOKEN",
        secret=True,
    ),
    Setting(
        "memory_cache_mb",
        float,
        SERVICE,
        "memory for cached entries and answers in the process",
        "64",
        "MIB",
        low=1,
        high=1024 * 1024,
    ),
    Setting("max_concurrency", int, SERVICE, "requests served at once", "256", "N", low=1),
    Setting(
        "workers",
        int,
        SERVICE,
        "processes serving the port (SO_REUSEPORT), sharing the cache store",
        "1",
        "N",
        low=1,
        high=64,
    ),
    Setting(
        "max_resolutions",
        int,
        SERVICE,
        "upstream resolutions at once; more lookups of uncached identities wait",
        "32",
        "N",
        low=1,
    ),
    Setting(
        "request_timeout",
        float,
        SERVICE,
        "deadline of one request",
        "10",
        "SECONDS",
        low=0.001,
        high=3600,
    ),
    Setting("request_log", bool, SERVICE, "a JSON line per request on stderr", "true"),
    Setting(
        "firehose",
        list,
        SERVICE,
        "follow this relay's or PDS's event stream and re-verify identities as they change "
        "(ws:// or wss:// base URL; repeatable)",
        "none",
        "URL",
    ),
    Setting(
        "cors_origin",
        list,
        SERVICE,
        "a browser origin that may read the XRPC and /v1 endpoints (repeatable; * for any)",
        "none: CORS off",
        "ORIGIN",
    ),
    Setting(
        "ttl_verified", str, SERVICE, "seconds fresh and at most, verified", "3600:86400", _TTL
    ),
    Setting("ttl_unverified", str, SERVICE, "the same, not verified", "300:3600", _TTL),
    Setting("ttl_absent", str, SERVICE, "the same, confirmed absent", "120:600", _TTL),
    Setting(
        "audit_db",
        Path,
        AUDITS,
        "the watch-list and the audit history",
        "~/.local/share/atwhois/audit.db",
        "PATH",
    ),
    Setting("webhook", str, AUDITS, "POST each audit run's findings here", "none", "URL"),
    Setting(
        "webhook_secret",
        str,
        AUDITS,
        "sign webhook bodies: X-Atwhois-Signature: sha256=HMAC-SHA256(secret, body)",
        "none: unsigned",
        "SECRET",
        secret=True,
    ),
    Setting(
        "webhook_format",
        str,
        AUDITS,
        "json (structured) or slack (a Slack incoming-webhook message)",
        "json",
        "FORMAT",
        choices=("json", "slack"),
    ),
    Setting(
        "unreachable_after",
        int,
        AUDITS,
        "transient failures in a row before an 'unreachable' finding",
        "3",
        "N",
        low=1,
    ),
    Setting(
        "audit_interval",
        float,
        AUDITS,
        "serve: re-verify the watch-list this often",
        "only on request",
        "SECONDS",
        low=0.01,
    ),
    Setting(
        "plc_mirror",
        bool,
        MIRROR,
        "serve: mirror the PLC directory (--plc-url is the upstream), verify every operation, "
        "serve its read API (GET /{did}, /export, ...) and resolve did:plc from the mirror",
        "false",
    ),
    Setting(
        "plc_db",
        str,
        MIRROR,
        "where the mirror keeps the directory: a SQLite file, or postgresql://...",
        "~/.local/share/atwhois/plc-mirror.db",
        "PATH|URL",
    ),
    Setting(
        "plc_mirror_interval",
        float,
        MIRROR,
        "seconds between polls of the upstream's /export once caught up",
        "5",
        "SECONDS",
        low=0.01,
        high=86400,
    ),
    Setting(
        "plc_mirror_workers",
        int,
        MIRROR,
        "processes that verify operations (0: in the main process)",
        "one per core when there are several",
        "N",
        low=0,
        high=256,
    ),
    Setting(
        "plc_mirror_profile",
        str,
        MIRROR,
        "answer as plc.directory does (Multikey documents, 410 for a tombstone) or as the "
        "TypeScript reference server (legacy key types, 404)",
        "directory",
        "PROFILE",
        choices=("directory", "reference"),
    ),
]
SETTINGS: dict[str, Setting] = {setting.name: setting for setting in _TABLE}
GROUP_TITLES = {
    RESOLUTION: "resolution",
    STORAGE: "cache",
    SERVICE: "service (atwhois serve)",
    AUDITS: "audits",
    MIRROR: "PLC mirror (atwhois plc mirror, serve --plc-mirror)",
}
CONFIG_ENV = "ATWHOIS_CONFIG"
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
        value = Path(value)
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
        members = [s for s in _TABLE if s.group == group_name and s.name in wanted]
        if not members:
            continue
        group = parser.add_argument_group(title)
        for setting in members:
            options: dict[str, Any] = {
                "dest": setting.name,
                "default": argparse.SUPPRESS,
                "help": f"{setting.help} (env {setting.env}; default {setting.default})",
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


def values(loaded: Loaded) -> dict[str, Any]:
    return {name: value for name, (value, _) in loaded.items()}


# How each resolution setting lands in the resolver's `Config`, and back (for `config show`).
_TO_CONFIG: dict[str, Callable[[Any], dict[str, Any]]] = {
    "plc_url": lambda v: {"plc_url": v},
    "dev": lambda v: {"dev": v},
    "verify_plc": lambda v: {"verify_plc": v},
    "ca_bundle": lambda v: {"ca_bundle": v},
    "https_port": lambda v: {"https_port": v},
    "dns_server": lambda v: {"dns_servers": parse_nameservers(v)},
    "dns_fallback": lambda v: {"dns_fallback_servers": parse_nameservers(v)},
    "allow_net": lambda v: {"allow_nets": parse_networks(v)},
    "timeout": lambda v: dict.fromkeys(("dns_timeout", "https_timeout", "document_timeout"), v),
}
FROM_CONFIG: dict[str, Callable[[Config], Any]] = {
    "plc_url": lambda c: c.plc_url,
    "dev": lambda c: c.dev,
    "verify_plc": lambda c: c.verify_plc,
    "ca_bundle": lambda c: c.ca_bundle,
    "https_port": lambda c: c.https_port,
    "dns_server": lambda c: [f"{n.host}:{n.port}" for n in c.dns_servers] or "the system's",
    "dns_fallback": lambda c: [f"{n.host}:{n.port}" for n in c.dns_fallback_servers],
    "allow_net": lambda c: [str(net) for net in c.allow_nets],
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


def names_in(*groups: str) -> list[str]:
    return [s.name for s in _TABLE if s.group in groups]


def reference() -> str:
    """The README's settings table, made from this one (`python -m cli.settings`)."""
    kinds = {bool: "bool", int: "int", float: "number", str: "string", Path: "path", list: "list"}
    lines = [
        "| setting (TOML key) | flag | environment | type | default | what it does |",
        "|---|---|---|---|---|---|",
    ]
    for group in GROUP_TITLES:
        for s in (s for s in _TABLE if s.group == group):
            flag = f"`{s.flag}`" + (f" / `--no-{s.flag[2:]}`" if s.kind is bool else "")
            lines.append(
                f"| `{s.name}` | {flag} | `{s.env}` | {kinds[s.kind]} | {s.default} | {s.help} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
