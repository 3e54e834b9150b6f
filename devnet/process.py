"""Child processes of the test network, each stopped by the PID it recorded."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Child:
    argv: list[str]
    process: subprocess.Popen[bytes]

    @classmethod
    def start(
        cls,
        argv: list[str],
        *,
        log: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Child:
        with log.open("ab") as out:
            process = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=cwd,
            )
        return cls(argv, process)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM the recorded PID, then SIGKILL if it lingers."""
        if self.process.poll() is not None:
            return
        os.kill(self.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.process.wait()


def wait_for_line(child: Child, log: Path, prefix: str, *, timeout: float) -> str:
    """Wait until the child's log has a line starting with `prefix`; fail if it dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith(prefix):
                return line
        if child.process.poll() is not None:
            raise RuntimeError(f"{child.argv[0]} exited early; see {log}:\n{log.read_text()}")
        time.sleep(0.05)
    raise TimeoutError(f"{child.argv[0]} did not print {prefix!r} in {timeout}s; see {log}")


def open_sockets(pid: int) -> int:
    """The open sockets of process `pid` (listening, connections, its own clients)."""
    held = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed meanwhile
            held += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    return held


def connections_to(pid: int, port: int) -> int:
    """The established TCP connections of process `pid` to `port` (on any address)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    found = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                found += remote_port == port and fields[3] == "01" and fields[9] in inodes
    return found


def children(pid: int) -> list[int]:
    """The processes `pid` started that still run (the daemon's stream process)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found
