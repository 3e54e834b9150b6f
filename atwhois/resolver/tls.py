"""The TLS context a process verifies servers with: one per trust store, made on first use
and shared (by the fetchers, by the client of a running daemon): loading the system's
certificates takes longer than a lookup on a near network."""

from __future__ import annotations

import functools
import ssl


@functools.cache
def tls_context(ca_bundle: str | None) -> ssl.SSLContext:
    """The context trusting `ca_bundle` (None: the system's trust store)."""
    return ssl.create_default_context(cafile=ca_bundle)
