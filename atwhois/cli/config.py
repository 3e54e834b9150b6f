"""`atwhois config show`: every setting, the value in effect and where it came from."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import atwhois.settings as settings
from atwhois.audit import default_audit_path
from atwhois.cache.stores import default_sqlite_path
from atwhois.mirror import default_mirror_path

from .configuration import Resolved
from .running import configure

# Where the daemon keeps what it keeps when not told: shown as such, not as "no value".
_DEFAULT_PLACES: dict[str, Callable[[], str]] = {
    "cache": lambda: f"sqlite://{default_sqlite_path()}",
    "audit_db": lambda: str(default_audit_path()),
    "plc_db": lambda: str(default_mirror_path()),
}


def effective_settings(resolved: Resolved) -> list[dict[str, Any]]:
    """Every setting, the value the daemon uses and where it came from: the resolution
    settings as the resolver holds them, the stores' default places, secrets only as set.
    `config show` prints it; the daemon logs it when it starts."""
    rows = []
    from_config = resolved.config.as_settings()
    for name, setting in settings.SETTINGS.items():
        value = getattr(resolved.values, name)  # as given, or the default: the only copy
        origin = resolved.origins.get(name, "default")
        if name in from_config:
            value = from_config[name]
        elif value is None and name in _DEFAULT_PLACES:
            value = _DEFAULT_PLACES[name]()
        if setting.secret and value is not None:
            value = "(set)"
        if isinstance(value, Path):
            value = str(value)
        rows.append({"setting": name, "value": value, "from": origin})
    return rows


def show(args: argparse.Namespace) -> int:
    """`atwhois config show`: `effective_settings`, as text or JSON."""
    rows = effective_settings(configure(args))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = [
        (row["setting"], _text(row["value"], settings.SETTINGS[row["setting"]]), row["from"])
        for row in rows
    ]
    names = max(len(name) for name, _, _ in table)
    values = max(len(value) for _, value, _ in table)
    for name, value, origin in table:
        print(f"{name:{names}}  {value:{values}}  {origin}")
    return 0


def _text(value: Any, setting: settings.Setting) -> str:
    """A value as `config show` prints it: JSON, or for no value what that means."""
    return setting.default_text if value is None else json.dumps(value)
