"""The daemon's routes as one table each face reads: the router adds them, `/openapi.json`
describes them, and the kept answers find their method in `METHODS` by the request target.

A `Route` is a path, its HTTP verb, the name of the face's handler and the OpenAPI
operation that describes it, written beside each other so they cannot drift apart.
`XrpcMethod` adds what an XRPC method is: its NSID, its one parameter and the lexicon
format that parameter must have, and its table of errors (`xrpc_errors`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

from atwhois.resolver import Status
from atwhois.resolver.syntax import is_valid_at_identifier, is_valid_did, is_valid_handle

from . import openapi, xrpc_errors
from .xrpc_errors import Failure

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Format = Literal["handle", "did", "at-identifier"]
FORMATS: dict[Format, Callable[[str], bool]] = {
    "handle": is_valid_handle,
    "did": is_valid_did,
    "at-identifier": is_valid_at_identifier,
}
_PATTERNS: dict[Format, str] = {
    "handle": openapi.HANDLE,
    "did": openapi.DID,
    "at-identifier": openapi.AT_IDENTIFIER,
}
_DESCRIPTIONS: dict[Format, str] = {
    "handle": "a handle",
    "did": "a DID",
    "at-identifier": "a handle or a DID",
}
XRPC = "/xrpc/"


@dataclass(frozen=True, slots=True)
class Route:
    verb: str  # GET, POST, DELETE ("*": every other verb)
    path: str
    handler: str  # the face's method that answers
    operation: dict[str, Any] | None  # its OpenAPI description (None: not described)
    pattern: str | None = None  # the router's pattern, where it says more than `path`


@dataclass(frozen=True, slots=True)
class XrpcMethod:
    nsid: str
    verb: str
    handler: str
    parameter: str  # the one parameter: in the query (GET) or the JSON body (POST)
    format: Format
    errors: dict[Status, Failure]
    summary: str
    answer: dict[str, Any]  # the schema of its 200 body
    failures: tuple[int, ...] = openapi.RESOLVING  # what it may answer besides 200
    bearer: bool = False  # needs the configured token
    described: bool = True  # in /openapi.json (an alias of another method's NSID is not)

    @property
    def path(self) -> str:
        return XRPC + self.nsid

    def route(self) -> Route:
        if not self.described:
            return Route(self.verb, self.path, self.handler, None)
        operation: dict[str, Any] = {"summary": self.summary}
        pattern = _PATTERNS[self.format]
        if self.verb == "GET":
            description = _DESCRIPTIONS[self.format]
            operation["parameters"] = [openapi.query(self.parameter, description, pattern)]
        else:
            operation["requestBody"] = openapi.body(
                {self.parameter: {"type": "string", "pattern": pattern}}, [self.parameter]
            )
        if self.bearer:
            operation["security"] = openapi.BEARER
        operation["responses"] = openapi.responses(self.answer, *self.failures)
        return Route(self.verb, self.path, self.handler, operation)


_IDENTITY_INFO = {"$ref": "#/components/schemas/IdentityInfo"}
_MINI_DOC = openapi.object_of(
    {k: openapi.nullable("string") for k in ("did", "handle", "pds", "signing_key")}
)
_IDENTITY = "com.atproto.identity."
_MINI_DOC_NSIDS = (
    "com.bad-example.identity.resolveMiniDoc",
    "blue.microcosm.identity.resolveMiniDoc",
)

METHODS = (
    XrpcMethod(
        _IDENTITY + "resolveHandle",
        "GET",
        "resolve_handle",
        "handle",
        "handle",
        xrpc_errors.RESOLVE_HANDLE,
        "Handle to DID, verified both ways (stricter than the lexicon)",
        openapi.object_of({"did": {"type": "string"}}),
    ),
    XrpcMethod(
        _IDENTITY + "resolveDid",
        "GET",
        "resolve_did",
        "did",
        "did",
        xrpc_errors.RESOLVE_DID,
        "DID to its DID document",
        openapi.object_of({"didDoc": {"type": "object"}}),
    ),
    XrpcMethod(
        _IDENTITY + "resolveIdentity",
        "GET",
        "resolve_identity",
        "identifier",
        "at-identifier",
        xrpc_errors.RESOLVE_IDENTITY,
        "Handle or DID to {did, handle (or handle.invalid), didDoc}",
        _IDENTITY_INFO,
    ),
    XrpcMethod(
        _IDENTITY + "refreshIdentity",
        "POST",
        "refresh_identity",
        "identifier",
        "at-identifier",
        xrpc_errors.RESOLVE_IDENTITY,
        "Resolve again, every part afresh (bearer token)",
        _IDENTITY_INFO,
        failures=(400, 401, 403, 404, 413, 502, 503),
        bearer=True,
    ),
    # Slingshot's mini document under both the NSIDs clients call; the first is described.
    *(
        XrpcMethod(
            nsid,
            "GET",
            "resolve_mini_doc",
            "identifier",
            "at-identifier",
            xrpc_errors.RESOLVE_IDENTITY,
            "Slingshot-compatible mini document",
            _MINI_DOC,
            described=nsid == _MINI_DOC_NSIDS[0],
        )
        for nsid in _MINI_DOC_NSIDS
    ),
)
BY_NSID = {method.nsid: method for method in METHODS}

# The service's own routes besides the XRPC methods (operations: `operations.ROUTES`).
_OWN = (
    Route(
        "GET",
        "/v1/identity/{identifier}",
        "identity_report",
        {
            "summary": "The full Identity report, with evidence and cache metadata",
            "parameters": [
                openapi.PATH_IDENTIFIER,
                openapi.optional_query("document", {"type": "string", "enum": ["1", "true"]}),
                # the PDS check (`resolver.pds`), done now: the answer is not to be kept
                openapi.optional_query("check_pds", {"type": "string", "enum": ["1", "true"]}),
            ],
            "responses": {
                "200": openapi.content(openapi.IDENTITY, "the report (the status inside)"),
                "400": openapi.content(openapi.IDENTITY, "invalid input (the report says why)"),
                "502": openapi.content(openapi.IDENTITY, "transient failure (the report)"),
                "503": openapi.content(openapi.ERROR, openapi.REASONS[503]),
            },
        },
    ),
)

# What `Service` answers (its handlers): the XRPC methods and its own routes.
SERVICE = (*(method.route() for method in METHODS), *_OWN)


def add_routes(app: web.Application, face: object, routes: Iterable[Route]) -> None:
    """`routes` answered by `face`'s handlers; a GET route answers HEAD too (the same
    head, no body)."""
    for route in routes:
        handler = getattr(face, route.handler)
        if route.verb == "GET":
            app.router.add_get(route.pattern or route.path, handler)
        else:
            app.router.add_route(route.verb, route.pattern or route.path, handler)


def described(routes: Iterable[Route]) -> dict[str, dict[str, Any]]:
    """The OpenAPI paths of `routes`: path -> verb -> operation."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if route.operation is not None:
            paths.setdefault(route.path, {})[route.verb.lower()] = route.operation
    return paths


# The PLC mirror's read API (`mirror.api.MirrorApi`), served beside the rest with
# `--plc-mirror` (and alone by `atwhois plc mirror`): P-API-1 to P-API-3.
_PLC_DID = r"/{did:did(:|%3[Aa])plc(:|%3[Aa])[^/]+}"  # did:plc only: the pages keep theirs


def _message(description: str) -> dict[str, Any]:
    schema = openapi.object_of({"message": {"type": "string"}})
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_MIRROR_ERRORS = {
    400: _message("a parameter the mirror cannot read"),
    404: _message("not registered (the mirror is current: `Atwhois-Plc-Mirror`)"),
    410: _message("deactivated (tombstoned)"),
    503: _message("still catching up, or too many stream consumers (Retry-After)"),
}
_LINES = {"description": "OK", "content": {"application/jsonlines": {"schema": {"type": "string"}}}}
_ANY_JSON = {"description": "OK", "content": {"application/json": {"schema": {}}}}
_DID_PARAMETER = {
    "name": "did",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": r"^did:plc:[a-z2-7]{24}$"},
}


def _about_did(summary: str, ok: dict[str, Any]) -> dict[str, Any]:
    errors = {str(code): _MIRROR_ERRORS[code] for code in (404, 410, 503)}
    return {"summary": summary, "parameters": [_DID_PARAMETER], "responses": {"200": ok, **errors}}


MIRROR = (
    Route(
        "GET",
        "/export",
        "serve",
        {
            "summary": "Operations in the order stored, after a seq or a time (P-API-1)",
            "parameters": [
                openapi.optional_query("after"),
                openapi.optional_query("count", {"type": "string", "pattern": "^[0-9]{1,4}$"}),
            ],
            "responses": {"200": _LINES, "400": _MIRROR_ERRORS[400]},
        },
    ),
    Route(
        "GET",
        "/export/stream",
        "stream_export",
        {
            "summary": "The operations after a seq, then each new one, on a WebSocket (P-API-3)",
            "parameters": [openapi.optional_query("cursor")],
            "responses": {
                "101": {"description": "the stream"},
                "400": _MIRROR_ERRORS[400],
                "426": _message("a WebSocket upgrade is required"),
                "503": _MIRROR_ERRORS[503],
            },
        },
    ),
    Route(
        "GET",
        "/{did}",
        "serve",
        _about_did(
            "The DID document, as the directory serves it (verified here)",
            {"description": "OK", "content": {"application/did+ld+json": {"schema": {}}}},
        ),
        pattern=_PLC_DID,
    ),
    *(
        Route("GET", "/{did}" + suffix, "serve", _about_did(summary, _ANY_JSON), _PLC_DID + suffix)
        for suffix, summary in (
            ("/data", "The DID's state: keys, handle, services"),
            ("/log", "The operations in force"),
            ("/log/audit", "Every operation, nullified ones too"),
            ("/log/last", "The last operation in force"),
        )
    ),
    Route("*", "/{did}", "serve", None, _PLC_DID),  # a write: 405, sent to the upstream
    Route(
        "GET",
        "/_mirror",
        "mirror_report",
        {
            "summary": "The mirror's account of itself and of what it refused",
            "parameters": [
                openapi.optional_query("limit", {"type": "string", "pattern": "^[0-9]{1,5}$"})
            ],
            "responses": {"200": _ANY_JSON, "400": _MIRROR_ERRORS[400]},
        },
    ),
)

# Inter-service auth tokens checked against the issuer's identity (`service_auth`, SA-*).
_VERIFICATION = openapi.object_of(
    {
        "outcome": {"type": "string", "enum": ["valid", "invalid", "unavailable"]},
        "valid": {"type": "boolean"},
        "rule": openapi.nullable("string"),
        "reason": openapi.nullable("string"),
        "issuer": openapi.nullable("string"),
        # the issuer's handle is never checked for a token (SA-ISS-2): what its document says
        "handle": {"type": "null"},
        "handle_checked": {"type": "boolean", "enum": [False]},
        "declared_handle": openapi.nullable("string"),
        "key_id": openapi.nullable("string"),
        "method": openapi.nullable("string"),
        "expires_at": openapi.nullable("integer"),
        "document": openapi.object_of(
            {"checked_at": openapi.nullable("string"), "refreshed": {"type": "boolean"}}
        ),
        # where the replay check's nonces live (null: no check asked): shared, or this
        # process only (with a warning)
        "replay": {
            "oneOf": [
                {"type": "null"},
                openapi.object_of(
                    {
                        "scope": {"type": "string", "enum": ["shared", "process"]},
                        "warning": openapi.nullable("string"),
                    }
                ),
            ]
        },
    }
)
SERVICE_AUTH = (
    Route(
        "POST",
        "/v1/verify/service-auth",
        "verify_service_auth",
        {
            "summary": "An inter-service auth token checked against its issuer's identity",
            "requestBody": openapi.body(
                {
                    "token": {"type": "string", "minLength": 1, "maxLength": 8192},
                    # where the daemon's settings fix them, these may be left out
                    "audience": {"type": "string", "minLength": 1, "maxLength": 2048},
                    "method": {"type": "string", "minLength": 1, "maxLength": 317},
                    "key_ids": {
                        "type": "array",
                        "items": {"type": "string", "minLength": 1, "maxLength": 64},
                        "minItems": 1,
                        "maxItems": 16,
                    },
                    "replay": {"type": "boolean"},
                },
                ["token"],
            ),
            "responses": {
                "200": openapi.content(_VERIFICATION, "valid or invalid (the rule it broke)"),
                "400": openapi.content(openapi.ERROR, "a request the daemon cannot read"),
                "413": openapi.content(openapi.ERROR, openapi.REASONS[413]),
                "502": openapi.content(
                    _VERIFICATION,
                    "unavailable: the issuer's identity could not be resolved now, or a "
                    "replay cannot be ruled out (the nonces' bounds are full) (Retry-After)",
                ),
                "503": openapi.content(openapi.ERROR, openapi.REASONS[503]),
            },
        },
    ),
)
