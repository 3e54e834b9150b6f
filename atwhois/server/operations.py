"""The daemon's operations endpoints: `/_health` (liveness, degradation, upstream
recency), `/metrics` (Prometheus) and `/openapi.json` (the routes it answers). They answer
even when every request slot is taken (`service._UNGATED`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web
from prometheus_client.core import CounterMetricFamily

from atwhois.cache import CachedResolver
from atwhois.cache.stores import TieredStore
from atwhois.foundation.pace import HostPace

from . import openapi
from .answers import AnswerCache
from .bodies import json_response
from .metrics import CONTENT_TYPE, Exposition, Families, Metrics, gauge
from .routes import Route, described

ROUTES = (
    Route(
        "GET",
        "/_health",
        "health",
        {
            "summary": "Liveness, degradation and upstream recency",
            "responses": {
                "200": openapi.content(
                    openapi.object_of(
                        {
                            "ok": {"type": "boolean"},
                            "status": {"type": "string", "enum": ["ok", "degraded"]},
                            "reasons": openapi.strings(),
                            "uptime_s": {"type": "number"},
                            "store": {"type": "string"},
                            "upstream_last_answer_s_ago": {
                                "type": "object",
                                "additionalProperties": {"type": "number"},
                            },
                        }
                    )
                )
            },
        },
    ),
    Route(
        "GET",
        "/metrics",
        "prometheus",
        {
            "summary": "Prometheus metrics",
            "responses": {
                "200": {
                    "description": "text exposition",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                }
            },
        },
    ),
    Route(
        "GET",
        "/openapi.json",
        "openapi",
        {
            "summary": "This description",
            "responses": {"200": openapi.content({"type": "object"})},
        },
    ),
)


class Served(Protocol):
    """What the operations endpoints report on: the daemon (`Service`)."""

    cached: CachedResolver
    started: float
    metrics: Metrics
    answers: AnswerCache
    kept_hits: int
    upstream_seen: dict[str, float]
    health_sources: dict[str, Callable[[], Any]]
    health_problems: list[Callable[[], list[str]]]
    metric_sources: list[Families]
    exposition: Exposition
    routes: list[Route]


def parked_upstreams(pace: HostPace) -> Callable[[], list[str]]:
    """A check for `/_health`: each upstream of the operator's (the PLC directory, counted
    by its name) that asked for a pause, named while it lasts (POL-PARK-2): the lookups
    that need it are unavailable meanwhile. A stranger's host (`web`) that asks is none of
    the daemon's health: anyone could make it unhealthy with a 429 of their own."""

    def problems() -> list[str]:
        return [
            f"upstream {host} parked: it asked for a pause (Retry-After); "
            f"lookups that need it are unavailable for {left:.0f} s more"
            for host, left in sorted(pace.parked().items())
            if pace.kind_of(host) == host
        ]

    return problems


class Operations:
    def __init__(self, service: Served) -> None:
        self.service = service

    async def health(self, _: web.Request) -> web.Response:
        """200 while the daemon answers; `status` says `degraded`, and why, while it
        answers with less than it should (a store away: memory and upstreams only), and
        `ok` is false while a follower makes no progress (its answers may be stale)."""
        now = time.time()
        seen = {k: round(now - t, 1) for k, t in self.service.upstream_seen.items()}
        problems = [problem for check in self.service.health_problems for problem in check()]
        reasons = [*await self.service.cached.store.health(), *problems]
        return json_response(
            {
                "ok": not problems,
                "status": "degraded" if reasons else "ok",
                "reasons": reasons,
                "uptime_s": round(now - self.service.started, 1),
                "pid": os.getpid(),  # which worker answered (serve --workers)
                "store": self.service.cached.store.name,
                "upstream_last_answer_s_ago": seen,
                **{name: source() for name, source in self.service.health_sources.items()},
            },
            headers={"Cache-Control": "no-store"},
        )

    async def prometheus(self, _: web.Request) -> web.Response:
        store = self.service.cached.store
        degraded = bool(await store.health())
        counts = self.service.cached.counts()
        counts["fresh"] = counts.get("fresh", 0) + self.service.kept_hits
        families = [
            *self.service.metrics.families(counts),
            gauge(
                "atwhois_inflight_resolutions",
                "Upstream resolutions in flight.",
                self.service.cached.inflight,
            ),
            gauge("atwhois_cache_entries", "Entries in the cache store.", await store.count()),
            gauge(
                "atwhois_cache_memory_bytes",
                "Bytes held by the memory tier and the rendered answers.",
                store.used_bytes + self.service.answers.used_bytes,
            ),
            gauge("atwhois_degraded", "1 while /_health says degraded.", int(degraded)),
        ]
        if isinstance(store, TieredStore):
            errors = CounterMetricFamily(
                "atwhois_store_errors",
                "Operations the shared store failed (the daemon fell back to memory).",
                labels=["store"],
            )
            errors.add_metric([store.below.name], store.errors)
            families.append(errors)
        for source in self.service.metric_sources:
            families.extend(source())
        body = self.service.exposition.render(families)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def openapi(self, _: web.Request) -> web.Response:
        return json_response(openapi.document(described(self.service.routes)))
