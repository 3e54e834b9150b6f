"""What each identity method answers when a lookup does not verify: an HTTP status and an
error name, decided per method from its lexicon (`tests/vectors/lexicons`).

A method uses only the error names its lexicon declares, and XRPC's generic names for the
rest (`InvalidRequest`, `UpstreamFailure`, …), so a generated client maps every answer to
its own error class or to the generic one, never to a name it cannot know:

- `resolveHandle` declares only `HandleNotFound` ("confirmed that the handle does not
  resolve to any DID"): a handle with no record, or whose DID is absent or deactivated,
  leads to no current DID. A handle whose DID does not declare it back (a mismatch), or
  whose DNS names two DIDs, *does* name a DID: not "not found", and not verified either,
  so it is refused as `InvalidRequest` (400) with the reason in the message.
- `resolveDid` declares `DidNotFound` and `DidDeactivated`.
- `resolveIdentity` and `refreshIdentity` declare all three.
- A document that is invalid, or that its own PLC log contradicts, is an upstream answer
  that cannot be used: `UpstreamFailure` (502), without `Retry-After`; a transient failure
  with nothing usable cached is `UpstreamFailure` with `Retry-After`.
"""

from __future__ import annotations

from atwhois.resolver import Status
from atwhois.resolver.errors import AtwhoisError

Failure = tuple[int, str]  # HTTP status, XRPC error name


class XrpcError(AtwhoisError):
    """A request the daemon answers with an XRPC error body (status, error name, message);
    `cache` is its Cache-Control (a confirmed absence is cacheable)."""

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        *,
        retry_after: int | None = None,
        cache: str = "no-store",
    ) -> None:
        super().__init__(message)
        self.status, self.error, self.retry_after, self.cache = status, error, retry_after, cache


# XRPC's generic error names (the HTTP status table of the XRPC specification), which any
# method may use, and the token errors of its authentication section.
GENERIC_ERRORS = frozenset(
    {
        "InvalidRequest",
        "AuthenticationRequired",
        "Forbidden",
        "InvalidToken",
        "ExpiredToken",
        "PayloadTooLarge",
        "RateLimitExceeded",
        "InternalServerError",
        "MethodNotImplemented",
        "UpstreamFailure",
        "NotEnoughResources",
        "UpstreamTimeout",
    }
)

_DOCUMENT_UNUSABLE: dict[Status, Failure] = {
    Status.INVALID_DOCUMENT: (502, "UpstreamFailure"),
    Status.PLC_LOG_INVALID: (502, "UpstreamFailure"),
    Status.UNAVAILABLE: (502, "UpstreamFailure"),
}
_BINDING_REFUSED: dict[Status, Failure] = {
    Status.HANDLE_NOT_FOUND: (404, "HandleNotFound"),
    Status.HANDLE_MISMATCH: (400, "InvalidRequest"),
    Status.AMBIGUOUS: (400, "InvalidRequest"),
}

RESOLVE_HANDLE: dict[Status, Failure] = {
    **_DOCUMENT_UNUSABLE,
    **_BINDING_REFUSED,
    Status.DID_NOT_FOUND: (404, "HandleNotFound"),
    Status.DID_DEACTIVATED: (404, "HandleNotFound"),
}
RESOLVE_DID: dict[Status, Failure] = {
    **_DOCUMENT_UNUSABLE,
    Status.DID_NOT_FOUND: (404, "DidNotFound"),
    Status.DID_DEACTIVATED: (404, "DidDeactivated"),
}
RESOLVE_IDENTITY: dict[Status, Failure] = {**RESOLVE_DID, **_BINDING_REFUSED}

# The lexicon that declares each table's names (refreshIdentity declares the same as
# resolveIdentity; the mini-doc methods answer as resolveIdentity does).
TABLES = {
    "com.atproto.identity.resolveHandle": RESOLVE_HANDLE,
    "com.atproto.identity.resolveDid": RESOLVE_DID,
    "com.atproto.identity.resolveIdentity": RESOLVE_IDENTITY,
    "com.atproto.identity.refreshIdentity": RESOLVE_IDENTITY,
}
