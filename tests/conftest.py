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

from tests.devnet.network import DevnetState

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevnetState]:
    """Start `python -m tests.devnet` once per session; stop it by the PID it recorded."""
    workdir = tmp_path_factory.mktemp("devnet")
    state_file = workdir / "state.json"
    log = (workdir / "devnet.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.devnet", "--workdir", str(workdir), "--state", str(state_file)],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not state_file.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"test network did not start:\n{(workdir / 'devnet.log').read_text()}")
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
