"""`POST /v1/verify/service-auth`: an inter-service auth token checked against its issuer's
identity, for the services beside the daemon (feed generators, labelers, AppViews). The
audience and the accepted key ids may be fixed by the daemon's settings, so that a sidecar
asks with the token alone; a request may narrow them (a method, the replay check).

200 answers a verdict (`valid`, or `invalid` with the rule); 502 (with Retry-After) says
the issuer could not be resolved now, or that a replay cannot be ruled out (the replay
check's bounds are full, SA-JTI-2), which is not a verdict on the token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from atwhois.auth import Expected, ServiceAuthVerifier
from atwhois.resolver.service_auth import DEFAULT_KEY_ID
from atwhois.resolver.syntax import is_valid_nsid

from .bodies import json_response
from .service import Service
from .xrpc_errors import XrpcError


@dataclass(frozen=True, slots=True)
class Receiver:
    """What the daemon's settings fix for every request (None: each request says)."""

    audience: str | None = None
    key_ids: tuple[str, ...] = (DEFAULT_KEY_ID,)
    bare_audience: bool = True


class ServiceAuthApi:
    def __init__(self, service: Service, verifier: ServiceAuthVerifier, receiver: Receiver) -> None:
        self.service, self.verifier, self.receiver = service, verifier, receiver

    async def verify_service_auth(self, request: web.Request) -> web.Response:
        body = await self.service.json_body(request)
        token = body.get("token")
        if not isinstance(token, str) or not token:
            raise XrpcError(400, "InvalidRequest", "token is required")
        verification = await self.verifier.verify(
            token, self._expected(body), replay=_flag(body, "replay")
        )
        status, headers = 200, {"Cache-Control": "no-store"}
        if verification.outcome == "unavailable":
            status = 502
            headers["Retry-After"] = str(self.service.settings.retry_after)
        return json_response(verification.to_json(), status, headers)

    def _expected(self, body: dict[str, Any]) -> Expected:
        """What the token must say, from the settings and the request (a request may not
        widen what the settings fix: another audience, other key ids)."""
        audience = body.get("audience", self.receiver.audience)
        if not isinstance(audience, str) or not audience:
            raise XrpcError(400, "InvalidRequest", "audience is required (DID#service)")
        if self.receiver.audience is not None and audience != self.receiver.audience:
            raise XrpcError(
                400, "InvalidRequest", f"this daemon verifies for {self.receiver.audience}"
            )
        method = body.get("method")
        if method is not None and not (isinstance(method, str) and is_valid_nsid(method)):
            raise XrpcError(400, "InvalidRequest", "method must be an NSID")
        key_ids = body.get("key_ids", list(self.receiver.key_ids))
        if not (isinstance(key_ids, list) and key_ids and all(isinstance(k, str) for k in key_ids)):
            raise XrpcError(400, "InvalidRequest", "key_ids must be a list of key ids")
        if not set(key_ids) <= set(self.receiver.key_ids):
            accepted = ", ".join(self.receiver.key_ids)
            raise XrpcError(400, "InvalidRequest", f"key ids accepted here: {accepted}")
        return Expected(
            audience,
            method,
            tuple(key_ids),
            bare_audience=self.receiver.bare_audience,
        )


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise XrpcError(400, "InvalidRequest", f"{name} must be true or false")
    return value
