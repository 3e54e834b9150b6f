"""Session fixtures: the real test network (PLC directory, Knot DNS, TLS hosts) on loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from resolver import Config, Nameserver
from resolver.config import parse_networks
from tests.devnet.network import DevnetState

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevnetState]:
    """Start `python -m tests.devnet` once per session; stop it by the PID it recorded."""
    workdir = tmp_path_factory.mktemp("devnet")
    state_file = workdir / "state.json"
    log = (workdir / "devnet.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.devnet",
            "--workdir",
            str(workdir),
            "--state",
            str(state_file),
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not state_file.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"test network did not start:\n{(workdir / 'devnet.log').read_text()}"
                )
            time.sleep(0.05)
        yield DevnetState.load(state_file)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


@pytest.fixture(scope="session")
def devnet_config(devnet: DevnetState) -> Config:
    """A resolver configuration pointed at the test network (never at /etc/hosts)."""
    return Config(
        plc_url=devnet.plc_url,
        dns_servers=(Nameserver.parse(devnet.dns_server),),
        ca_bundle=devnet.ca_file,
        allow_nets=parse_networks(["127.0.0.0/8"]),
        dev=True,
        https_port=devnet.https_port,
        dns_timeout=1.0,
        https_timeout=2.0,
        document_timeout=2.0,
    )


@pytest.fixture(scope="session")
def devnet_env(devnet: DevnetState) -> dict[str, str]:
    """The same configuration as environment variables, for the `atwhois` executable."""
    return {
        **os.environ,
        "ATWHOIS_DEV": "1",
        "ATWHOIS_PLC_URL": devnet.plc_url,
        "ATWHOIS_DNS_SERVERS": devnet.dns_server,
        "ATWHOIS_CA_BUNDLE": devnet.ca_file,
        "ATWHOIS_ALLOW_NETS": "127.0.0.0/8",
        "ATWHOIS_HTTPS_PORT": str(devnet.https_port),
    }
