"""Faults a test switches on at run time: a JSON file `{name: fault}` the test rewrites (by
rename, so a reader never sees half a file) and the servers reread when it changes. The
name `"*"` stands for every name without an entry of its own. A fault is a word ("servfail",
"hang") for most servers, or what the forging resolver (`devnet.forger`) does to an answer."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from pathlib import Path
from typing import Any


def write_faults(path: Path, faults: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(faults))
    tmp.rename(path)


class Faults:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None  # inode, mtime (ns), size
        self._faults: dict[str, Any] = {}

    def of(self, name: str) -> Any:
        faults = self.current()
        return faults.get(name, faults.get("*"))

    def current(self) -> dict[str, Any]:
        """Every entry of the file as it is now."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._seen, self._faults = None, {}
            return self._faults
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        # A file rewritten twice within one tick of the file system's clock may come back
        # with the same inode and time: a recent file is read again whatever its stat says.
        if seen != self._seen or time.time() - stat.st_mtime < 1.0:
            self._faults = json.loads(self.path.read_text() or "{}")
            self._seen = seen
        return self._faults


def reset(writer: asyncio.StreamWriter) -> None:
    """Close the connection with a TCP reset (RST), not a graceful close."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
