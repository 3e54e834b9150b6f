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
import json
import logging
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TextIO
from urllib.parse import unquote

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client.core import CounterMetricFamily

from cache import CachedResolver
from cache.keys import identifier_of, resting_on
from cache.packing import deflate, inflate
from cache.stores import Tier, TieredStore
from cache.stores.memory import Lru
from resolver import Identity, Outcome, Status
from resolver.syntax import (
    INVALID_HANDLE,
    is_valid_at_identifier,
    is_valid_did,
    is_valid_handle,
)
from resolver.untrusted import parse_json

from . import xrpc_errors
from .metrics import CONTENT_TYPE, Exposition, Families, Metrics, gauge
from .openapi import openapi

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Failure = xrpc_errors.Failure
Format = Literal["handle", "did", "at-identifier"]
_FORMATS: dict[Format, Callable[[str], bool]] = {
    "handle": is_valid_handle,
    "did": is_valid_did,
    "at-identifier": is_valid_at_identifier,
}
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_CHANGES_BEFORE = web.RequestKey("changes_before", int)  # the answer cache's count at the start


@dataclass(frozen=True, slots=True)
class Settings:
    refresh_token: str | None = None  # refreshIdentity is refused without one
    max_concurrency: int = 256  # requests handled at once; the rest wait briefly, then 503
    request_timeout: float = 10.0  # per request; the shared resolution goes on
    max_body: int = 16 * 1024
    retry_after: int = 30  # seconds, on 502 and 503
    request_log: bool = True  # one JSON line per request on stderr
    answer_cache_bytes: int = 32 * 1024 * 1024  # rendered answers of fresh hits
    cors_origins: tuple[str, ...] = ()  # browser origins that may read the API ("*": any)


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
            record.msg, record.args = _compact(line).decode(), ()
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


# Operations endpoints answer even when every request slot is taken: a health check that
# queued behind the load would flap a container exactly when it is busiest.
_UNGATED = frozenset({"/_health", "/metrics"})
_PREFLIGHT = {
    "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
    "Access-Control-Allow-Headers": "Accept, Content-Type, X-Request-Id",
    "Access-Control-Max-Age": "86400",
}
log = logging.getLogger("atwhois.serve")


class XrpcError(Exception):
    """An XRPC error body; `cache` is its Cache-Control (confirmed absence is cacheable)."""

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        *,
        retry_after: int | None = None,
        cache: str = "no-store",
    ) -> None:
        super().__init__(message)
        self.status, self.error, self.retry_after, self.cache = status, error, retry_after, cache


def _in_format(name: str, value: str, kind: Format) -> str:
    """The lexicon's string formats, strictly: no `@`, no at:// URI, no profile URL (those
    are UI conveniences, H-SYN-7); the CLI accepts them, the API does not."""
    if not _FORMATS[kind](value):
        raise XrpcError(400, "InvalidRequest", f"{name} must be a {kind} (got {value[:80]!r})")
    return value


def _compact(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=_compact(data),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _with_document(fields: dict[str, Any], document: bytes) -> bytes:
    """`fields` and `didDoc` as one JSON object, the document spliced in as served (valid
    UTF-8 JSON, checked when it was fetched): neither decoded nor encoded again."""
    if not fields:  # resolveDid's: no encoder needed
        return b'{"didDoc":' + document + b"}"
    return _compact(fields)[:-1] + b',"didDoc":' + document + b"}"


def _json_bytes(status: int, body: bytes, cache: str) -> web.Response:
    # The headers as given, not content_type=: aiohttp would parse it again on every answer.
    headers = {"Content-Type": "application/json", "Cache-Control": cache}
    return web.Response(body=body, status=status, headers=headers)


_quoted: Callable[[str], str] = json.encoder.encode_basestring_ascii


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


# What one identity's answers are rendered from: kept until, fresh until, servable until, its
# DID, its declared handle (or None), whether that handle is verified, whether
# resolveIdentity answers by its DID (not while its handle could not be checked), its
# document deflated (None: resolveDid and resolveIdentity do not answer from here). One
# record under its DID and its handle answers every method: each answer kept whole cost
# 1.5 KB of objects per identity (two bodies, two request targets, an index of what they
# rested on), the record about 560 B.
_Record = tuple[float, float, float, str, str | None, bool, bool, bytes | None]

_XRPC = "/xrpc/com.atproto.identity."


def _record_size(key: str, record: _Record) -> int:
    """Counted in full under the DID, as a key under the handle."""
    return 300 + len(key) + len(record[7] or b"") if key == record[3] else 100 + len(key)


def _did_body(did: str) -> bytes:
    """resolveHandle's answer (a DID has nothing JSON escapes: what json.dumps would write)."""
    return b'{"did":"' + did.encode() + b'"}'


def _document_answer(method: str, name: str, key: str, record: _Record) -> bytes | None:
    """resolveDid's or resolveIdentity's body asked with `name`=`key`, or None where the
    record does not say (the method fails, or another parameter was asked for)."""
    did, handle, verified, by_did_ok, packed = record[3:8]
    if packed is None:
        return None
    by_handle = key != did
    if method == "resolveDid":
        return _with_document({}, inflate(packed)) if name == "did" and not by_handle else None
    answers = verified if by_handle else by_did_ok  # by handle, only a verified one
    if method == "resolveIdentity" and name == "identifier" and answers:
        shown = handle if verified and handle else INVALID_HANDLE  # Identity.handle's rule
        return _with_document({"did": did, "handle": shown}, inflate(packed))
    return None


class AnswerCache:
    """What fresh cache hits answer, rendered from a record per identity (its DID, handle
    verdict and deflated document), so that a hit is a dictionary lookup and a few joins. A
    record is kept until its fresh window ends (never a stale one: that must reach the cache
    to be revalidated), within a bound in bytes, and dropped as soon as the store says an
    entry it rests on changed, here or in another process; while the store cannot follow
    other processes' changes, for half a second at most. A record whose lookup overlapped
    any change is not kept (it may be composed from an old entry)."""

    UNFOLLOWED_SECONDS = 0.5

    def __init__(
        self,
        store: Tier,
        max_bytes: int = 32 * 1024 * 1024,
        clock: Callable[[], float] = time.time,  # the cache's: answers age with its entries
    ) -> None:
        self._store, self._clock = store, clock
        # under its DID and under its declared handle: the keys of the entries it rests on
        # (`resting_on`) without their prefix, so a change finds it with no index of its own
        self._records: Lru[_Record] = Lru(max_bytes, _record_size, evicted=self._unlink)
        self.changes = 0  # changes the store announced, ever
        store.listeners.append(self.changed)

    def get(self, target: str) -> tuple[bytes, str] | None:
        """The answer to a request for `target` (as sent) and its Cache-Control, counted
        from now (it aged while kept), or None. Only one spelling of each question is
        answered here, the one with a single parameter, the handle in lower case; the
        others go the long way, to the same answer."""
        if not target.startswith(_XRPC):
            return None
        method, _, query = target[len(_XRPC) :].partition("?")
        name, _, key = query.partition("=")
        if "%" in key:
            key = unquote(key)
        record = self._records.get(key)
        if record is None:
            return None
        now = self._clock()
        if record[0] < now:  # kept until
            self._drop(key)
            return None
        if method == "resolveHandle":  # the hottest: by handle, verified
            if name != "handle" or not record[5] or key == record[3]:
                return None
            body = _did_body(record[3])
        elif (found := _document_answer(method, name, key, record)) is not None:
            body = found
        else:
            return None
        return body, _cache_control(record[1] - now, record[2] - now)

    def put(self, identity: Identity, document: bytes | None, changes_before: int) -> None:
        """Keep what `identity` answers (`document`: the document as served, None where it
        is not), looked up when `changes` was `changes_before`. Only an identity asked for
        by its DID or its own handle: another handle's lookup rests on that handle too."""
        info, did, handle = identity.cache, identity.did, identity.declared_handle
        if (
            info is None
            or info.state == "stale"
            or info.fresh_for_s <= 0
            or changes_before != self.changes
            or did is None
            or identity.handle_queried not in (None, handle)
        ):
            return
        now, fresh = self._clock(), info.fresh_for_s
        keep = fresh if self._store.following else min(fresh, self.UNFOLLOWED_SECONDS)
        fresh_end = now + fresh
        until = fresh_end if keep == fresh else now + keep  # one float fewer, most of the time
        record: _Record = (
            until,
            fresh_end,
            now + info.servable_for_s,
            did,
            handle,
            identity.verified,
            identity.status is not Status.UNAVAILABLE,
            deflate(document) if document is not None else None,
        )
        for key in (did, handle) if handle else (did,):
            self._drop(key)  # its old record, or another DID's that declared this handle
            self._records.put(key, record)
        # The record is what a hit needs of its entries: the memory tier need not hold
        # them too while a shared store does (they are read back to compose a new record).
        self._store.spare(resting_on(identity))

    def changed(self, keys: Sequence[str] | None) -> None:
        self.changes += 1
        if keys is None:
            self.clear()
            return
        for entry in keys:
            self._drop(identifier_of(entry))

    def _drop(self, key: str) -> None:
        record = self._records.pop(key)
        if record is not None:
            self._unlink(key, record)

    def _unlink(self, key: str, record: _Record) -> None:
        """`record` left under `key`: it leaves its other key too."""
        other = record[4] if key == record[3] else record[3]
        if other is not None and self._records.peek(other) is record:
            self._records.pop(other)

    def clear(self) -> None:
        self._records.clear()

    @property
    def used_bytes(self) -> int:
        return self._records.bytes


def _servable_document(identity: Identity) -> bytes | None:
    """The DID document as served, when the DID resolved and nothing contradicts it (a log
    that does not prove it, an account its PDS's event stream says is not active)."""
    document = identity.did_document_json
    if (
        identity.status not in (Status.PLC_LOG_INVALID, Status.DID_DEACTIVATED)
        and identity.did_doc.outcome is Outcome.OK
    ):
        return document
    return None


def cache_control(identity: Identity) -> str:
    """From the freshness policy: fresh for what is left of the fresh window; after that a
    shared cache may serve it stale while revalidating, or on error, up to the maximum."""
    info = identity.cache
    return _cache_control(info.fresh_for_s, info.servable_for_s) if info else "no-store"


def _cache_control(fresh_for: float, servable_for: float) -> str:
    if servable_for <= 0:
        return "no-store"
    fresh = max(0, int(fresh_for))
    extra = int(servable_for) - fresh
    header = f"public, max-age={fresh}"
    return header + (f", stale-while-revalidate={extra}, stale-if-error={extra}" if extra else "")


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
        self.exposition = Exposition()
        # Request ids: a random prefix per process and a count (a random id per request
        # cost a system call each).
        self._id_prefix, self._ids = os.urandom(4).hex(), itertools.count()

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=self.settings.max_body, middlewares=[self._middleware]
        )
        xrpc = "/xrpc/com.atproto.identity."
        app.router.add_get(xrpc + "resolveHandle", self.resolve_handle)
        app.router.add_get(xrpc + "resolveDid", self.resolve_did)
        app.router.add_get(xrpc + "resolveIdentity", self.resolve_identity)
        app.router.add_post(xrpc + "refreshIdentity", self.refresh_identity)
        for nsid in (
            "com.bad-example.identity.resolveMiniDoc",
            "blue.microcosm.identity.resolveMiniDoc",
        ):
            app.router.add_get(f"/xrpc/{nsid}", self.resolve_mini_doc)
        app.router.add_get("/v1/identity/{identifier}", self.identity_report)
        app.router.add_get("/_health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_get("/openapi.json", self.openapi)
        app.on_startup.append(self.request_log.start)
        app.on_cleanup.append(self.request_log.stop)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, _: web.Application) -> None:
        await self.cached.aclose()

    # --- middleware: request id, structured log, limits, XRPC errors ------------------

    def _request_id(self, request: web.BaseRequest) -> str:
        """The caller's X-Request-Id when it is one we can log, else one of ours."""
        given = request.headers.get("X-Request-Id")
        if given and _REQUEST_ID.fullmatch(given):
            return given
        return f"{self._id_prefix}{next(self._ids) & 0xFFFFFFFF:08x}"

    def _kept_answer(self, request: web.BaseRequest) -> web.Response | None:
        """The answer kept for this request (found by its target as sent, `raw_path`: no
        URL is parsed to find it), or None."""
        answer = self.answers.get(request.raw_path) if request.method == "GET" else None
        if answer is None:
            return None
        self.cached.counters["fresh"] += 1  # what the cached lookup would have counted
        return _json_bytes(200, *answer)

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
        the middleware chain: a hit took 32 us with them, 25 without (`bench hits`). Every
        other request goes on to the app, whose middleware answers kept answers too where
        this is not installed (an app run by another runner)."""
        routed = server.request_handler

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            started = time.perf_counter()
            response = self._kept_answer(request)
            if response is None:
                return await routed(request)
            self._finish(request, response, self._request_id(request), started, request.path)
            return response

        server.request_handler = handle

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
                response = kept
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
            response = _json({"error": err.error, "message": str(err)}, err.status, headers)
        except web.HTTPException as err:
            name = "PayloadTooLarge" if err.status == 413 else "InvalidRequest"
            if err.status == 404:
                name = "NotFound"
            if err.status == 405:
                name = "MethodNotAllowed"
            response = _json({"error": name, "message": err.reason}, err.status)
        except Exception:
            log.exception(
                "request %s %s failed (request id %s)", request.method, request.path, request_id
            )
            message = f"unexpected error; the daemon logged it under request id {request_id}"
            body = {"error": "InternalServerError", "message": message}
            response = _json(body, 500, {"Cache-Control": "no-store"})
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
        seconds = time.perf_counter() - started
        response.headers["X-Request-Id"] = request_id
        if request.method in ("GET", "HEAD", "OPTIONS") and (origin := self._cors_origin(request)):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = "X-Request-Id, Retry-After"
            if origin != "*":
                response.headers["Vary"] = "Origin"
        self.metrics.request(endpoint, response.status, seconds)
        if self.settings.request_log:
            self.request_log.write(
                request_id,
                request.method,
                request.path,
                response.status,
                seconds,
                request.remote,
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

    def _param(self, request: web.Request, name: str, kind: Format) -> str:
        """A query parameter, which its lexicon requires, in its lexicon format."""
        value = request.query.get(name)
        if not value:
            raise XrpcError(400, "InvalidRequest", f"the {name} parameter is required")
        return _in_format(name, value, kind)

    async def _lookup(self, identifier: str, *, refresh: bool = False) -> Identity:
        look = self.cached.refresh if refresh else self.cached.lookup
        identity = await look(identifier, timeout=self.settings.request_timeout)
        self._note_upstream_latency()
        if identity.status is Status.INVALID_INPUT:
            raise XrpcError(400, "InvalidRequest", identity.error or "invalid identifier")
        return identity

    def _note_upstream_latency(self) -> None:
        latencies = self.cached.upstream_latency
        while latencies:
            kind, seconds = latencies.popleft()
            self.metrics.upstream_seconds[kind].observe(seconds)

    def _failure(self, identity: Identity, table: dict[Status, Failure]) -> XrpcError:
        """The method's error for a lookup that did not give what it asks for."""
        status, name = table[identity.status]
        message = f"{identity.status}: {identity.error or identity.status}"
        if identity.status is Status.UNAVAILABLE:
            return XrpcError(status, name, message, retry_after=self.settings.retry_after)
        cache = cache_control(identity) if status < 500 else "no-store"
        return XrpcError(status, name, message, cache=cache)

    def _document(self, identity: Identity, table: dict[Status, Failure]) -> bytes:
        document = _servable_document(identity)
        if document is None:
            raise self._failure(identity, table)
        return document

    async def resolve_handle(self, request: web.Request) -> web.Response:
        identity = await self._lookup(self._param(request, "handle", "handle"))
        if identity.status is not Status.VERIFIED:
            raise self._failure(identity, xrpc_errors.RESOLVE_HANDLE)
        assert identity.did is not None  # verified
        body = _did_body(identity.did)
        return self._answer(request, identity, body, _servable_document(identity))

    def _answer(
        self, request: web.Request, identity: Identity, body: bytes, document: bytes | None
    ) -> web.Response:
        """`body`, and what `identity` answers kept for the next requests (`document`: its
        servable document, or None)."""
        self.answers.put(identity, document, request[_CHANGES_BEFORE])
        return _json_bytes(200, body, cache_control(identity))

    async def resolve_did(self, request: web.Request) -> web.Response:
        identity = await self._lookup(self._param(request, "did", "did"))
        document = self._document(identity, xrpc_errors.RESOLVE_DID)
        return self._answer(request, identity, _with_document({}, document), document)

    def _identity_info(self, identity: Identity, identifier: str) -> tuple[dict[str, Any], bytes]:
        """DID and verified handle (or `handle.invalid`), and the document. A handle that
        could not be checked now is an upstream failure, never `handle.invalid`: that
        would say the binding fails when nobody knows."""
        table = xrpc_errors.RESOLVE_IDENTITY
        by_handle = not is_valid_did(identifier)
        if identity.status is Status.UNAVAILABLE or (
            by_handle and identity.status is not Status.VERIFIED
        ):
            raise self._failure(identity, table)
        document = self._document(identity, table)
        return {"did": identity.did, "handle": identity.handle}, document

    async def resolve_identity(self, request: web.Request) -> web.Response:
        identifier = self._param(request, "identifier", "at-identifier")
        identity = await self._lookup(identifier)
        fields, document = self._identity_info(identity, identifier)
        return self._answer(request, identity, _with_document(fields, document), document)

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
        identifier = body.get("identifier")
        if not isinstance(identifier, str) or not identifier:
            raise XrpcError(400, "InvalidRequest", "identifier is required")
        identifier = _in_format("identifier", identifier, "at-identifier")
        identity = await self._lookup(identifier, refresh=True)
        fields, document = self._identity_info(identity, identifier)
        return _json_bytes(200, _with_document(fields, document), "no-store")

    async def resolve_mini_doc(self, request: web.Request) -> web.Response:
        identifier = self._param(request, "identifier", "at-identifier")
        identity = await self._lookup(identifier)
        fields, _ = self._identity_info(identity, identifier)
        key = identity.signing_key.removeprefix("did:key:") if identity.signing_key else None
        mini = {
            **fields,
            "pds": identity.pds,
            "signing_key": key,
        }
        # Not kept: a record holds no PDS or key, and keeping one would spare the memory
        # tier the entries this is composed from.
        return _json_bytes(200, _compact(mini), cache_control(identity))

    async def identity_report(self, request: web.Request) -> web.Response:
        identity = await self.cached.lookup(
            request.match_info["identifier"], timeout=self.settings.request_timeout
        )
        self._note_upstream_latency()
        status = {Status.INVALID_INPUT: 400, Status.UNAVAILABLE: 502}.get(identity.status, 200)
        headers = {"Cache-Control": cache_control(identity) if status == 200 else "no-store"}
        if status == 502:
            headers["Retry-After"] = str(self.settings.retry_after)
        document = request.query.get("document") in ("1", "true")
        return _json(identity.to_json(include_document=document), status, headers)

    # --- operations -----------------------------------------------------------------

    async def health(self, _: web.Request) -> web.Response:
        """200 while the daemon answers; `status` says `degraded`, and why, while it
        answers with less than it should (a store away: memory and upstreams only)."""
        now = time.time()
        seen = {k: round(now - t, 1) for k, t in self.cached.upstream_seen.items()}
        reasons = await self.cached.store.health()
        return _json(
            {
                "ok": True,
                "status": "degraded" if reasons else "ok",
                "reasons": reasons,
                "uptime_s": round(now - self.started, 1),
                "pid": os.getpid(),  # which worker answered (serve --workers)
                "store": self.cached.store.name,
                "upstream_last_answer_s_ago": seen,
                **{name: source() for name, source in self.health_sources.items()},
            },
            headers={"Cache-Control": "no-store"},
        )

    async def prometheus(self, _: web.Request) -> web.Response:
        self._note_upstream_latency()
        store = self.cached.store
        degraded = bool(await store.health())
        families = [
            *self.metrics.families(dict(self.cached.counters)),
            gauge(
                "atwhois_inflight_resolutions",
                "Upstream resolutions in flight.",
                self.cached.inflight,
            ),
            gauge("atwhois_cache_entries", "Entries in the cache store.", await store.count()),
            gauge(
                "atwhois_cache_memory_bytes",
                "Bytes held by the memory tier and the rendered answers.",
                store.used_bytes + self.answers.used_bytes,
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
        for source in self.metric_sources:
            families.extend(source())
        body = self.exposition.render(families)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def openapi(self, _: web.Request) -> web.Response:
        return _json(openapi())
