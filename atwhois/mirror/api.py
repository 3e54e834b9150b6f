"""The PLC directory's read API, answered from the mirror (P-API-1):
`GET /{did}`, `/{did}/data`, `/{did}/log`, `/{did}/log/audit`, `/{did}/log/last`, `/export`,
with the reference's shapes and status codes, so that a client configured with the
mirror's URL as its `plcUrl` needs no change. Writes are refused, naming the upstream.

Two profiles, for the two directories clients know: `directory` (plc.directory and the go
replica: `Multikey` documents, 410 for a tombstoned DID) and `reference` (the TypeScript
reference server, @did-plc/server 0.0.x: legacy key types, 404 for a tombstoned DID).

`answer` is one function from a request to a `Reply`: the aiohttp routes and the
in-process fetcher (`MirrorFetcher`, through which `serve --plc-mirror` resolves did:plc)
both use it.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson
from aiohttp import web

from atwhois.foundation import defaults
from atwhois.resolver.errors import AtwhoisError, InvalidDid, ResponseTooLarge
from atwhois.resolver.plc.audit import parse_time
from atwhois.resolver.plc.document import build_document, state_data
from atwhois.resolver.plc.operation import State
from atwhois.resolver.response import MIRROR_HEADER, Response
from atwhois.resolver.syntax import check_plc_did
from atwhois.resolver.untrusted import BadNumber, parse_count

from .records import InForce, StoredOp
from .state import MirrorState, unconfirmed
from .store import SqlMirrorStore, read_from
from .stream import BACKLOG, MAX_CONSUMERS, SEND_TIMEOUT, ExportStream
from .waits import Ended, Waits

PROFILES = ("directory", "reference")
_JSON = "application/json; charset=utf-8"
_DID_JSON = "application/did+ld+json; charset=utf-8"
EXPORT_MAX = 1000
DOCUMENT_CACHE = 65536  # documents kept made, by the seq of the op in force (about 1 KiB each)
# How long a question about a DID the mirror does not know waits for the follower to be
# able to answer it (`waits`: an operation for it applied, or a read of the upstream that
# began after it, which starts at most a poke gap after the last one and takes a round
# trip): past that, the mirror answers the 404 it has, as not current.
CURRENT_WAIT = 3.0


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    content_type: str = _JSON
    headers: dict[str, str] = field(default_factory=dict)
    unregistered: str | None = None  # the DID, in a 404 for one the mirror does not know (yet)


def _message(status: int, text: str) -> Reply:
    return Reply(status, json.dumps({"message": text}).encode())


def _unregistered(did: str) -> Reply:
    body = json.dumps({"message": f"DID not registered: {did}"}).encode()
    return Reply(404, body, unregistered=did)


def _json(value: Any, content_type: str = _JSON) -> Reply:
    return Reply(200, json.dumps(value, separators=(",", ":")).encode(), content_type)


def sequenced_line(op: StoredOp) -> str:
    """An operation as `/export?after=<seq>` and `/export/stream` send it (P-API-3): the
    `sequenced_op` form, with the mirror's seq and without the `nullified` flag (the
    reference sends none there)."""
    line = {"type": "sequenced_op", **_entry(op), "seq": op.seq}
    del line["nullified"]
    return json.dumps(line, separators=(",", ":"))


def _entry(op: StoredOp) -> dict[str, Any]:
    """A `/log/audit` entry and a legacy export line: the reference's key order."""
    return {
        "did": op.did,
        "operation": op.operation,
        "cid": op.cid,
        "nullified": op.nullified,
        "createdAt": op.created_at,
    }


def _state(did: str, current: InForce) -> State:
    state = current.state(did)
    assert state is not None  # the caller answered a tombstone already
    return state


class UnknownProfile(AtwhoisError, ValueError):
    """A profile the read API does not answer as."""


class MirrorApi:
    def __init__(
        self,
        store: SqlMirrorStore,
        state: MirrorState,
        *,
        profile: str = defaults.PLC_MIRROR_PROFILE,
        waits: Waits | None = None,
        stream_backlog: int = BACKLOG,
        stream_timeout: float = SEND_TIMEOUT,
        stream_consumers: int = MAX_CONSUMERS,
    ) -> None:
        """`waits`: the follower's in this process, which holds a question about a DID the
        mirror does not know (it may have been created since the last read) until it can
        answer it."""
        if profile not in PROFILES:
            raise UnknownProfile(f"PLC mirror profile must be one of {', '.join(PROFILES)}")
        self.store = store
        self.state = state
        self.profile = profile
        self.waits = waits
        self._documents: OrderedDict[int, bytes] = OrderedDict()
        self.stream = ExportStream(
            store,
            state,
            sequenced_line,
            backlog=stream_backlog,
            send_timeout=stream_timeout,
            max_consumers=stream_consumers,
        )

    def answer(
        self, method: str, path: str, query: dict[str, str], asked_at: float | None = None
    ) -> Reply:
        """The reply to a request that came at `asked_at` (now, if not given); HEAD is
        answered as GET (the server sends no body)."""
        reading = method in ("GET", "HEAD")
        parts = path.strip("/").split("/")
        # How current the answer is, taken before the read: the follower may finish a read
        # of the upstream meanwhile, and a view complete after the read began would vouch
        # for rows (or pages) it did not see
        asked_at = asked_at or time.time()
        provenance = self.state.provenance(asked_at)
        confirmed = self.state.current_for(asked_at)  # what a 404's absence rests on
        if parts == ["export"] and reading:
            reply = self._export(query)
            reply.headers[MIRROR_HEADER] = provenance
            return reply
        did = unquote(parts[0])
        try:
            check_plc_did(did)
        except InvalidDid:
            return _message(404, f"DID not registered: {did[:200]}")  # never will be
        if not reading:
            reply = _message(
                405,
                "this is a read-only, verifying mirror; submit operations to the upstream "
                f"directory: {self.state.upstream}/{did}",
            )
            reply.headers["Allow"] = "GET, HEAD"
            return reply
        if self.state.caught_up_at is None:
            reply = self._backfilling()
        else:
            reply = self._about(did, parts[1:])
        absent = reply.unregistered is not None and not confirmed
        reply.headers[MIRROR_HEADER] = unconfirmed(provenance) if absent else provenance
        return reply

    def _backfilling(self) -> Reply:
        """Until it has read the upstream's export to its end once, the mirror does not
        know whether a DID exists, nor whether what it holds of one is its latest state:
        a 404 would claim an absence, a 200 a currency, that it cannot back. A 503 is a
        failure every client retries (and the resolver never caches as absence)."""
        where = self.state.cursor_time or "the start"
        message = (
            f"this mirror of {self.state.upstream} is still catching up (at {where}); "
            "it answers about DIDs once it has"
        )
        reply = _message(503, message)
        reply.headers["Retry-After"] = "30"
        return reply

    def _about(self, did: str, rest: list[str]) -> Reply:
        if rest in ([], ["data"]):
            current = self.store.in_force(did)
            if current is None:
                return _unregistered(did)
            if current.tombstoned:
                status = 410 if self.profile == "directory" else 404
                return _message(status, f"DID not available: {did}")
            if rest:
                return _json(state_data(did, _state(did, current)))
            return Reply(200, self._document(did, current), _DID_JSON)
        if rest not in (["log"], ["log", "audit"], ["log", "last"]):
            return _message(404, "not found")
        log = self.store.log(did)
        if not log:
            return _unregistered(did)
        if rest == ["log", "audit"]:
            return _json([_entry(op) for op in log])
        in_force = [op for op in log if not op.nullified]
        if rest == ["log"]:
            return _json([op.operation for op in in_force])
        return _json(in_force[-1].operation)

    def _document(self, did: str, current: InForce) -> bytes:
        """The document's bytes, made once per op in force: most reads are of DIDs that did
        not change since the last read (the op's seq keys the cache, so a change of state
        is a new entry, and an entry cannot outlive its state)."""
        body = self._documents.get(current.seq)
        if body is None:
            document = build_document(
                did, _state(did, current), legacy_keys=self.profile == "reference"
            )
            body = orjson.dumps(document)
            self._documents[current.seq] = body
            if len(self._documents) > DOCUMENT_CACHE:
                self._documents.popitem(last=False)
        else:
            self._documents.move_to_end(current.seq)
        return body

    def _export(self, query: dict[str, str]) -> Reply:
        """A page of the export: `after` a seq (ASCII digits, within 64 bits) or a time
        (one that the databases can hold); anything else is a 400, never a 500."""
        try:
            asked = query.get("count", str(EXPORT_MAX))
            count = min(parse_count(asked, name="count", low=1), EXPORT_MAX)
        except BadNumber:
            return _message(400, "Invalid count parameter")
        after = query.get("after")
        if after is not None and after.isascii() and after.isdigit():
            try:
                seq = parse_count(after, name="after")
            except BadNumber:
                return _message(400, "Invalid after parameter")
            ops = self.store.export(after_seq=seq, after_time=None, count=count)
            body = "\n".join(sequenced_line(op) for op in ops)
            return Reply(200, body.encode(), "application/jsonlines")
        try:
            since = _normalized(after) if after else ""
        except (ValueError, OverflowError):  # not a time; one past year 9999 in UTC
            return _message(400, "Invalid after parameter")
        ops = self.store.export(after_seq=None, after_time=since, count=count)
        body = "\n".join(json.dumps(_entry(op), separators=(",", ":")) for op in ops)
        return Reply(200, body.encode(), "application/jsonlines")

    # --- serving ------------------------------------------------------------------------

    # The routes are rows of the daemon's route table (`server.routes.MIRROR`): served
    # there, described in its /openapi.json.

    async def stream_export(self, request: web.Request) -> web.StreamResponse:
        return await self.stream.handle(request)

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def serve(self, request: web.Request) -> web.Response:
        query = dict(request.query) if request.query_string else {}
        reply = await self.run(request.method, request.path, query)
        return web.Response(
            status=reply.status,
            body=reply.body,
            headers={"Content-Type": reply.content_type, **reply.headers},
        )

    async def run(
        self, method: str, path: str, query: dict[str, str], *, wait: float = CURRENT_WAIT
    ) -> Reply:
        """`answer`, off the event loop when the store is a network database. A DID the
        mirror does not know may have been created since it last read the upstream (a
        sign-up looked up at once): the question waits (`waits`) until the follower here
        can answer it, at most `wait` seconds, and the store is read again; a 404 then
        says whether it is current (P-API-2)."""
        asked_at = time.time()
        waits = self.waits
        mark = waits.mark() if waits is not None else 0
        reply = await self._answer(method, path, query, asked_at)
        give_up = time.monotonic() + wait
        while waits is not None and reply.unregistered is not None:
            ended = await waits.until_known(reply.unregistered, asked_at, mark, give_up)
            mark = waits.mark()
            reply = await self._answer(method, path, query, asked_at)
            if ended is not Ended.MAYBE:
                break
        return reply

    async def _answer(
        self, method: str, path: str, query: dict[str, str], asked_at: float
    ) -> Reply:
        return await read_from(
            self.store, functools.partial(self.answer, method, path, query, asked_at)
        )

    async def mirror_report(self, request: web.Request) -> web.Response:
        try:
            limit = parse_count(request.query.get("limit", "100"), name="limit", high=10_000)
        except BadNumber as err:
            return web.json_response({"message": str(err)}, status=400)
        return web.json_response(await asyncio.to_thread(report, self.store, self.state, limit))


def report(store: SqlMirrorStore, state: MirrorState, limit: int = 100) -> dict[str, Any]:
    """The mirror's account of itself: where it is, and what the upstream served that the
    rules refuse (`atwhois plc mirror --report`, `GET /_mirror`)."""
    return {
        "mirror": state.to_json(),
        "store": {"backend": store.name, **store.counts()},
        "rejected": [
            {
                "did": r.did,
                "cid": r.cid,
                "created_at": r.created_at,
                "rule": r.rule,
                "message": r.message,
                "seen_at": r.seen_at,
                "entry": r.entry,
            }
            for r in store.rejected(limit)
        ],
        "flagged": [
            {"did": did, "reason": reason, "since": since}
            for did, reason, since in store.flags(limit)
        ],
        "bad_lines": [
            {"reason": b.reason, "seen_at": b.seen_at, "entry": b.entry}
            for b in store.bad_lines(limit)
        ],
    }


@web.middleware
async def json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """The standalone mirror's own error shape (`{"message": …}`, as the directory's) for
    the paths and methods it does not answer, instead of aiohttp's text/plain."""
    try:
        return await handler(request)
    except web.HTTPException as err:
        if err.status < 400:
            raise
        headers = {"Allow": err.headers["Allow"]} if "Allow" in err.headers else {}
        return web.json_response({"message": err.reason}, status=err.status, headers=headers)


def _normalized(after: str) -> str:
    """An `after` time as the export writes times: UTC, milliseconds, `Z`."""
    moment = parse_time(after).astimezone(datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class MirrorFetcher:
    """What the resolver's PLC fetcher does, answered from the mirror in the process:
    `serve --plc-mirror` resolves did:plc without a round trip to itself."""

    def __init__(self, api: MirrorApi) -> None:
        self.api = api

    async def get(
        self,
        url: str,
        *,
        max_bytes: int,
        timeout: float,
        max_redirects: int = 0,
        accept: str = "*/*",
    ) -> Response:
        parts = urlsplit(url)
        query = dict(p.partition("=")[::2] for p in parts.query.split("&") if p)
        reply = await self.api.run("GET", parts.path, query, wait=min(CURRENT_WAIT, timeout))
        if len(reply.body) > max_bytes:
            raise ResponseTooLarge(f"PLC mirror: body of {len(reply.body)} bytes, cap {max_bytes}")
        return Response(url, reply.status, reply.body, reply.headers.get(MIRROR_HEADER))

    async def aclose(self) -> None:
        return None
