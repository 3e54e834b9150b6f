"""Asking a running daemon over HTTP, as a client would."""

from __future__ import annotations

import re

import httpx

from devnet.atwhois import Daemon

XRPC = "/xrpc/com.atproto.identity."
TOKEN = "test-refresh-token"  # the refresh token of the `daemon` fixture (conftest)


def get(daemon: Daemon, path: str, **params: str) -> httpx.Response:
    return httpx.get(daemon.url + path, params=params, timeout=30)


def max_age(response: httpx.Response) -> int:
    """The answer's Cache-Control max-age (0 when it has none: no-store)."""
    found = re.search(r"max-age=(\d+)", response.headers.get("Cache-Control", ""))
    return int(found.group(1)) if found else 0


def xrpc_error(response: httpx.Response, status: int, name: str) -> str:
    """The XRPC error body of `response`, which must be `status` and `name`; its message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == name and isinstance(body["message"], str)
    return str(body["message"])
