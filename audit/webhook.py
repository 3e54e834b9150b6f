"""POST each finding as JSON to an operator's URL, with retries, off the audit's path."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import httpx

from .checks import Finding

log = logging.getLogger("atwhois.audit")


class Webhook:
    def __init__(
        self, url: str, *, attempts: int = 4, backoff: float = 0.5, timeout: float = 5.0
    ) -> None:
        self.url, self.attempts, self.backoff = url, attempts, backoff
        self._client = httpx.AsyncClient(timeout=timeout)
        self._queue: asyncio.Queue[Finding] = asyncio.Queue(maxsize=10_000)
        self._task: asyncio.Task[None] | None = None
        self.delivered = 0
        self.failed = 0

    def send(self, finding: Finding) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._deliver())
        with contextlib.suppress(asyncio.QueueFull):  # a flood: drop, and count below
            self._queue.put_nowait(finding)
            return
        self.failed += 1

    async def _deliver(self) -> None:
        while True:
            finding = await self._queue.get()
            await self._post(finding)
            self._queue.task_done()

    async def _post(self, finding: Finding) -> None:
        for attempt in range(self.attempts):
            try:
                response = await self._client.post(self.url, json=finding.to_json())
                if response.status_code < 500 and response.status_code != 429:
                    self.delivered += response.is_success
                    self.failed += not response.is_success
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(self.backoff * 2**attempt)
        self.failed += 1
        log.warning('{"event": "webhook_failed", "kind": "%s"}', finding.kind)

    async def drain(self) -> None:
        """Wait until every queued finding was delivered or given up on."""
        if self._task is not None:
            await self._queue.join()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self._client.aclose()
