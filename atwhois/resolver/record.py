"""A record verified at its repository's PDS (R-REC-*): the at:// URI checked, the identity
resolved and verified through a `Directory` (kept in a cache, or resolved now), the
record's proof asked of the PDS the DID document names (`com.atproto.sync.getRecord`)
through the guarded fetcher, with a deadline and a size cap, read by `resolver.record_proof`
and its commit checked under the document's `#atproto` key.

Five outcomes, never mixed: `verified` (the record, its CID, the commit that proves it);
`invalid` (an answer or an identity that breaks the rule named); `absent` (proven by the
signed tree, or only said by the PDS: `proven` tells which); `inactive` (the account is
deactivated, taken down or suspended); `unavailable` (transient: asked again later, it may
verify). A verdict that a document changed since it was kept could change (the signature
refused, the PDS not holding the account) gets one fresh resolution of the identity (R-REC-8),
which also finds an account that moved to another PDS; how often one is asked for is the
caller's (`refresh`: `auth.records` holds it to one a DID every few seconds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from atwhois.resolver import drisl
from atwhois.resolver.commit import InvalidCommit, signed_by
from atwhois.resolver.directory import Directory
from atwhois.resolver.errors import (
    InvalidData,
    InvalidIdentifier,
    NotFound,
    ResolutionError,
    ResponseTooLarge,
)
from atwhois.resolver.identity import Identity
from atwhois.resolver.outcome import Outcome, Status
from atwhois.resolver.record_proof import (
    MAX_CAR,
    RecordVerification,
    claimed_cid,
    read_proof,
    record_uri,
)
from atwhois.resolver.response import Getter
from atwhois.resolver.rules import cited
from atwhois.resolver.syntax import AtUri
from atwhois.resolver.untrusted import parse_json

_TRANSIENT = {408, 425, 429, 500, 502, 503, 504}
_INACTIVE = {"RepoDeactivated": "deactivated", "RepoTakendown": "takendown"}
_INACTIVE["RepoSuspended"] = "suspended"
_NOT_THERE = {"RepoNotFound": "the PDS does not host the repository"}
_NOT_THERE["RecordNotFound"] = "the PDS says the record is not there, with no proof"
# What a document changed since it was kept may change (R-REC-8): the key that signs, the
# PDS that hosts (a migration leaves the old one without the account, or holding it
# deactivated).
_REFRESHED_FOR = {"R-COMMIT-4", "RepoNotFound", "RepoDeactivated"}

# R-REC-8's refresh: the DID's identity resolved afresh, given the DID and the identity kept
# for it (None: not now, it was lately)
Refresh = Callable[[str, Identity], Awaitable[Identity | None]]


async def verify_record(
    directory: Directory,
    web: Getter,
    uri: str,
    *,
    cid: str | None = None,
    record: bytes | None = None,
    timeout: float,
    refresh: Refresh | None = None,
) -> RecordVerification:
    """The record `uri` names, verified at its PDS; `cid` or `record` (its DRISL bytes or its
    JSON) is what the caller holds, and the answer says whether it is the record proven;
    `refresh` resolves a kept identity's DID afresh (R-REC-8; by default `directory.refresh`,
    each time). Raises `InvalidInput` (a URI or a claim that is not one) before anything is
    asked."""
    target = record_uri(uri)
    claimed = claimed_cid(cid, record)
    identity = await directory.lookup(target.authority)
    verdict, why = await _verify(web, uri, target, identity, claimed, timeout)
    kept = identity.cache is not None and identity.cache.cached
    if not (kept and why in _REFRESHED_FOR) or identity.did is None:
        return verdict
    # by its DID, whatever the URI names it by: what may have changed is the DID's document
    if refresh is None:
        fresh: Identity | None = await directory.refresh(identity.did)
    else:
        fresh = await refresh(identity.did, identity)
    if fresh is None:  # resolved lately: the verdict stands, as it would a moment later
        return verdict
    if (fresh.status, fresh.pds, fresh.signing_key) != (
        identity.status,
        identity.pds,
        identity.signing_key,
    ):
        verdict, _ = await _verify(web, uri, target, fresh, claimed, timeout)
    return dataclasses.replace(verdict, refreshed=True)


async def _verify(
    web: Getter,
    uri: str,
    target: AtUri,
    identity: Identity,
    claimed: str | None,
    timeout: float,
) -> tuple[RecordVerification, str | None]:
    """The verdict under `identity`, and what decided it when a refresh could change it."""
    if identity.status is Status.INVALID_INPUT:  # an authority no lookup takes (did:key, …)
        error = identity.error or "the URI's authority is not one atwhois resolves"
        rule = (cited(error) or ["R-REC-1"])[0]
        raise InvalidIdentifier(error.removesuffix(f" [{rule}]"), rule)
    verdict = RecordVerification(
        "invalid",
        uri,
        did=identity.did,
        collection=target.collection,
        rkey=target.rkey,
        pds=identity.pds,
        claimed=claimed,
    )
    refused = _identity_refused(verdict, target, identity)
    if refused is not None:
        return refused, None
    assert identity.did is not None and identity.pds is not None
    url = identity.pds.rstrip("/") + "/xrpc/com.atproto.sync.getRecord?"
    url += urlencode({"did": identity.did, "collection": target.collection, "rkey": target.rkey})
    try:
        answer = await web.get(
            url, max_bytes=MAX_CAR, timeout=timeout, accept="application/vnd.ipld.car"
        )
    except ResponseTooLarge as err:
        return _invalid(verdict, "R-REC-3", f"{err} (at most {MAX_CAR} bytes)"), None
    except NotFound as err:  # the PDS's host name does not exist: nothing hosts it there
        return _absent(verdict, f"{err}"), "RepoNotFound"
    except InvalidData as err:
        return _invalid(verdict, (cited(str(err)) or ["R-REC-2"])[0], str(err)), None
    except ResolutionError as err:
        return dataclasses.replace(verdict, outcome="unavailable", reason=str(err)), None
    if answer.status != 200:
        return _refusal(verdict, answer.status, answer.body)
    try:
        proof = read_proof(answer.body, identity.did, str(target.collection), str(target.rkey))
    except InvalidCommit as err:
        return _invalid(verdict, err.rule, str(err)), None
    verdict = dataclasses.replace(verdict, commit=proof.commit.cid, rev=proof.commit.rev)
    key = identity.signing_key
    if key is None or signed_by(proof.commit, (key,)) is None:
        declared = key or "no #atproto key"
        why = f"the commit is not signed by the document's key ({declared}) [R-COMMIT-4]"
        return _invalid(verdict, "R-COMMIT-4", why), "R-COMMIT-4"
    if proof.cid is None:
        why = "the signed tree shows the key is not there"
        return dataclasses.replace(_absent(verdict, why), proven=True, key=key), None
    value = drisl.to_json(proof.value)
    verified = dataclasses.replace(verdict, outcome="verified", proven=True, key=key)
    return dataclasses.replace(verified, cid=proof.cid, value=value), None


def _identity_refused(
    verdict: RecordVerification, target: AtUri, identity: Identity
) -> RecordVerification | None:
    """R-REC-1: the verdict the identity settles before the PDS is asked, if it does: a
    handle must verify both ways; a DID needs its document (its handle's state aside), and
    the document must name a PDS."""
    by_did = target.authority.startswith("did:")
    status, error = identity.status, identity.error or str(identity.status)
    if status is Status.DID_NOT_FOUND or (status is Status.HANDLE_NOT_FOUND and not by_did):
        return _absent(verdict, f"no account: {error}")
    if status is Status.DID_DEACTIVATED:
        return dataclasses.replace(verdict, outcome="inactive", status="deactivated", reason=error)
    # a DID's record needs its document, whatever its handle's state (that failing now too)
    steps = (identity.did_doc.outcome, identity.plc_log.outcome) if by_did else ()
    if Outcome.FAILED in steps or (not by_did and status is Status.UNAVAILABLE):
        return dataclasses.replace(verdict, outcome="unavailable", reason=error)
    if (not by_did and not identity.verified) or identity.servable_document is None:
        return _invalid(verdict, "R-REC-1", f"the identity does not verify ({status}): {error}")
    if identity.pds is None or identity.did is None:
        return _absent(verdict, "the DID document names no PDS: nothing hosts the repository")
    return None


def _refusal(
    verdict: RecordVerification, status: int, body: bytes
) -> tuple[RecordVerification, str | None]:
    """R-REC-2: what a PDS's answer other than a proof says."""
    try:
        error = parse_json(body).get("error")
    except (ValueError, AttributeError):
        error = None
    said = f"HTTP {status}" + (f", {error}" if isinstance(error, str) else "")
    if status in _TRANSIENT:
        return dataclasses.replace(verdict, outcome="unavailable", reason=said), None
    if error in _INACTIVE:
        account = _INACTIVE[error]
        inactive = dataclasses.replace(verdict, outcome="inactive", status=account, reason=said)
        return inactive, error
    if error in _NOT_THERE:
        return _absent(verdict, f"{_NOT_THERE[error]} ({said})"), error
    return _invalid(verdict, "R-REC-2", f"{said}: neither a proof nor an error it names"), None


def _invalid(verdict: RecordVerification, rule: str, reason: str) -> RecordVerification:
    return dataclasses.replace(verdict, outcome="invalid", rule=rule, reason=reason)


def _absent(verdict: RecordVerification, reason: str) -> RecordVerification:
    return dataclasses.replace(verdict, outcome="absent", reason=reason)
