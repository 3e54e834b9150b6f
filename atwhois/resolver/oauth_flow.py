"""OAuth discovery from an account (docs/spec.md: O-FLOW-*, O-FETCH-*, O-CACHE-1): its identity
through a `Directory` (a handle verified both ways, a DID's document), its PDS's protected
resource metadata, then its authorization server's metadata, each fetched through the
guarded fetcher (the address guard: the server's host is whoever wrote the PDS's document;
the HTTPS deadline; a size cap; no redirect followed; the host's pace) and read by the rules
of `resolver.oauth`. A token response checked after the exchange (O-TOK-*): its `sub`
bound to the DID the flow started from and, resolved afresh, to the session's issuer.

The documents of a PDS are kept a few minutes (`KeptDocuments`, H-CACHE-3's short
lifetime for sign-in flows), by whoever keeps identities (a cache, the daemon); a resolver
keeps nothing, and a token's check uses nothing kept."""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from atwhois.foundation.lru import Lru

from .config import Config
from .directory import Directory
from .errors import (
    InvalidData,
    InvalidDid,
    InvalidIdentifier,
    InvalidInput,
    NotFound,
    ResolutionError,
    UpstreamFailure,
)
from .identity import Identity
from .oauth import (
    AUTHORIZATION_SERVER_PATH,
    PROTECTED_RESOURCE_PATH,
    OAuthRefused,
    OAuthServer,
    TokenCheck,
    check_issuer,
    check_protected_resource,
    check_server_metadata,
    origin_of,
    read_document,
    read_token_response,
)
from .outcome import Outcome, Status
from .response import Getter
from .rules import cited
from .syntax import is_valid_did, parse_lookup

MAX_DOCUMENT = 64 * 1024  # O-FETCH-1: the reference's metadata is under 2 KiB
LIFETIME = 300.0  # O-CACHE-1: seconds (the reference server's own Cache-Control: max-age)
MAX_KEPT = 4 * 1024 * 1024  # O-CACHE-1: bytes of documents kept, some 2,000 PDSes' worth
_TRANSIENT = {408, 425, 429, 500, 502, 503, 504}
Document = dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Documents:
    issuer: str
    protected_resource: dict[str, Any]
    authorization_server: dict[str, Any]
    size: int  # the bodies' bytes, what the bound counts
    at: float  # when they were fetched (the clock's)


class KeptDocuments:
    """O-CACHE-1: a PDS's two documents, checked, kept under its origin for `lifetime`
    seconds, `max_bytes` of them at most (the least recently used go first)."""

    def __init__(
        self,
        *,
        lifetime: float = LIFETIME,
        max_bytes: int = MAX_KEPT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lifetime = lifetime
        self._clock = clock
        self._kept: Lru[str, _Documents] = Lru(max_bytes, lambda _, kept: kept.size)

    def get(self, pds: str) -> tuple[_Documents, float] | None:
        """The documents kept for `pds` and their age, if they are young enough."""
        kept = self._kept.get(pds)
        if kept is None:
            return None
        age = self._clock() - kept.at
        if age > self.lifetime:
            self._kept.pop(pds)
            return None
        return kept, age

    def put(self, pds: str, documents: tuple[str, Document, Document], size: int) -> None:
        """`pds`'s issuer and two documents, `size` bytes as served, kept from now."""
        self._kept.put(pds, _Documents(*documents, size, self._clock()))


async def discover(
    directory: Directory,
    web: Getter,
    identifier: str,
    *,
    config: Config,
    kept: KeptDocuments | None = None,
    fresh: bool = False,
) -> OAuthServer:
    """The authorization server of the account `identifier` names (a handle or a DID),
    found and checked. `fresh`: the identity resolved afresh and the documents fetched now,
    whatever is kept. Raises `InvalidInput` before anything is asked."""
    query = parse_lookup(identifier, dev=config.dev)
    identity = await (directory.refresh if fresh else directory.lookup)(identifier)
    lifetime = kept.lifetime if kept is not None else LIFETIME
    kept_for = identity.cache.age_s if identity.cache and identity.cache.cached else 0.0
    if not fresh and kept_for > lifetime:  # O-CACHE-1: kept longer than a sign-in allows
        identity = await directory.refresh(identifier)
    found = OAuthServer("invalid", identifier, did=identity.did, status=str(identity.status))
    found = dataclasses.replace(found, handle=identity.handle, identity=identity)
    refused = _identity_refused(found, query.kind, identity)
    if refused is not None:
        return refused
    assert identity.pds is not None
    pds = origin_of(identity.pds)
    found = dataclasses.replace(found, pds=pds)
    hit = kept.get(pds) if kept is not None and not fresh else None
    if hit is not None:
        documents, age = hit
        return dataclasses.replace(
            found,
            outcome="ok",
            issuer=documents.issuer,
            # copies: what a caller does with its answer is not what the next one is told
            protected_resource=copy.deepcopy(documents.protected_resource),
            authorization_server=copy.deepcopy(documents.authorization_server),
            kept_s=round(age, 3),
        )
    try:
        resource, size = await _fetch(web, pds + PROTECTED_RESOURCE_PATH, "O-PRM-1", config)
        found = dataclasses.replace(found, protected_resource=resource)
        issuer = check_protected_resource(resource, pds, dev=config.dev)
        found = dataclasses.replace(found, issuer=issuer)
        server, more = await _fetch(web, issuer + AUTHORIZATION_SERVER_PATH, "O-ASM-1", config)
        found = dataclasses.replace(found, authorization_server=server)
        check_server_metadata(server, issuer, pds, dev=config.dev)
    except OAuthRefused as err:
        return dataclasses.replace(found, rule=err.rule, reason=err.message)
    except ResolutionError as err:
        return dataclasses.replace(found, outcome="unavailable", reason=str(err))
    if kept is not None:  # its own copies, as each answer from them is
        kept.put(pds, (issuer, copy.deepcopy(resource), copy.deepcopy(server)), size + more)
    return dataclasses.replace(found, outcome="ok")


def _identity_refused(found: OAuthServer, kind: str, identity: Identity) -> OAuthServer | None:
    """O-FLOW-1, O-FLOW-2: what the identity settles before its PDS is asked, if it does:
    a handle must verify both ways; a DID needs its document, whatever its handle's state;
    the document must name a PDS."""
    status, error = identity.status, identity.error or str(identity.status)
    if status is Status.INVALID_INPUT:  # what a daemon said of input this side let pass
        raise InvalidIdentifier(error, (cited(error) or ["O-FLOW-1"])[0])
    failed = Outcome.FAILED in (identity.did_doc.outcome, identity.plc_log.outcome)
    if failed if kind == "did" else status is Status.UNAVAILABLE:
        return dataclasses.replace(found, outcome="unavailable", reason=error)
    if (kind == "handle" and not identity.verified) or identity.servable_document is None:
        return dataclasses.replace(found, outcome="not_verified", reason=error)
    if identity.pds is None:
        why = "the DID document names no PDS: no resource server to ask"
        return dataclasses.replace(found, rule="O-FLOW-2", reason=why)
    return None


async def _fetch(web: Getter, url: str, rule: str, config: Config) -> tuple[dict[str, Any], int]:
    """O-FETCH-1, O-FETCH-2: one document, GET, 200 only, no redirect followed; the answer
    and its size. A transient failure raises a `ResolutionError`; anything else that is
    not the document, `OAuthRefused` (the document's own rule for a status other than 200)."""
    try:
        answer = await web.get(
            url, max_bytes=MAX_DOCUMENT, timeout=config.https_timeout, accept="application/json"
        )
    except NotFound as err:  # the host name does not exist: no server there
        raise OAuthRefused(f"{err}", "O-FETCH-1") from None
    except InvalidData as err:  # the guard's address, a redirect, plain http, over the cap
        raise OAuthRefused(f"{err}", "O-FETCH-1") from None
    if answer.status in _TRANSIENT:
        raise UpstreamFailure(f"{url[:120]}: HTTP {answer.status}")
    if 300 <= answer.status < 400:
        why = f"{url[:120]}: HTTP {answer.status}, a redirect (not followed)"
        raise OAuthRefused(why, "O-FETCH-1")
    if answer.status != 200:
        raise OAuthRefused(f"{url[:120]}: HTTP {answer.status}, not the document", rule)
    return read_document(answer.body, answer.content_type, url), len(answer.body)


async def check_token(
    response: Any,
    *,
    issuer: str,
    did: str | None,
    discover_fresh: Callable[[str], Awaitable[OAuthServer]],
    dev: bool,
) -> TokenCheck:
    """O-TOK-1..5: `response` (the token endpoint's JSON, as text or decoded) of a session
    whose authorization server is `issuer`, started from the account `did` (None: from a
    server); `discover_fresh` finds an account's server afresh. Raises `InvalidInput` for
    an issuer or DID that is not one."""
    try:
        issuer = check_issuer(issuer, dev=dev)
    except OAuthRefused as err:
        raise InvalidIdentifier(err.message, "O-ISS-1") from None
    if did is not None and not is_valid_did(did):
        raise InvalidDid(f"{did[:80]!r} is not a DID", "D-SYN-1")
    check = TokenCheck("ok", issuer, did=did)
    try:
        sub, scope = read_token_response(response)
    except OAuthRefused as err:
        return check.refused(err.rule, err.message)
    check = dataclasses.replace(check, sub=sub, scope=scope)
    if did is not None and sub != did:
        return check.refused("O-TOK-4", f"sub is {sub}, not {did}, whom the flow started from")
    try:
        server = await discover_fresh(sub)
    except InvalidInput as err:
        return check.refused("O-TOK-2", f"sub {sub} cannot be resolved: {err}")
    check = dataclasses.replace(check, server=server)
    if server.outcome == "unavailable":
        return dataclasses.replace(check, outcome="unavailable", reason=server.reason)
    if not server.ok:
        said = f"{server.reason} [{server.rule}]" if server.rule else server.reason
        return check.refused("O-TOK-5", f"sub {sub} leads to no authorization server: {said}")
    if server.issuer != issuer:
        why = f"sub {sub}'s authorization server is {server.issuer}, not the session's {issuer}"
        return check.refused("O-TOK-5", why)
    return check
