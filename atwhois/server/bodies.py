"""The bodies the daemon answers with: JSON, compact, and a DID document spliced in as it
was served (never decoded and encoded again)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


def compact(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def json_response(
    data: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=compact(data),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def json_bytes(status: int, body: bytes, cache: str) -> web.Response:
    # The headers as given, not content_type=: aiohttp would parse it again on every answer.
    headers = {"Content-Type": "application/json", "Cache-Control": cache}
    return web.Response(body=body, status=status, headers=headers)


def json_head(body: bytes, cache: str) -> bytes:
    """The header lines `json_bytes` answers `body` with, as sent (a ready answer's)."""
    return b"Content-Type: application/json\r\nCache-Control: %s\r\nContent-Length: %d\r\n" % (
        cache.encode(),
        len(body),
    )


def with_document(fields: dict[str, Any], document: bytes) -> bytes:
    """`fields` and `didDoc` as one JSON object, the document spliced in as served (valid
    UTF-8 JSON, checked when it was fetched): neither decoded nor encoded again."""
    if not fields:  # resolveDid's: no encoder needed
        return b'{"didDoc":' + document + b"}"
    return compact(fields)[:-1] + b',"didDoc":' + document + b"}"


def did_body(did: str) -> bytes:
    """resolveHandle's answer (a DID has nothing JSON escapes: what json.dumps would write)."""
    return b'{"did":"' + did.encode() + b'"}'
