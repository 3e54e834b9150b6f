"""The identity whose key signed what a stranger sends (a token's issuer, SA-*; a label's
labeler, L-*; a repository's account, R-REC-*): whether its DID document may vouch for a
signature at all (`refusal`), and its key, read once while the document is the one kept
(`document_key`). The refresh-once rule they share (SA-SIG-2, L-KEY-3, R-REC-8) is
`atwhois.auth.refresh`'s: it resolves, which rules here do not.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from .document import verification_key
from .identity import Identity
from .keys import PublicKey
from .outcome import Status

PARSED_KEPT = 1024  # signers' documents held decoded (a few KiB each)

# A signer in these states vouches for nothing it signed, whatever its key (SA-ISS-2,
# L-KEY-2); UNAVAILABLE is not a verdict.
_REFUSING = {
    Status.DID_NOT_FOUND: "{}'s DID does not exist",
    Status.DID_DEACTIVATED: "{} is not active",
    Status.INVALID_DOCUMENT: "{}'s DID document is invalid",
    Status.PLC_LOG_INVALID: "{}'s operation log does not prove its document",
    Status.INVALID_INPUT: "{} is not a DID atwhois resolves",
}


def refusal(identity: Identity, who: str) -> str | None:
    """Why `identity` (`who`: "the issuer", "the labeler") cannot vouch for a signature,
    in words, naming its status; None when its document may (or it is unavailable, which
    is no verdict: the caller says so)."""
    refusing = _REFUSING.get(identity.status)
    if refusing is not None:
        return f"{refusing.format(who)} ({identity.status}): {identity.error}"
    if identity.status is not Status.UNAVAILABLE and identity.servable_document is None:
        return f"{who}'s DID document did not resolve ({identity.status})"
    return None


@functools.lru_cache(maxsize=PARSED_KEPT)
def parsed_document(document: bytes) -> Any:
    """A signer's document decoded once while it is the one kept: everything it signed is
    checked against the same bytes (read only, never changed)."""
    return json.loads(document)


@functools.lru_cache(maxsize=PARSED_KEPT)
def document_key(document: bytes, did: str, key_id: str) -> PublicKey | None:
    """The `#key_id` key of a signer's document (DOC-KEY-1..3), found and parsed once while
    the document is the one kept."""
    return verification_key(parsed_document(document), did, key_id)
