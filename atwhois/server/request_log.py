"""The daemon's log of requests: one JSON line each, written in batches, and one line for
a request aiohttp could not even parse."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TextIO

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .bodies import compact

_quoted: Callable[[str], str] = json.encoder.encode_basestring_ascii


class MalformedRequestLog(logging.Filter):
    """aiohttp answers a request it cannot parse (a request line over 8 KiB, a bad header)
    with 400 and logs it with a traceback: a stranger could fill the log with them. Such a
    record becomes one JSON line, without the traceback; every other record passes as is."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            remote = record.args[0] if isinstance(record.args, tuple) and record.args else None
            reason = " ".join(str(error.message).split())[:200]
            line = {"event": "malformed_request", "remote": remote, "reason": reason}
            record.msg, record.args = compact(line).decode(), ()
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


class RequestLog:
    """One JSON line per request, written in batches: a logging-module call per request
    costs about what the whole cached answer does."""

    def __init__(self, stream: TextIO, interval: float = 0.25) -> None:
        self._stream, self._interval = stream, interval
        self._lines: list[str] = []
        self._task: asyncio.Task[None] | None = None

    def write(
        self,
        request_id: str,
        method: str,
        path: str,
        status: int,
        seconds: float,
        remote: str | None,
    ) -> None:
        # Formatted by hand, strings through the JSON encoder's own escaping (json.dumps
        # costs several times more); the id is checked against _REQUEST_ID.
        self._lines.append(
            f'{{"ts": {time.time():.3f}, "request_id": "{request_id}", '
            f'"method": {_quoted(method)}, "path": {_quoted(path)}, "status": {status}, '
            f'"ms": {seconds * 1000:.2f}, "remote": {_quoted(remote) if remote else "null"}}}'
        )

    def flush(self) -> None:
        if self._lines:
            self._stream.write("\n".join(self._lines) + "\n")
            self._stream.flush()
            self._lines.clear()

    async def start(self, _: web.Application) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self.flush()

    async def stop(self, _: web.Application) -> None:
        if self._task is not None:
            self._task.cancel()
        self.flush()
