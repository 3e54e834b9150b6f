"""`GET /v1/oauth/{identifier}`: an account's OAuth authorization server, found from its
identity and checked (docs/spec.md: O-*), with the identities the daemon keeps and the
documents it keeps beside them (O-CACHE-1). 200 answers a verdict (ok, invalid with the
rule, not verified with the identity's status); 400 input that names no account (nothing is
asked); 502 (with Retry-After) unavailable, which is no verdict on the server."""

from __future__ import annotations

from aiohttp import web

from atwhois.auth import oauth_server
from atwhois.resolver.errors import InvalidInput

from .bodies import json_response
from .service import Service
from .xrpc_errors import XrpcError


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
