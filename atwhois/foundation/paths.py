"""Where atwhois keeps its files: data that took work to make (audits, the PLC mirror) under
the user's data folder, what can be made again (the cache) under the user's cache folder."""

from __future__ import annotations

import os
from pathlib import Path


def data_path(name: str) -> Path:
    """`name` in atwhois's folder under `$XDG_DATA_HOME` (`~/.local/share`)."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "atwhois" / name


def cache_path(name: str) -> Path:
    """`name` in atwhois's folder under `$XDG_CACHE_HOME` (`~/.cache`)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "atwhois" / name
