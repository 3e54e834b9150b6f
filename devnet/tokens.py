"""Service-auth tokens for the tests and benchmarks that need one anyone could send: well
formed, addressed to `AUDIENCE`, naming an issuer whose key did not sign it (refused once
the issuer's document is at hand, SA-SIG-1)."""

from __future__ import annotations

import os
import time

import coincurve

from atwhois.resolver.service_auth import mint

AUDIENCE = "did:web:feed.example#bsky_fg"
_STRANGER = coincurve.PrivateKey(b"\x05" * 32)  # nobody's key in any document


def forged_token(issuer: str) -> str:
    """A token claiming to be `issuer`'s, each with a nonce of its own."""
    now = int(time.time())
    claims = {"iss": issuer, "aud": AUDIENCE, "iat": now, "exp": now + 60}
    return mint(_STRANGER, {**claims, "jti": os.urandom(8).hex()})
