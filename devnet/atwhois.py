"""The real `atwhois` executable, run from tests and benchmarks: a command to completion
(`run`), or `atwhois serve` as a child process (`running_daemon`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

ATWHOIS = str(Path(sys.executable).with_name("atwhois"))


def run(
    args: list[str],
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    cwd: Path | None = None,
) -> tuple[int, str, str]:
    """Exit code, stdout, stderr."""
    done = subprocess.run(
        [ATWHOIS, *args],
        env=env,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def json_lines(log: Path) -> list[dict[str, object]]:
    """A daemon's log as its JSON lines; a line that is not JSON is left out."""
    lines = []
    for line in log.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            lines.append(json.loads(line))
    return lines


@dataclass
class Daemon:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self, timeout: float = 30) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def log_lines(self) -> list[dict[str, object]]:
        return json_lines(self.log)


@contextlib.contextmanager
def running_daemon(
    env: dict[str, str],
    log: Path,
    *args: str,
    command: tuple[str, ...] = ("serve", "--port", "0"),
) -> Iterator[Daemon]:
    """`atwhois serve` (or another serving `command`), once it logs that it listens."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [ATWHOIS, *command, *args],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    daemon = None
    try:
        deadline = time.monotonic() + 30
        while daemon is None:
            for line in log.read_text().splitlines():
                if '"listening"' in line:
                    daemon = Daemon(json.loads(line)["url"], process, log)
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"atwhois {command[0]} did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield daemon
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def error_name(response: httpx.Response) -> str | None:
    """The XRPC error an answer names, when its body is a JSON object with one."""
    try:
        body = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, str) else None


@dataclass
class DaemonHere:
    """`atwhois serve` built in this process (`build_daemon`, the app `serve` runs) and
    served on a loopback socket from a thread of its own: what a test of the HTTP faces
    needs, without a process's start-up. Its log lines (the `atwhois` loggers') go to
    `log`. A test of the process itself (signals, its memory, the connection bound, its
    children) runs `running_daemon`."""

    url: str
    log: Path

    def log_lines(self) -> list[dict[str, object]]:
        return json_lines(self.log)


@contextlib.contextmanager
def daemon_here(env: dict[str, str], log: Path, *args: str) -> Iterator[DaemonHere]:
    """`atwhois serve ARGS` with `env` as its environment, in this process, until the
    context ends (then its app's clean-up runs, as at a SIGTERM)."""
    import asyncio
    import logging
    import threading

    from aiohttp import web

    from atwhois.cli.main import build_parser
    from atwhois.cli.running import configure
    from atwhois.cli.serve import build_daemon
    from atwhois.server.lifecycle import runner_settings

    argv = ["serve", "--port", "0", *args]
    parsed, extra = build_parser(["serve"]).parse_known_args(argv)
    assert not extra, extra
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        resolved = configure(parsed)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    handler = logging.FileHandler(log)
    loggers = [logging.getLogger(name) for name in ("atwhois", "aiohttp")]  # aiohttp's: errors
    for logger in loggers:
        logger.addHandler(handler)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="daemon-here", daemon=True)
    thread.start()

    async def start() -> tuple[web.AppRunner, str]:
        daemon = build_daemon(resolved.values, resolved.config)
        runner = await daemon.service.runner(daemon.app, **runner_settings())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        return runner, f"http://{host}:{port}"

    runner, url = asyncio.run_coroutine_threadsafe(start(), loop).result(60)
    try:
        yield DaemonHere(url, log)
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
        for logger in loggers:
            logger.removeHandler(handler)
        handler.close()
