"""The OpenAPI description of what `atwhois serve` answers (served at /openapi.json)."""

from __future__ import annotations

from typing import Any

_ERROR = {"$ref": "#/components/schemas/XrpcError"}


def _responses(ok: dict[str, Any], *codes: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "200": {"description": "OK", "content": {"application/json": {"schema": ok}}}
    }
    reasons = {
        400: "invalid syntax (InvalidRequest)",
        401: "no bearer token",
        403: "wrong token, or refresh disabled",
        404: "HandleNotFound, DidNotFound or DidDeactivated",
        502: "the upstream failed and nothing usable is cached (Retry-After)",
        503: "overloaded (Retry-After)",
    }
    for code in codes:
        out[str(code)] = {
            "description": reasons[code],
            "content": {"application/json": {"schema": _ERROR}},
        }
    return out


def _query(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


_INFO = {
    "type": "object",
    "required": ["did", "handle", "didDoc"],
    "properties": {
        "did": {"type": "string"},
        "handle": {"type": "string"},
        "didDoc": {"type": "object"},
    },
}


def openapi() -> dict[str, Any]:
    xrpc = "/xrpc/com.atproto.identity."
    mini = {
        "type": "object",
        "required": ["did", "handle", "pds", "signing_key"],
        "properties": {
            k: {"type": ["string", "null"]} for k in ("did", "handle", "pds", "signing_key")
        },
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
                    "parameters": [_query("handle", "a handle")],
                    "responses": _responses(
                        {
                            "type": "object",
                            "required": ["did"],
                            "properties": {"did": {"type": "string"}},
                        },
                        400,
                        404,
                        502,
                        503,
                    ),
                }
            },
            xrpc + "resolveDid": {
                "get": {
                    "summary": "DID to its DID document",
                    "parameters": [_query("did", "a DID")],
                    "responses": _responses(
                        {
                            "type": "object",
                            "required": ["didDoc"],
                            "properties": {"didDoc": {"type": "object"}},
                        },
                        400,
                        404,
                        502,
                        503,
                    ),
                }
            },
            xrpc + "resolveIdentity": {
                "get": {
                    "summary": "Handle or DID to {did, handle (or handle.invalid), didDoc}",
                    "parameters": [_query("identifier", "a handle or a DID")],
                    "responses": _responses(_INFO, 400, 404, 502, 503),
                }
            },
            xrpc + "refreshIdentity": {
                "post": {
                    "summary": "Purge and resolve again (bearer token)",
                    "security": [{"bearer": []}],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["identifier"],
                                    "properties": {"identifier": {"type": "string"}},
                                }
                            }
                        },
                    },
                    "responses": _responses(_INFO, 400, 401, 403, 404, 502, 503),
                }
            },
            "/xrpc/com.bad-example.identity.resolveMiniDoc": {
                "get": {
                    "summary": "Slingshot-compatible mini document",
                    "parameters": [_query("identifier", "a handle or a DID")],
                    "responses": _responses(mini, 400, 404, 502, 503),
                }
            },
            "/v1/identity/{identifier}": {
                "get": {
                    "summary": "The full Identity report, with evidence and cache metadata",
                    "parameters": [
                        {
                            "name": "identifier",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                        {
                            "name": "document",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "enum": ["1", "true"]},
                        },
                    ],
                    "responses": {
                        "200": {"description": "the report (status inside)"},
                        "400": {"description": "invalid input (report)"},
                        "502": {"description": "transient failure (report)"},
                    },
                }
            },
            "/_health": {
                "get": {
                    "summary": "liveness and upstream recency",
                    "responses": {"200": {"description": "OK"}},
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics",
                    "responses": {"200": {"description": "text exposition"}},
                }
            },
        },
        "components": {
            "schemas": {
                "XrpcError": {
                    "type": "object",
                    "required": ["error", "message"],
                    "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
                }
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
