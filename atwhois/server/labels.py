"""`POST /v1/verify/label`: moderation labels checked against their labelers' identities
(docs/spec.md: L-*), for the services beside the daemon (AppViews, feeds, clients' back
ends) that take labels from third-party labelers. The body is `{"label": {…}}` or
`{"labels": [{…}, …]}` (L-IN-1), each label in the lexicon's JSON form; the labelers'
documents are the ones the daemon keeps, refreshed once for a label they refuse (L-KEY-3).

200 answers the verdict (or `{"verdicts": […]}`, in order): verified (`in_force` false for a
negation or a label past its `exp`), or invalid with the rule; 400 a body that holds no
label objects; 413 a body over a mebibyte; 502 (with Retry-After, the same body) when a
labeler could not be resolved now, which is no verdict on its label."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from atwhois.auth import LabelVerifier
from atwhois.resolver.label import MAX_BATCH, MAX_BATCH_BYTES
from atwhois.resolver.untrusted import parse_json

from . import openapi
from .bodies import json_response
from .routes import Route
from .service import Service
from .xrpc_errors import XrpcError

_LABEL_FIELDS = "rule reason src uri val cid cts exp key"
_LABEL_VERDICT = openapi.object_of(
    {
        "outcome": {"type": "string", "enum": ["verified", "invalid", "unavailable"]},
        **{name: {"type": "boolean"} for name in ("verified", "in_force", "negated", "expired")},
        "neg": openapi.nullable("boolean"),  # as received: true, false, or absent (null)
        "document": openapi.object_of(
            {"checked_at": openapi.nullable("string"), "refreshed": {"type": "boolean"}}
        ),
        **{name: openapi.nullable("string") for name in _LABEL_FIELDS.split()},
    }
)
_LABEL_ANSWER = {"oneOf": [_LABEL_VERDICT, openapi.object_of({"verdicts": {"type": "array"}})]}
_ONE_TO_MANY = {"type": "array", "items": {"type": "object"}, "minItems": 1, "maxItems": 1000}
_ONE_OR_MANY = [
    openapi.object_of({"label": {"type": "object"}}),
    openapi.object_of({"labels": _ONE_TO_MANY}),
]
_LABELS_ASKED = {"schema": {"oneOf": _ONE_OR_MANY}}  # one label, or a list of them
ROUTES = (
    Route(
        "POST",
        "/v1/verify/label",
        "verify_label",
        {
            "summary": "Moderation labels checked against their labelers' #atproto_label keys",
            "requestBody": {"required": True, "content": {"application/json": _LABELS_ASKED}},
            "responses": {
                "200": openapi.content(_LABEL_ANSWER, "each verified (in force or not) or invalid"),
                "400": openapi.content(openapi.ERROR, "a body that holds no label objects"),
                "413": openapi.content(openapi.ERROR, openapi.REASONS[413]),
                "502": openapi.content(
                    _LABEL_ANSWER, "a labeler could not be resolved now (Retry-After)"
                ),
                "503": openapi.content(openapi.ERROR, openapi.REASONS[503]),
            },
        },
    ),
)


class LabelsApi:
    def __init__(self, service: Service, verifier: LabelVerifier) -> None:
        self.service, self.verifier = service, verifier

    async def verify_label(self, request: web.Request) -> web.Response:
        body = await _body(request)
        one, many = body.get("label"), body.get("labels")
        if (one is None) == (many is None):
            raise XrpcError(400, "InvalidRequest", "label (one) or labels (a list) is required")
        labels = [one] if many is None else many
        if not isinstance(labels, list) or not 0 < len(labels) <= MAX_BATCH:
            raise XrpcError(400, "InvalidRequest", f"labels is a list of 1 to {MAX_BATCH}")
        for index, label in enumerate(labels):
            if not isinstance(label, dict):
                where = "label" if many is None else f"labels[{index}]"
                raise XrpcError(400, "InvalidRequest", f"{where} is not an object [L-IN-1]")
        verdicts = await self.verifier.verify_many(labels)
        status, headers = 200, {"Cache-Control": "no-store"}
        if any(verdict.outcome == "unavailable" for verdict in verdicts):
            status = 502
            headers["Retry-After"] = str(self.service.settings.retry_after)
        answer = [verdict.to_json() for verdict in verdicts]
        return json_response(answer[0] if many is None else {"verdicts": answer}, status, headers)


async def _body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, within `MAX_BATCH_BYTES` (more than the daemon's other
    bodies may be: a page of labels), read as it comes and refused once past it."""
    too_large = XrpcError(413, "PayloadTooLarge", f"a body over {MAX_BATCH_BYTES} bytes")
    if (request.content_length or 0) > MAX_BATCH_BYTES:
        raise too_large
    data = bytearray()
    async for chunk in request.content.iter_any():
        data += chunk
        if len(data) > MAX_BATCH_BYTES:
            raise too_large
    try:
        body = parse_json(bytes(data))
    except ValueError:
        raise XrpcError(400, "InvalidRequest", "the body must be JSON") from None
    if not isinstance(body, dict):
        raise XrpcError(400, "InvalidRequest", "the body must be a JSON object")
    return body
