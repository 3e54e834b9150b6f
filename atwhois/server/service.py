"""The local HTTP cache service (`atwhois serve`): the com.atproto.identity XRPC methods,
answered from the cache of verified bindings, plus atwhois's own detailed report.

Unlike the lexicon's minimum, `resolveHandle` answers only with a bidirectionally verified
DID. Inputs are checked against the lexicon formats (400 `InvalidRequest`); failures get the
error names each method's lexicon declares (`xrpc_errors`), 401/403 on `refreshIdentity`,
and 502 (with `Retry-After`) when the upstream failed and nothing usable is cached.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from atwhois.cache import CachedResolver
from atwhois.cache.run import Upstream
from atwhois.foundation import defaults
from atwhois.resolver import Identity, Status
from atwhois.resolver.syntax import is_valid_did
from atwhois.resolver.untrusted import parse_json

from . import hooks, operations
from .answers import AnswerCache, Rendered, cache_control
from .bodies import compact, did_body, json_bytes, json_response, with_document
from .metrics import Answered, Exposition, Families, Metrics
from .request_log import RequestLog
from .routes import (
    BY_NSID,
    FORMATS,
    SERVICE,
    Format,
    Handler,
    Route,
    XrpcMethod,
    add_routes,
)
from .xrpc_errors import Failure, XrpcError

_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_CHANGES_BEFORE = web.RequestKey("changes_before", int)  # the answer cache's count at the start


@dataclass(frozen=True, slots=True)
class Settings:
    refresh_token: str | None = None  # refreshIdentity is refused without one
    max_concurrency: int = defaults.MAX_CONCURRENCY  # the rest wait briefly, then 503
    request_timeout: float = defaults.REQUEST_TIMEOUT  # the shared resolution goes on
    max_body: int = 16 * 1024
    retry_after: int = 30  # seconds, on 502 and 503
    request_log: bool = defaults.REQUEST_LOG  # one JSON line per request on stderr
    answer_cache_bytes: int = 32 * 1024 * 1024  # rendered answers of fresh hits
    cors_origins: tuple[str, ...] = ()  # browser origins that may read the API ("*": any)


# Operations endpoints answer even when every request slot is taken: a health check that
# queued behind the load would flap a container exactly when it is busiest.
_UNGATED = frozenset({"/_health", "/metrics"})
_PREFLIGHT = {
    "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
    "Access-Control-Allow-Headers": "Accept, Content-Type, X-Request-Id",
    "Access-Control-Max-Age": "86400",
}
log = logging.getLogger("atwhois.serve")


def _in_format(name: str, value: str, kind: Format) -> str:
    """The lexicon's string formats, strictly: no `@`, no at:// URI, no profile URL (those
    are UI conveniences, H-SYN-7); the CLI accepts them, the API does not."""
    if not FORMATS[kind](value):
        raise XrpcError(400, "InvalidRequest", f"{name} must be a {kind} (got {value[:80]!r})")
    return value


_RESOLVE_HANDLE = BY_NSID["com.atproto.identity.resolveHandle"]
_RESOLVE_DID = BY_NSID["com.atproto.identity.resolveDid"]
_RESOLVE_IDENTITY = BY_NSID["com.atproto.identity.resolveIdentity"]
_REFRESH_IDENTITY = BY_NSID["com.atproto.identity.refreshIdentity"]
_MINI_DOC = BY_NSID["com.bad-example.identity.resolveMiniDoc"]


class Service:
    def __init__(self, cached: CachedResolver, settings: Settings) -> None:
        self.cached = cached
        self.settings = settings
        self.metrics = Metrics()
        self.started = time.time()
        self._gate = asyncio.Semaphore(settings.max_concurrency)
        self.answers = AnswerCache(cached.store, settings.answer_cache_bytes, cached.clock)
        self.request_log = RequestLog(sys.stderr)
        self.metric_sources: list[Families] = []  # more families for /metrics (audits)
        self.health_sources: dict[str, Callable[[], Any]] = {}  # more for /_health (streams)
        # why a follower (of the mirror's upstream, of an event stream) is not doing its job
        self.health_problems: list[Callable[[], list[str]]] = []
        self.exposition = Exposition()
        self.routes: list[Route] = []  # what /openapi.json describes: the routes added
        self.kept_hits = 0
        self.upstream_seen: dict[str, float] = {}  # upstream kind -> when it last answered
        cached.observe_upstreams(self._upstream)
        # Request ids: a random prefix per process and a count (a random id per request
        # cost a system call each).
        self._id_prefix, self._ids = os.urandom(4).hex(), itertools.count()

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=self.settings.max_body, middlewares=[self._middleware]
        )
        self.add_routes(app, self, SERVICE)
        self.add_routes(app, operations.Operations(self), operations.ROUTES)
        app.on_startup.append(self.request_log.start)
        app.on_cleanup.append(self.request_log.stop)
        app.on_cleanup.append(self._close)
        return app

    def add_routes(self, app: web.Application, face: object, routes: tuple[Route, ...]) -> None:
        """`routes`, answered by `face`, on `app` and in its `/openapi.json`."""
        add_routes(app, face, routes)
        self.routes.extend(routes)

    async def _close(self, _: web.Application) -> None:
        await self.cached.aclose()

    # --- middleware: request id, structured log, limits, XRPC errors ------------------

    def _request_id(self, request: web.BaseRequest) -> str:
        """The caller's X-Request-Id when it is one we can log, else one of ours."""
        given = request.headers.get("X-Request-Id")
        if given and _REQUEST_ID.fullmatch(given):
            return given
        return f"{self._id_prefix}{next(self._ids) & 0xFFFFFFFF:08x}"

    def _kept_answer(self, request: web.BaseRequest) -> Rendered | None:
        """The answer kept for this request (found by its target as sent, `raw_path`: no
        URL is parsed to find it), or None."""
        rendered = self.answers.answer(request.raw_path) if request.method == "GET" else None
        if rendered is not None:
            self.kept_hits += 1  # fresh hits the cached lookup never saw
        return rendered

    async def runner(self, app: web.Application, **settings: Any) -> web.AppRunner:
        """`app`'s runner (with `settings`), set up, its server answering kept answers
        first (`_answer_kept_first`)."""
        runner = web.AppRunner(app, **settings)
        await runner.setup()
        assert runner.server is not None  # set up
        self._answer_kept_first(runner.server)
        return runner

    def _answer_kept_first(self, server: web.Server) -> None:
        """Have `server` answer a request for a kept answer itself, before the router and
        the middleware chain, as ready bytes (`hooks.Written`): a hit took 32 us with them,
        25 without; through aiohttp's response it cost 1.2-1.4 times the bare aiohttp
        handler's answer, as ready bytes 0.8 or less (`bench hits`). A kept answer whose
        headers depend on the request (CORS: on its Origin) or that cannot be sent whole
        goes through aiohttp's response. Every other request goes on to the app, whose
        middleware answers kept answers too where this is not installed (an app run by
        another runner)."""

        kept: dict[str, Answered] = {}  # each kept method's counters, bound once

        def first(routed: hooks.Handler) -> hooks.Handler:
            async def handle(request: web.BaseRequest) -> web.StreamResponse:
                started = time.perf_counter()
                rendered = self._kept_answer(request)
                if rendered is None:
                    return await routed(request)
                request_id = self._request_id(request)
                if self.settings.cors_origins or not hooks.sent_whole(request):
                    response = json_bytes(200, rendered.body, rendered.cache)
                    self._finish(request, response, request_id, started, rendered.path)
                    return response
                head = (rendered.head, b"X-Request-Id: ", request_id.encode(), b"\r\n")
                answered = kept.get(rendered.path)
                if answered is None:
                    answered = kept[rendered.path] = self.metrics.answered(rendered.path, 200)
                self._count(request, request_id, rendered.path, 200, started, answered)
                return hooks.Written(head, rendered.body)

            return handle

        hooks.answer_first(server, first)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        request_id = self._request_id(request)
        started = time.perf_counter()
        resource = request.match_info.route.resource
        endpoint = resource.canonical if resource is not None else "unmatched"
        response: web.StreamResponse
        try:
            kept = self._kept_answer(request)
            if kept is not None:
                response = json_bytes(200, kept.body, kept.cache)
            elif request.method == "OPTIONS" and self._cors_origin(request):
                response = web.Response(status=204, headers=_PREFLIGHT)
            else:
                request[_CHANGES_BEFORE] = self.answers.changes
                if request.path in _UNGATED:
                    response = await handler(request)
                else:
                    response = await self._limited(request, handler)
        except XrpcError as err:
            headers = {"Retry-After": str(err.retry_after)} if err.retry_after else {}
            headers["Cache-Control"] = err.cache
            response = json_response({"error": err.error, "message": str(err)}, err.status, headers)
        except web.HTTPException as err:
            status, message = err.status, err.reason
            name = "PayloadTooLarge" if status == 413 else "InvalidRequest"
            if status == 404:
                name = "NotFound"
            if status == 404 and request.path.startswith("/xrpc/"):
                # XRPC's own answer for a method this server does not have (a 404 would say
                # it speaks no XRPC at all)
                status, name = 501, "MethodNotImplemented"
                message = f"{request.path.removeprefix('/xrpc/')[:100]} is not a method here"
            if status == 405:
                name = "MethodNotAllowed"
            response = json_response({"error": name, "message": message}, status)
        except Exception:
            log.exception(
                "request %s %s failed (request id %s)", request.method, request.path, request_id
            )
            message = f"unexpected error; the daemon logged it under request id {request_id}"
            body = {"error": "InternalServerError", "message": message}
            response = json_response(body, 500, {"Cache-Control": "no-store"})
        self._finish(request, response, request_id, started, endpoint)
        return response

    def _finish(
        self,
        request: web.BaseRequest,
        response: web.StreamResponse,
        request_id: str,
        started: float,
        endpoint: str,
    ) -> None:
        """What every answer gets: its request id, CORS headers, metrics, a log line."""
        response.headers["X-Request-Id"] = request_id
        if request.method in ("GET", "HEAD", "OPTIONS") and (origin := self._cors_origin(request)):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = "X-Request-Id, Retry-After"
        if self._varies_by_origin(request):
            # the answer differs by Origin (allowed or not): a shared cache must keep both
            response.headers["Vary"] = "Origin"
        answered = self.metrics.answered(endpoint, response.status)
        self._count(request, request_id, request.path, response.status, started, answered)

    def _count(
        self,
        request: web.BaseRequest,
        request_id: str,
        path: str,
        status: int,
        started: float,
        answered: Answered,
    ) -> None:
        """An answer's metrics (`answered`: its endpoint's and status') and log line."""
        seconds = time.perf_counter() - started
        answered.observe(seconds)
        if self.settings.request_log:
            self.request_log.write(
                request_id, request.method, path, status, seconds, request.remote
            )

    async def _limited(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._gate.locked():
            try:
                async with asyncio.timeout(1.0):
                    await self._gate.acquire()
            except TimeoutError:
                raise XrpcError(
                    503, "NotEnoughResources", "too many requests in flight", retry_after=1
                ) from None
        else:
            await self._gate.acquire()
        try:
            return await handler(request)
        finally:
            self._gate.release()

    # --- lookups ----------------------------------------------------------------------

    def _param(self, request: web.Request, method: XrpcMethod) -> str:
        """The method's query parameter, which its lexicon requires, in its lexicon format."""
        name = method.parameter
        value = request.query.get(name)
        if not value:
            raise XrpcError(400, "InvalidRequest", f"the {name} parameter is required")
        return _in_format(name, value, method.format)

    async def _lookup(self, identifier: str, *, refresh: bool = False) -> Identity:
        look = self.cached.refresh if refresh else self.cached.lookup
        identity = await look(identifier, timeout=self.settings.request_timeout)
        if identity.status is Status.INVALID_INPUT:
            raise XrpcError(400, "InvalidRequest", identity.error or "invalid identifier")
        return identity

    def _upstream(self, step: Upstream) -> None:
        if step.answered_at is not None:
            self.upstream_seen[step.kind] = step.answered_at
        if step.seconds is not None:
            self.metrics.upstream_seconds[step.kind].observe(step.seconds)

    def _failure(self, identity: Identity, table: dict[Status, Failure]) -> XrpcError:
        """The method's error for a lookup that did not give what it asks for."""
        status, name = table[identity.status]
        message = f"{identity.status}: {identity.error or identity.status}"
        if identity.status is Status.UNAVAILABLE:
            return XrpcError(status, name, message, retry_after=self.settings.retry_after)
        cache = cache_control(identity) if status < 500 else "no-store"
        return XrpcError(status, name, message, cache=cache)

    def _document(self, identity: Identity, table: dict[Status, Failure]) -> bytes:
        document = identity.servable_document
        if document is None:
            raise self._failure(identity, table)
        return document

    async def resolve_handle(self, request: web.Request) -> web.Response:
        identity = await self._lookup(self._param(request, _RESOLVE_HANDLE))
        if identity.status is not Status.VERIFIED:
            raise self._failure(identity, _RESOLVE_HANDLE.errors)
        assert identity.did is not None  # verified
        body = did_body(identity.did)
        return self._answer(request, identity, body, identity.servable_document)

    def _answer(
        self, request: web.Request, identity: Identity, body: bytes, document: bytes | None
    ) -> web.Response:
        """`body`, and what `identity` answers kept for the next requests (`document`: its
        servable document, or None)."""
        self.answers.put(identity, document, request[_CHANGES_BEFORE])
        return json_bytes(200, body, cache_control(identity))

    async def resolve_did(self, request: web.Request) -> web.Response:
        identity = await self._lookup(self._param(request, _RESOLVE_DID))
        document = self._document(identity, _RESOLVE_DID.errors)
        return self._answer(request, identity, with_document({}, document), document)

    def _identity_info(
        self,
        identity: Identity,
        identifier: str,
        table: dict[Status, Failure] = _RESOLVE_IDENTITY.errors,
    ) -> tuple[dict[str, Any], bytes]:
        """DID and verified handle (or `handle.invalid`), and the document. A handle that
        could not be checked now is an upstream failure, never `handle.invalid`: that
        would say the binding fails when nobody knows."""
        by_handle = not is_valid_did(identifier)
        if identity.status is Status.UNAVAILABLE or (
            by_handle and identity.status is not Status.VERIFIED
        ):
            raise self._failure(identity, table)
        document = self._document(identity, table)
        return {"did": identity.did, "handle": identity.handle}, document

    async def resolve_identity(self, request: web.Request) -> web.Response:
        identifier = self._param(request, _RESOLVE_IDENTITY)
        identity = await self._lookup(identifier)
        fields, document = self._identity_info(identity, identifier)
        return self._answer(request, identity, with_document(fields, document), document)

    def _cors_origin(self, request: web.BaseRequest) -> str | None:
        """What `Access-Control-Allow-Origin` says for this request: CORS is for the read
        endpoints (XRPC and /v1), for the configured origins only, off by default."""
        origins = self.settings.cors_origins
        if not origins or not request.path.startswith(("/xrpc/", "/v1/")):
            return None
        if "*" in origins:
            return "*"
        origin = request.headers.get("Origin")
        return origin if origin in origins else None

    def _varies_by_origin(self, request: web.BaseRequest) -> bool:
        origins = self.settings.cors_origins
        return bool(origins) and "*" not in origins and request.path.startswith(("/xrpc/", "/v1/"))

    def token_matches(self, given: str) -> bool:
        """Whether `given` is the configured token (none configured: nothing is), compared
        in constant time: the API's bearer header and the pages' form both ask here."""
        token = self.settings.refresh_token
        return bool(token) and hmac.compare_digest(given.encode(), (token or "").encode())

    def authorize(self, request: web.Request, what: str) -> None:
        """Changes (refresh, watch-list edits) need the configured bearer token."""
        token = self.settings.refresh_token
        if not token:
            raise XrpcError(403, "Forbidden", f"{what} is disabled: no token configured")
        given = request.headers.get("Authorization", "")
        if not given.startswith("Bearer "):
            raise XrpcError(401, "AuthenticationRequired", "a bearer token is required")
        if not self.token_matches(given.removeprefix("Bearer ")):
            raise XrpcError(403, "InvalidToken", "the bearer token is not valid")

    async def json_body(self, request: web.Request) -> dict[str, Any]:
        """The request's JSON object; anything else (bad bytes, bad syntax, nesting that
        would exhaust the recursion limit, not an object) is a 400."""
        try:
            body = parse_json(await request.read())
        except ValueError:
            raise XrpcError(400, "InvalidRequest", "the body must be JSON") from None
        if not isinstance(body, dict):
            raise XrpcError(400, "InvalidRequest", "the body must be a JSON object")
        return body

    async def refresh_identity(self, request: web.Request) -> web.Response:
        self.authorize(request, "refreshIdentity")
        body = await self.json_body(request)
        name = _REFRESH_IDENTITY.parameter
        identifier = body.get(name)
        if not isinstance(identifier, str) or not identifier:
            raise XrpcError(400, "InvalidRequest", f"{name} is required")
        identifier = _in_format(name, identifier, _REFRESH_IDENTITY.format)
        identity = await self._lookup(identifier, refresh=True)
        fields, document = self._identity_info(identity, identifier, _REFRESH_IDENTITY.errors)
        return json_bytes(200, with_document(fields, document), "no-store")

    async def resolve_mini_doc(self, request: web.Request) -> web.Response:
        identifier = self._param(request, _MINI_DOC)
        identity = await self._lookup(identifier)
        fields, _ = self._identity_info(identity, identifier, _MINI_DOC.errors)
        key = identity.signing_key.removeprefix("did:key:") if identity.signing_key else None
        mini = {
            **fields,
            "pds": identity.pds,
            "signing_key": key,
        }
        # Not kept: a record holds no PDS or key, and keeping one would spare the memory
        # tier the entries this is composed from.
        return json_bytes(200, compact(mini), cache_control(identity))

    async def identity_report(self, request: web.Request) -> web.Response:
        identity = await self.cached.lookup(
            request.match_info["identifier"], timeout=self.settings.request_timeout
        )
        status = {Status.INVALID_INPUT: 400, Status.UNAVAILABLE: 502}.get(identity.status, 200)
        headers = {"Cache-Control": cache_control(identity) if status == 200 else "no-store"}
        if status == 502:
            headers["Retry-After"] = str(self.settings.retry_after)
        if status == 200 and request.query.get("check_pds") in ("1", "true"):
            identity = await self.cached.check_pds(identity)
            headers["Cache-Control"] = "no-store"  # what the PDS said now, not the cache
        document = request.query.get("document") in ("1", "true")
        return json_response(identity.to_json(include_document=document), status, headers)
