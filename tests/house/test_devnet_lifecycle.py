"""The test network and `make run` clean up after themselves when stopped: no process of
theirs outlives them, and a temporary folder they made is gone."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_until(check, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return bool(check())


def test_the_test_network_stops_everything_and_removes_its_folder(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    devnet = subprocess.Popen(
        [sys.executable, "-m", "devnet", "--state", str(state_file)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert wait_until(state_file.exists, 60), "the test network did not start"
    state = json.loads(state_file.read_text())
    workdir = Path(state["workdir"])
    assert workdir.is_dir() and workdir.name.startswith("atwhois-devnet-")
    devnet.send_signal(signal.SIGTERM)
    assert devnet.wait(30) == 0
    assert not workdir.exists()
    assert not [pid for pid in state["pids"].values() if alive(pid)]


def test_make_run_stopped_with_sigterm_leaves_nothing_behind() -> None:
    leader, follower = pty.openpty()  # a terminal: the demo keeps serving until stopped
    demo = subprocess.Popen(
        [sys.executable, "-m", "devnet.demo"],
        cwd=ROOT,
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    os.close(follower)
    assert demo.stdout is not None
    workdir = None
    for line in demo.stdout:
        if line.startswith("(cache: "):
            workdir = Path(line.removeprefix("(cache: ").split("/cache.db")[0])
        if line.startswith("serving at"):
            break
    assert workdir is not None and workdir.is_dir()
    state = json.loads((workdir / "state.json").read_text())
    assert processes_mentioning(str(workdir))  # the daemon and the network, running
    demo.send_signal(signal.SIGTERM)
    assert demo.wait(60) == 128 + signal.SIGTERM
    os.close(leader)
    assert not workdir.exists()
    assert wait_until(lambda: not [p for p in state["pids"].values() if alive(p)], 10)
    assert wait_until(lambda: not processes_mentioning(str(workdir)), 10)


def test_a_newcomers_first_ten_minutes_without_a_terminal(tmp_path: Path) -> None:
    """Issue 31, items 1-3: `make run` without a terminal keeps serving; before it does, it
    prints the lines that point the command line at its network, which, evaluated in a
    fresh shell with none of our environment, make `atwhois alice.test` verify; its audits
    live in its own temporary folder, not in the user's home."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    demo = subprocess.Popen(
        [sys.executable, "-m", "devnet.demo"],
        cwd=ROOT,
        env={**os.environ, "HOME": str(home)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert demo.stdout is not None
    exports: list[str] = []
    url, taken = None, False
    try:
        for line in demo.stdout:
            taken = taken or line.startswith("(port 2584 is taken")
            if line.startswith("test network up in"):
                url = line.split("atwhois serve at ")[1].strip()
            if line.startswith("  export "):
                exports.append(line.strip())
            if line.startswith("serving at"):
                break
        assert url is not None and len(exports) >= 7
        assert url.endswith(":2584") != taken  # the README's port, or a line that says why not
        shell = subprocess.run(
            ["bash", "-c", "\n".join([*exports, "atwhois alice.test; echo exit=$?"])],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "alice.test: verified" in shell.stdout, shell.stdout + shell.stderr
        assert shell.stdout.strip().endswith("exit=0")
        time.sleep(2)
        assert demo.poll() is None  # still serving, with no terminal
        health = subprocess.run(
            ["curl", "-s", f"{url}/_health"], capture_output=True, text=True, timeout=30
        )
        assert '"ok": true' in health.stdout or '"ok":true' in health.stdout
        assert not (home / ".local" / "share" / "atwhois" / "audit.db").exists()
    finally:
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(60) == 128 + signal.SIGTERM
