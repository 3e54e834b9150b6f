"""Faults a test switches on at run time: a JSON file `{name: fault}` the test rewrites (by
rename, so a reader never sees half a file) and the servers reread when it changes. The
name `"*"` stands for every name without an entry of its own."""

from __future__ import annotations

import json
from pathlib import Path


def write_faults(path: Path, faults: dict[str, str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(faults))
    tmp.rename(path)


class Faults:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None  # (inode, mtime in ns): a rename is a change
        self._faults: dict[str, str] = {}

    def of(self, name: str) -> str | None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._seen, self._faults = None, {}
            return None
        if (stat.st_ino, stat.st_mtime_ns) != self._seen:
            self._faults = json.loads(self.path.read_text() or "{}")
            self._seen = (stat.st_ino, stat.st_mtime_ns)
        return self._faults.get(name, self._faults.get("*"))
