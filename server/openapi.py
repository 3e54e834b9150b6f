"""The OpenAPI description of what `atwhois serve` answers (served at /openapi.json): every
path, every status it may answer with, and the shape of every body, exact enough for a
contract test (Schemathesis, `tests/test_contract.py`) to check each answer against it."""

from __future__ import annotations

from typing import Any

from resolver import Outcome, Status

_ERROR = {"$ref": "#/components/schemas/XrpcError"}
_IDENTITY = {"$ref": "#/components/schemas/Identity"}

_REASONS = {
    200: "OK",
    201: "added",
    400: "input outside the lexicon format, or a handle that names a DID without being"
    " verified (InvalidRequest; the message starts with the reason)",
    401: "no bearer token",
    403: "wrong token, or the action is disabled (no token configured)",
    404: "confirmed absent: the error names the lexicon declares for the method",
    409: "an audit is already running",
    413: "the body is too large",
    502: "UpstreamFailure: an unusable document (no Retry-After), or the upstream failed"
    " and nothing usable is cached (Retry-After)",
    503: "NotEnoughResources: too many requests in flight (Retry-After)",
}
_RESOLVING = (400, 404, 502, 503)  # what every lookup may answer besides 200


def _nullable(kind: str) -> dict[str, Any]:
    return {"type": [kind, "null"]}


def _object(properties: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = sorted(properties)
    return schema


def _nullable_time() -> dict[str, Any]:
    return {"type": ["string", "null"], "format": "date-time"}


_TIME = {"type": "string", "format": "date-time"}  # ISO 8601, UTC
_COUNTS = {"type": "object", "additionalProperties": {"type": "integer"}}


def _strings() -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _responses(ok: dict[str, Any] | None, *codes: int, ok_code: int = 200) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if ok is not None:
        out[str(ok_code)] = _json(ok)
    for code in codes:
        out[str(code)] = _json(_ERROR, _REASONS[code])
    return out


def _query(name: str, description: str, pattern: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "minLength": 1}
    if pattern:
        schema["pattern"] = pattern
    return {
        "name": name,
        "in": "query",
        "required": True,
        "description": description,
        "schema": schema,
    }


def _body(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "required": required, "properties": properties}
    return {"required": True, "content": {"application/json": {"schema": schema}}}


_EVIDENCE = _object(
    {
        "outcome": {"type": "string", "enum": [str(o) for o in Outcome]},
        "dids": _strings(),
        "error": _nullable("string"),
        "error_kind": _nullable("string"),
        "ms": _nullable("number"),
        "source": _nullable("string"),
        "via": _nullable("string"),
    }
)
_CACHE = _object(
    {
        "cached": {"type": "boolean"},
        "age_s": {"type": "number"},
        "state": {"type": "string", "enum": ["fresh", "stale", "miss"]},
        "refresh_error": _nullable("string"),
        "fresh_for_s": {"type": "number"},
        "servable_for_s": {"type": "number"},
    }
)
_IDENTITY_FIELDS = {
    "query": {"type": "string"},
    "did": _nullable("string"),
    "handle": {"type": "string"},
    "declared_handle": _nullable("string"),
    "status": {"type": "string", "enum": [str(s) for s in Status]},
    "verified": {"type": "boolean"},
    "pds": _nullable("string"),
    "signing_key": _nullable("string"),
    "also_known_as": _strings(),
    "services": {
        "type": "array",
        "items": _object({k: {"type": "string"} for k in ("id", "type", "endpoint")}),
    },
    "rotation_keys": _strings(),
    "evidence": {
        "type": "object",
        "required": ["handle", "dns", "https", "did_doc", "plc_log"],
        "properties": {
            "handle": _nullable("string"),
            "dns": {"$ref": "#/components/schemas/Evidence"},
            "https": {"$ref": "#/components/schemas/Evidence"},
            "did_doc": {"$ref": "#/components/schemas/Evidence"},
            "plc_log": {
                "allOf": [
                    {"$ref": "#/components/schemas/Evidence"},
                    _object({"findings": _strings()}),
                ]
            },
            "refresh": _object({"outcome": {"const": "failed"}, "error": {"type": "string"}}),
        },
    },
    "warnings": _strings(),
    "error": _nullable("string"),
    "checked_at": {"type": "string"},
    "cache": {"oneOf": [{"type": "null"}, _CACHE]},
}
_SCHEMAS: dict[str, Any] = {
    "XrpcError": _object({"error": {"type": "string"}, "message": {"type": "string"}}),
    "Evidence": _EVIDENCE,
    "Identity": {
        "type": "object",
        "required": sorted(_IDENTITY_FIELDS),
        # with ?document=1, the DID document as served (null when there is none)
        "properties": {**_IDENTITY_FIELDS, "did_document": {"type": ["object", "null"]}},
    },
    "IdentityInfo": _object(
        {"did": {"type": "string"}, "handle": {"type": "string"}, "didDoc": {"type": "object"}}
    ),
    "Watched": _object(
        {
            "identifier": {"type": "string"},
            "label": _nullable("string"),
            "added_at": _TIME,
        }
    ),
    "Finding": _object(
        {
            "identifier": {"type": "string"},
            "kind": {"type": "string"},
            "severity": {"enum": ["critical", "warning", "info"]},
            "detail": {"type": "string"},
            "old": _nullable("string"),
            "new": _nullable("string"),
            "at": _TIME,
        }
    ),
    "RunReport": _object(
        {
            "run_id": {"type": "integer"},
            "source": {"type": "string"},
            "started_at": _TIME,
            "finished_at": _nullable_time(),
            "status": {"enum": ["running", "finished", "failed"]},
            "total": {"type": "integer"},
            "by_status": _COUNTS,
            "findings_by_kind": _COUNTS,
            "findings_by_severity": _COUNTS,
            "seconds": {"type": "number"},
            "webhook_delivered": {"type": ["boolean", "null"]},
        }
    ),
    "Run": _object(
        {
            "id": {"type": "integer"},
            "started_at": _TIME,
            "finished_at": _nullable_time(),
            "source": _nullable("string"),
            "status": {"enum": ["running", "finished", "failed", "interrupted"]},
            "summary": {"type": ["object", "null"]},
        }
    ),
}

# The lexicon formats, as patterns a generator can aim at (the daemon checks them exactly).
_HANDLE = (
    r"^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$"
)
_DID = r"^did:[a-z]+:[a-zA-Z0-9._:%-]*[a-zA-Z0-9._-]$"
_AT_IDENTIFIER = f"({_HANDLE})|({_DID})"
_AUTH: list[dict[str, list[str]]] = [{"bearer": []}]


def openapi() -> dict[str, Any]:
    xrpc = "/xrpc/com.atproto.identity."
    mini = _object({k: _nullable("string") for k in ("did", "handle", "pds", "signing_key")})
    identifier = {
        "name": "identifier",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "atwhois",
            "version": "0.1.0",
            "description": "Verified ATProto identity resolution, cached.",
        },
        "paths": {
            xrpc + "resolveHandle": {
                "get": {
                    "summary": "Handle to DID, verified both ways (stricter than the lexicon)",
                    "parameters": [_query("handle", "a handle", _HANDLE)],
                    "responses": _responses(_object({"did": {"type": "string"}}), *_RESOLVING),
                }
            },
            xrpc + "resolveDid": {
                "get": {
                    "summary": "DID to its DID document",
                    "parameters": [_query("did", "a DID", _DID)],
                    "responses": _responses(_object({"didDoc": {"type": "object"}}), *_RESOLVING),
                }
            },
            xrpc + "resolveIdentity": {
                "get": {
                    "summary": "Handle or DID to {did, handle (or handle.invalid), didDoc}",
                    "parameters": [_query("identifier", "a handle or a DID", _AT_IDENTIFIER)],
                    "responses": _responses(
                        {"$ref": "#/components/schemas/IdentityInfo"}, *_RESOLVING
                    ),
                }
            },
            xrpc + "refreshIdentity": {
                "post": {
                    "summary": "Resolve again, every part afresh (bearer token)",
                    "security": _AUTH,
                    "requestBody": _body(
                        {"identifier": {"type": "string", "pattern": _AT_IDENTIFIER}},
                        ["identifier"],
                    ),
                    "responses": _responses(
                        {"$ref": "#/components/schemas/IdentityInfo"},
                        400,
                        401,
                        403,
                        404,
                        413,
                        502,
                        503,
                    ),
                }
            },
            "/xrpc/com.bad-example.identity.resolveMiniDoc": {
                "get": {
                    "summary": "Slingshot-compatible mini document",
                    "parameters": [_query("identifier", "a handle or a DID", _AT_IDENTIFIER)],
                    "responses": _responses(mini, *_RESOLVING),
                }
            },
            "/v1/identity/{identifier}": {
                "get": {
                    "summary": "The full Identity report, with evidence and cache metadata",
                    "parameters": [
                        identifier,
                        {
                            "name": "document",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "enum": ["1", "true"]},
                        },
                    ],
                    "responses": {
                        "200": _json(_IDENTITY, "the report (the status inside)"),
                        "400": _json(_IDENTITY, "invalid input (the report says why)"),
                        "502": _json(_IDENTITY, "transient failure (the report)"),
                        "503": _json(_ERROR, _REASONS[503]),
                    },
                }
            },
            "/v1/watch": {
                "get": {
                    "summary": "The watch-list",
                    "responses": _responses(
                        {"type": "array", "items": {"$ref": "#/components/schemas/Watched"}},
                        503,
                    ),
                },
                "post": {
                    "summary": "Watch an identity (bearer token)",
                    "security": _AUTH,
                    "requestBody": _body(
                        {"identifier": {"type": "string"}, "label": {"type": "string"}},
                        ["identifier"],
                    ),
                    "responses": {
                        **_responses(
                            _object(
                                {"identifier": {"type": "string"}, "added": {"type": "boolean"}}
                            ),
                            400,
                            401,
                            403,
                            413,
                            503,
                        ),
                        "201": _json(
                            _object(
                                {"identifier": {"type": "string"}, "added": {"type": "boolean"}}
                            ),
                            _REASONS[201],
                        ),
                    },
                },
            },
            "/v1/watch/{identifier}": {
                "delete": {
                    "summary": "Stop watching an identity (bearer token)",
                    "security": _AUTH,
                    "parameters": [identifier],
                    "responses": _responses(
                        _object({"identifier": {"type": "string"}, "removed": {"type": "boolean"}}),
                        400,
                        401,
                        403,
                        404,
                        503,
                    ),
                }
            },
            "/v1/audit/runs": {
                "get": {
                    "summary": "The latest audit runs",
                    "parameters": [
                        {
                            "name": "limit",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string"},
                        }
                    ],
                    "responses": _responses(
                        {"type": "array", "items": {"$ref": "#/components/schemas/Run"}}, 503
                    ),
                },
                "post": {
                    "summary": "Audit the watch-list now (bearer token)",
                    "security": _AUTH,
                    "responses": _responses(
                        {"$ref": "#/components/schemas/RunReport"}, 401, 403, 409, 503
                    ),
                },
            },
            "/v1/audit/findings": {
                "get": {
                    "summary": "Audit findings since a time (ISO 8601 or Unix seconds)",
                    "parameters": [
                        {
                            "name": "since",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string"},
                        }
                    ],
                    "responses": _responses(
                        {"type": "array", "items": {"$ref": "#/components/schemas/Finding"}},
                        400,
                        503,
                    ),
                }
            },
            "/_health": {
                "get": {
                    "summary": "Liveness, degradation and upstream recency",
                    "responses": {
                        "200": _json(
                            _object(
                                {
                                    "ok": {"type": "boolean"},
                                    "status": {"type": "string", "enum": ["ok", "degraded"]},
                                    "reasons": _strings(),
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
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics",
                    "responses": {
                        "200": {
                            "description": "text exposition",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "This description",
                    "responses": {"200": _json({"type": "object"})},
                }
            },
        },
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
