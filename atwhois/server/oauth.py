"""`GET /v1/oauth/{identifier}`: an account's OAuth authorization server, found from its
identity and checked (docs/spec.md: O-*), with the identities the daemon keeps and the
documents it keeps beside them (O-CACHE-1). 200 answers a verdict (ok, invalid with the
rule, not verified with the identity's status); 400 input that names no account (nothing is
asked); 502 (with Retry-After) unavailable, which is no verdict on the server."""

from __future__ import annotations

from aiohttp import web

from atwhois.auth import oauth_server
from atwhois.resolver.errors import InvalidInput

from . import openapi
from .bodies import json_response
from .routes import Route
from .service import Service
from .xrpc_errors import XrpcError

_OAUTH_STRINGS = "query did handle pds issuer rule reason status"
_ACCOUNT = openapi.AT_IDENTIFIER
_OAUTH_SERVER = openapi.object_of(
    {
        "outcome": {"type": "string", "enum": ["ok", "invalid", "not_verified", "unavailable"]},
        "ok": {"type": "boolean"},
        "protected_resource": {"type": ["object", "null"]},  # as the PDS serves it
        "authorization_server": {"type": ["object", "null"]},  # as the issuer serves it
        "kept_s": openapi.nullable("number"),  # how long the documents were kept (O-CACHE-1)
        "identity": {"oneOf": [{"type": "null"}, openapi.IDENTITY]},
        **{name: openapi.nullable("string") for name in _OAUTH_STRINGS.split()},
    }
)
ROUTES = (
    Route(
        "GET",
        "/v1/oauth/{identifier}",
        "oauth_server",
        {
            "summary": "An account's OAuth authorization server: its PDS's protected resource "
            "metadata and the server's metadata, checked against the atproto profile",
            # the account: a handle or a DID (what else a lookup reads is taken too)
            "parameters": [
                {**openapi.PATH_IDENTIFIER, "schema": {"type": "string", "pattern": _ACCOUNT}}
            ],
            "responses": {
                "200": openapi.content(_OAUTH_SERVER, "ok, invalid (the rule) or not verified"),
                "400": openapi.content(openapi.ERROR, "input that names no account"),
                "502": openapi.content(
                    _OAUTH_SERVER, "unavailable: asked again later, it may be ok (Retry-After)"
                ),
                "503": openapi.content(openapi.ERROR, openapi.REASONS[503]),
            },
        },
    ),
)


class OAuthApi:
    def __init__(self, service: Service) -> None:
        self.service = service

    async def oauth_server(self, request: web.Request) -> web.Response:
        try:
            found = await oauth_server(self.service.cached, request.match_info["identifier"])
        except InvalidInput as err:
            raise XrpcError(400, "InvalidRequest", str(err)) from None
        status, headers = 200, {"Cache-Control": "no-store"}
        if found.outcome == "unavailable":
            status = 502
            headers["Retry-After"] = str(self.service.settings.retry_after)
        return json_response(found.to_json(), status, headers)
