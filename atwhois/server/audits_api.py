"""The daemon's audit side: scheduled runs, `/v1/watch` (read; edited with the bearer
token), `/v1/audit/runs`, `/v1/audit/findings?since=`, and audit metrics."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import math
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from atwhois.audit import Auditor, RunReport
from atwhois.audit.runs import WATCH_LIST
from atwhois.audit.store import LabelTooLong
from atwhois.foundation.backoff import Backoff
from atwhois.resolver.errors import InvalidInput
from atwhois.resolver.untrusted import BadNumber, parse_count

from . import openapi
from .metrics import gauge
from .routes import Route
from .service import Service
from .xrpc_errors import XrpcError

log = logging.getLogger("atwhois.audit")


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, headers={"Cache-Control": "no-store"})


_ADDED = openapi.object_of({"identifier": {"type": "string"}, "added": {"type": "boolean"}})
_REMOVED = openapi.object_of({"identifier": {"type": "string"}, "removed": {"type": "boolean"}})


def _list_of(schema: str) -> dict[str, Any]:
    return {"type": "array", "items": {"$ref": f"#/components/schemas/{schema}"}}


ROUTES = (
    Route(
        "GET",
        "/v1/watch",
        "watch_list",
        {"summary": "The watch-list", "responses": openapi.responses(_list_of("Watched"), 503)},
    ),
    Route(
        "POST",
        "/v1/watch",
        "watch_add",
        {
            "summary": "Watch an identity (bearer token)",
            "security": openapi.BEARER,
            "requestBody": openapi.body(
                {"identifier": {"type": "string"}, "label": {"type": "string"}}, ["identifier"]
            ),
            "responses": {
                **openapi.responses(_ADDED, 400, 401, 403, 413, 503),
                "201": openapi.content(_ADDED, openapi.REASONS[201]),
            },
        },
    ),
    Route(
        "DELETE",
        "/v1/watch/{identifier}",
        "watch_remove",
        {
            "summary": "Stop watching an identity (bearer token)",
            "security": openapi.BEARER,
            "parameters": [openapi.PATH_IDENTIFIER],
            "responses": openapi.responses(_REMOVED, 400, 401, 403, 404, 503),
        },
    ),
    Route(
        "GET",
        "/v1/audit/runs",
        "runs",
        {
            "summary": "The latest audit runs",
            "parameters": [
                openapi.optional_query("limit", {"type": "integer", "minimum": 0, "maximum": 10000})
            ],
            "responses": openapi.responses(_list_of("Run"), 400, 503),
        },
    ),
    Route(
        "GET",
        "/v1/audit/findings",
        "findings",
        {
            "summary": "Audit findings since a time (ISO 8601 or Unix seconds)",
            "parameters": [openapi.optional_query("since")],
            "responses": openapi.responses(_list_of("Finding"), 400, 503),
        },
    ),
    Route(
        "POST",
        "/v1/audit/runs",
        "run_now",
        {
            "summary": "Audit the watch-list now (bearer token)",
            "security": openapi.BEARER,
            "responses": openapi.responses(
                {"$ref": "#/components/schemas/RunReport"}, 401, 403, 409, 503
            ),
        },
    ),
)


class AuditApi:
    def __init__(self, service: Service, auditor: Auditor, interval: float | None) -> None:
        self.service, self.auditor, self.interval = service, auditor, interval
        self.store = auditor.store
        self.last: RunReport | None = None
        self._task: asyncio.Task[None] | None = None

    def attach(self, app: web.Application) -> None:
        self.service.add_routes(app, self, ROUTES)
        self.service.metric_sources.append(self.metrics)
        if self.interval:
            app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)

    async def _start(self, _: web.Application) -> None:
        self._task = asyncio.create_task(self._schedule())

    async def _stop(self, _: web.Application) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.auditor.aclose()
        self.store.close()

    async def _schedule(self) -> None:
        """A run of the watch-list every `interval`, counted from the start of the last
        one any process started (the shared store's), and joined at once while one is
        going on: daemons sharing a store wake together and the first to open the run is
        joined by the others, rather than each running the watch-list on its own phase (as
        many runs per interval as daemons). A restart does not run it before it is due.

        A run that fails (the store restarting under it) is logged and tried again after a
        back-off: the schedule outlives it, where it used to end silently until the daemon
        was restarted."""
        assert self.interval
        backoff = Backoff(base=1.0, cap=self.interval)
        while True:
            try:
                wait = self.store.runs_shared.due_in(WATCH_LIST, self.interval)
                if wait <= 0:
                    await self._run()
                    backoff.reset()
                    continue
            except Exception as err:  # any failure: the next run may succeed
                wait = backoff.next()
                line = {"event": "audit_failed", "error": f"{type(err).__name__}: {err}"[:300]}
                log.warning(json.dumps({**line, "retry_in": round(wait, 1)}))
            await asyncio.sleep(wait)  # due then, unless another process ran it meanwhile

    async def recheck(self, changed: set[str]) -> None:
        """An event stream says these identifiers (a DID, its handles) changed: the watched
        ones among them are audited now, not at the next scheduled run, and what is found
        is delivered as any run's findings are."""
        targets = [w for w in self.store.watch_list() if w.identifier in changed]
        if targets:
            self.last = await self.auditor.run(targets, source="event stream")
            log.info(json.dumps({"event": "audit", **self.last.to_json()}))

    async def _run(self) -> RunReport:
        report = await self.auditor.run()
        self.last = report
        log.info(json.dumps({"event": "audit", **report.to_json()}))
        return report

    def _identifier(self, text: str) -> str:
        try:
            return self.service.cached.parse(text.strip()).value
        except InvalidInput as err:
            raise XrpcError(400, "InvalidRequest", str(err)) from None

    async def watch_list(self, _: web.Request) -> web.Response:
        return _json([w.to_json() for w in self.store.watch_list()])

    async def watch_add(self, request: web.Request) -> web.Response:
        self.service.authorize(request, "editing the watch-list")
        body = await self.service.json_body(request)
        if not isinstance(body.get("identifier"), str):
            raise XrpcError(400, "InvalidRequest", "identifier is required")
        label = body.get("label")
        identifier = self._identifier(body["identifier"])
        try:
            new = self.store.watch_add(identifier, label if isinstance(label, str) else None)
        except LabelTooLong as err:
            raise XrpcError(400, "InvalidRequest", str(err)) from None
        return _json({"identifier": identifier, "added": new}, 201 if new else 200)

    async def watch_remove(self, request: web.Request) -> web.Response:
        self.service.authorize(request, "editing the watch-list")
        identifier = self._identifier(request.match_info["identifier"])
        if not self.store.watch_remove(identifier):
            raise XrpcError(404, "NotWatched", f"{identifier} is not on the watch-list")
        return _json({"identifier": identifier, "removed": True})

    async def run_now(self, request: web.Request) -> web.Response:
        self.service.authorize(request, "starting an audit")
        if self.auditor.running:
            raise XrpcError(409, "AuditRunning", "an audit is already running")
        return _json((await self._run()).to_json())

    async def runs(self, request: web.Request) -> web.Response:
        try:
            limit = parse_count(request.query.get("limit", "20"), name="limit", high=10_000)
        except BadNumber as err:
            raise XrpcError(400, "InvalidRequest", str(err)) from None
        return _json(self.store.runs(limit))

    async def findings(self, request: web.Request) -> web.Response:
        text = request.query.get("since", "0")
        try:
            since = _seconds(text)
        except (ValueError, OverflowError):  # not a time; one no clock reaches
            raise XrpcError(
                400, "InvalidRequest", "since is an ISO 8601 time or Unix seconds, from 1970"
            ) from None
        return _json([f.to_json() for f in self.store.findings(since)])

    def metrics(self) -> Iterator[Metric]:
        watched = GaugeMetricFamily(
            "atwhois_watched", "Watched identities by their last status.", labels=["status"]
        )
        for status, n in sorted(self.store.watched_by_status().items()):
            watched.add_metric([status], n)
        yield watched
        findings = CounterMetricFamily(
            "atwhois_audit_findings", "Audit findings recorded, by kind.", labels=["kind"]
        )
        for kind, n in sorted(self.store.findings_by_kind().items()):
            findings.add_metric([kind], n)
        yield findings
        if self.last is not None:
            yield gauge(
                "atwhois_audit_run_seconds", "Duration of the last audit run.", self.last.seconds
            )


_LAST_SECOND = 253402300800.0  # 10000-01-01T00:00:00Z: past it no date can be written


def _seconds(text: str) -> float:
    """`since` as Unix seconds: a number (finite, ASCII) or an ISO 8601 time, from 1970 to
    the year 9999; else ValueError or OverflowError."""
    try:
        since = float(text) if text.isascii() else math.nan
    except ValueError:
        since = math.nan
    if not math.isfinite(since):
        since = datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    if not 0 <= since < _LAST_SECOND:
        raise ValueError(text)
    return since
