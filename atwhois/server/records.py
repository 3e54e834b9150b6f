"""`GET /v1/verify/record?uri=AT_URI[&cid=CID]`: a record verified at its repository's PDS
(docs/spec.md: R-REC-*), the identity the daemon keeps refreshed once when the answer may
be its change (R-REC-8), at most once a DID every few seconds whatever the callers send
(one `RecordVerifier` for every request). 200 answers a verdict (verified, invalid with the
rule, absent, inactive), with whether it is the CID given; 400 a URI or a CID that is not
one (nothing is asked); 502 (with Retry-After) unavailable, which is no verdict on the
record."""

from __future__ import annotations

from aiohttp import web

from atwhois.auth import RecordVerifier
from atwhois.resolver.errors import InvalidInput

from . import openapi
from .bodies import json_response
from .routes import Route
from .service import Service
from .xrpc_errors import XrpcError

_RECORD_STRINGS = "uri did collection rkey rule reason cid commit rev key pds status claimed"
_RECORD_VERDICT = openapi.object_of(
    {
        "outcome": {
            "type": "string",
            "enum": ["verified", "invalid", "absent", "inactive", "unavailable"],
        },
        "verified": {"type": "boolean"},
        "proven": {"type": "boolean"},  # verified, or absent as the signed tree shows
        "matches": openapi.nullable("boolean"),  # whether it is the CID given
        "refreshed": {"type": "boolean"},
        "value": {},  # the record, in atproto's JSON form
        **{name: openapi.nullable("string") for name in _RECORD_STRINGS.split()},
    }
)
ROUTES = (
    Route(
        "GET",
        "/v1/verify/record",
        "verify_record",
        {
            "summary": "A record verified at its PDS: the signed commit, the MST path, the record",
            "parameters": [
                openapi.query("uri", "the record's at:// URI (authority, collection, rkey)"),
                openapi.optional_query("cid", {"type": "string", "minLength": 1}),
            ],
            "responses": {
                "200": openapi.content(_RECORD_VERDICT, "verified, invalid, absent or inactive"),
                "400": openapi.content(openapi.ERROR, "a URI or CID that is not one"),
                "502": openapi.content(
                    _RECORD_VERDICT, "unavailable: asked again later, it may verify (Retry-After)"
                ),
                "503": openapi.content(openapi.ERROR, openapi.REASONS[503]),
            },
        },
    ),
)


class RecordsApi:
    def __init__(self, service: Service, verifier: RecordVerifier) -> None:
        self.service, self.verifier = service, verifier

    async def verify_record(self, request: web.Request) -> web.Response:
        uri = request.query.get("uri")
        if not uri:
            raise XrpcError(400, "InvalidRequest", "uri is required (at://DID/COLLECTION/RKEY)")
        try:
            verdict = await self.verifier.verify(uri, cid=request.query.get("cid"))
        except InvalidInput as err:
            raise XrpcError(400, "InvalidRequest", str(err)) from None
        status, headers = 200, {"Cache-Control": "no-store"}
        if verdict.outcome == "unavailable":
            status = 502
            headers["Retry-After"] = str(self.service.settings.retry_after)
        return json_response(verdict.to_json(), status, headers)
