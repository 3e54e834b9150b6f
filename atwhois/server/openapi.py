"""The OpenAPI description of what `atwhois serve` answers (served at /openapi.json): every
path, every status it may answer with, and the shape of every body, exact enough for a
contract test (Schemathesis, `tests/server/test_contract.py`) to check each answer against it.

Here: the shapes (the schemas, declarative) and the pieces an operation is written with;
each route's operation is written beside its handler (`routes.Route`), and `document`
puts the routes a daemon answers into one description."""

from __future__ import annotations

from typing import Any

from atwhois.resolver import Outcome, Status
from atwhois.resolver.identity import HOSTED, INACTIVE, INVALID, NOT_HOSTED, UNREACHABLE

ERROR = {"$ref": "#/components/schemas/XrpcError"}
IDENTITY = {"$ref": "#/components/schemas/Identity"}

REASONS = {
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
RESOLVING = (400, 404, 502, 503)  # what every lookup may answer besides 200


def nullable(kind: str) -> dict[str, Any]:
    return {"type": [kind, "null"]}


def object_of(properties: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = sorted(properties)
    return schema


def nullable_time() -> dict[str, Any]:
    return {"type": ["string", "null"], "format": "date-time"}


_TIME = {"type": "string", "format": "date-time"}  # ISO 8601, UTC
_COUNTS = {"type": "object", "additionalProperties": {"type": "integer"}}


def strings() -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}}


def content(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def responses(ok: dict[str, Any] | None, *codes: int, ok_code: int = 200) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if ok is not None:
        out[str(ok_code)] = content(ok)
    for code in codes:
        out[str(code)] = content(ERROR, REASONS[code])
    return out


def query(name: str, description: str, pattern: str | None = None) -> dict[str, Any]:
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


def body(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "required": required, "properties": properties}
    return {"required": True, "content": {"application/json": {"schema": schema}}}


_EVIDENCE = object_of(
    {
        "outcome": {"type": "string", "enum": [str(o) for o in Outcome]},
        "dids": strings(),
        "error": nullable("string"),
        "error_kind": nullable("string"),
        "ms": nullable("number"),
        "source": nullable("string"),
        "via": nullable("string"),
    }
)
_CACHE = object_of(
    {
        "cached": {"type": "boolean"},
        "age_s": {"type": "number"},
        "state": {"type": "string", "enum": ["fresh", "stale", "revalidating", "miss"]},
        "refresh_error": nullable("string"),
        "fresh_for_s": {"type": "number"},
        "servable_for_s": {"type": "number"},
        "revalidating": nullable("string"),
        "changed_by": nullable("string"),
    }
)
_IDENTITY_FIELDS = {
    "query": {"type": "string"},
    "did": nullable("string"),
    "handle": {"type": "string"},
    "declared_handle": nullable("string"),
    "status": {"type": "string", "enum": [str(s) for s in Status]},
    "verified": {"type": "boolean"},
    "pds": nullable("string"),
    "signing_key": nullable("string"),
    "also_known_as": strings(),
    "services": {
        "type": "array",
        "items": object_of({k: {"type": "string"} for k in ("id", "type", "endpoint")}),
    },
    "rotation_keys": {**strings(), "type": ["array", "null"]},  # null: not checked
    "evidence": {
        "type": "object",
        "required": ["handle", "dns", "https", "did_doc", "plc_log"],
        "properties": {
            "handle": nullable("string"),
            "dns": {"$ref": "#/components/schemas/Evidence"},
            "https": {"$ref": "#/components/schemas/Evidence"},
            "did_doc": {"$ref": "#/components/schemas/Evidence"},
            "plc_log": {
                "allOf": [
                    {"$ref": "#/components/schemas/Evidence"},
                    object_of({"findings": strings()}),
                ]
            },
            "refresh": object_of({"outcome": {"const": "failed"}, "error": {"type": "string"}}),
            # with check_pds: what the PDS the document names said of the account
            "pds": object_of(
                {
                    "outcome": {"enum": [HOSTED, INACTIVE, NOT_HOSTED, UNREACHABLE, INVALID]},
                    "pds": {"type": "string"},
                    **{
                        name: nullable("string")
                        for name in ("status", "rev", "commit", "key", "signed_with", "error")
                    },
                    "ms": nullable("number"),
                }
            ),
        },
    },
    "warnings": strings(),
    "error": nullable("string"),
    "checked_at": {"type": "string"},
    "cache": {"oneOf": [{"type": "null"}, _CACHE]},
}
_SCHEMAS: dict[str, Any] = {
    "XrpcError": object_of({"error": {"type": "string"}, "message": {"type": "string"}}),
    "Evidence": _EVIDENCE,
    "Identity": {
        "type": "object",
        "required": sorted(_IDENTITY_FIELDS),
        # with ?document=1, the DID document as served (null when there is none)
        "properties": {**_IDENTITY_FIELDS, "did_document": {"type": ["object", "null"]}},
    },
    "IdentityInfo": object_of(
        {"did": {"type": "string"}, "handle": {"type": "string"}, "didDoc": {"type": "object"}}
    ),
    "Watched": object_of(
        {
            "identifier": {"type": "string"},
            "label": nullable("string"),
            "added_at": _TIME,
        }
    ),
    "Finding": object_of(
        {
            "identifier": {"type": "string"},
            "kind": {"type": "string"},
            "severity": {"enum": ["critical", "warning", "info"]},
            "detail": {"type": "string"},
            "old": nullable("string"),
            "new": nullable("string"),
            "at": _TIME,
        }
    ),
    "RunReport": object_of(
        {
            "run_id": {"type": "integer"},
            "source": {"type": "string"},
            "started_at": _TIME,
            "finished_at": nullable_time(),
            "status": {"enum": ["running", "finished", "failed"]},
            "total": {"type": "integer"},
            "by_status": _COUNTS,
            "findings_by_kind": _COUNTS,
            "findings_by_severity": _COUNTS,
            "seconds": {"type": "number"},
            "webhook_delivered": {"type": ["boolean", "null"]},
        }
    ),
    "Run": object_of(
        {
            "id": {"type": "integer"},
            "started_at": _TIME,
            "finished_at": nullable_time(),
            "source": nullable("string"),
            "status": {"enum": ["running", "finished", "failed", "interrupted"]},
            "summary": {"type": ["object", "null"]},
        }
    ),
}

# The lexicon formats, as patterns a generator can aim at (the daemon checks them exactly).
HANDLE = (
    r"^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$"
)
DID = r"^did:[a-z]+:[a-zA-Z0-9._:%-]*[a-zA-Z0-9._-]$"
AT_IDENTIFIER = f"({HANDLE})|({DID})"
BEARER: list[dict[str, list[str]]] = [{"bearer": []}]

PATH_IDENTIFIER = {
    "name": "identifier",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
}


def optional_query(name: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """A query parameter that may be left out."""
    return {"name": name, "in": "query", "required": False, "schema": schema or {"type": "string"}}


def document(paths: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The description of a daemon that answers `paths` (path -> verb -> operation)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "atwhois",
            "version": "0.1.0",
            "description": "Verified ATProto identity resolution, cached.",
        },
        "paths": paths,
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
