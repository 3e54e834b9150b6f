"""A Redis Cluster of the test's own on loopback: 3 masters and 3 replicas of Debian's
redis-server, each on a free port with a folder of its own, made one cluster by
`redis-cli --cluster create`. A test can kill a master (`kill_master`) and wait for its
replica to take over (`wait_for_failover`), as an outage would."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from devnet.redis_server import LISTPACK

NODE_TIMEOUT_MS = 1000  # how long a master may be silent before its replica takes over
_MASTERS = 3


def _free_ports(count: int) -> list[int]:
    """Ports free now, and each with its +10000 (the cluster bus) below 65536."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port + 10000 < 65536 and port not in ports:
            ports.append(port)
    return ports


def _cli(port: int, *args: str, timeout: float = 10) -> str:
    binary = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    done = subprocess.run(
        [binary, "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.stdout


class RedisCluster:
    def __init__(self, workdir: Path, masters: int = _MASTERS) -> None:
        self.workdir = workdir
        self.ports = _free_ports(masters * 2)
        self.masters = masters
        self._processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """`redis-cluster://` with every node, as `--cache` takes it."""
        return "redis-cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def start(self) -> None:
        for port in self.ports:
            self._start_node(port)
        for port in self.ports:
            self._wait_for(lambda p=port: _cli(p, "PING").strip() == "PONG", f"node {port}")
        nodes = [f"127.0.0.1:{port}" for port in self.ports]
        created = subprocess.run(
            [
                shutil.which("redis-cli") or "/usr/bin/redis-cli",
                *("--cluster", "create", *nodes, "--cluster-replicas", "1", "--cluster-yes"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout[-2000:]}")
        for port in self.ports:
            self._wait_for(lambda p=port: self._ok(p), f"cluster_state:ok on {port}")
        self._wait_for(lambda: len(self.master_ports()) == self.masters, "the masters")
        for port in self.ports:
            self._wait_for(lambda p=port: self._synced(p), f"the replication of {port}")

    def _start_node(self, port: int) -> None:
        folder = self.workdir / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self._processes[port] = subprocess.Popen(
            [
                *(binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(folder)),
                *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
                *("--cluster-node-timeout", str(NODE_TIMEOUT_MS)),
                # a replica syncs at once (not 5 s later): one that never synced cannot
                # take over, and a test may kill a master as soon as the cluster is up
                *("--repl-diskless-sync-delay", "0"),
                *LISTPACK,
                *("--save", "", "--appendonly", "no", "--logfile", str(folder / "redis.log")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    @staticmethod
    def _ok(port: int) -> bool:
        return "cluster_state:ok" in _cli(port, "CLUSTER", "INFO")

    @staticmethod
    def _wait_for(condition: Callable[[], bool], what: str, within: float = 30) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.1)
        raise RuntimeError(f"the Redis Cluster: no {what} within {within:.0f} s")

    @staticmethod
    def _synced(port: int) -> bool:
        """A master, or a replica whose link to its master is up (it may take over)."""
        info = _cli(port, "INFO", "replication")
        return "role:master" in info or "master_link_status:up" in info

    def master_ports(self) -> list[int]:
        """The ports of the masters holding slots, as a live node sees them."""
        for port in self._live():
            lines = _cli(port, "CLUSTER", "NODES").splitlines()
            if not lines:
                continue
            masters = []
            for line in lines:
                fields = line.split()
                flags, slots = fields[2].split(","), fields[8:]
                if "master" in flags and "fail" not in flags and slots:
                    masters.append(int(fields[1].split("@")[0].rsplit(":", 1)[1]))
            return sorted(masters)
        return []

    def _live(self) -> list[int]:
        return [port for port, p in self._processes.items() if p.poll() is None]

    def kill_master(self, port: int | None = None) -> int:
        """Kill a master (the first, unless told which) at once, as a crash would: its
        replica takes over after `NODE_TIMEOUT_MS`. Its port."""
        port = port if port is not None else self.master_ports()[0]
        self._processes[port].kill()
        self._processes[port].wait(10)
        return port

    def wait_for_failover(self, killed: int, within: float = 30) -> None:
        """Until a replica has taken the killed master's slots and the cluster is ok."""

        def taken_over() -> bool:
            masters = self.master_ports()
            live = self._live()
            return (
                len(masters) == self.masters
                and killed not in masters
                and all(self._ok(port) for port in live)
            )

        self._wait_for(taken_over, f"failover of {killed}", within)

    def restart(self, port: int) -> None:
        """The killed node again: it rejoins as a replica of the master that took over."""
        self._start_node(port)
        self._wait_for(lambda: _cli(port, "PING").strip() == "PONG", f"node {port}")

    def stop(self) -> None:
        for process in self._processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self._processes.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        self._processes.clear()

    def __enter__(self) -> RedisCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
