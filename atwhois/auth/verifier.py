"""A token checked against its issuer's identity (docs/spec.md: SA-*). The rules are
`resolver.service_auth`'s (pure); here the issuer's document comes through a directory
(kept, or resolved now; its handle never resolved: a token's verdict rests on the document
and its key alone, SA-ISS-2), a signature refused under a kept document gets one refresh of
it (SA-SIG-2: shared by concurrent ones, and none for a document resolved within
`refresh_every` seconds, so a refused token costs the directory one request at most), and a
nonce may be remembered in the cache store (SA-JTI-2), which several daemons share.

Three outcomes, never mixed: `valid`; `invalid` with the rule it broke; `unavailable` when
the issuer's identity (or the nonce store) could not be asked now. A token is judged
before its issuer is looked up, so malformed, expired or misaddressed tokens cost the
directory nothing.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import hashlib
import heapq
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

from atwhois.cache.stores import MemoryStore, Store, StoreUnavailable
from atwhois.foundation.lru import Lru
from atwhois.foundation.pace import SERVICE_AUTH, charged_to
from atwhois.resolver.directory import Directory
from atwhois.resolver.identity import Identity
from atwhois.resolver.outcome import Status
from atwhois.resolver.remote import Client
from atwhois.resolver.service_auth import (
    Expected,
    Outcome,
    Token,
    TokenRefused,
    Verification,
    check_claims,
    check_signature,
    issuer_key,
    parse_token,
)

__all__ = ["Expected", "ServiceAuthVerifier", "Verification", "verify_token"]

REFRESH_EVERY = 5.0  # seconds: at most one resolution of a DID's document for refused tokens
REFRESHED_KEPT = 1 << 20  # bytes for the DIDs' last refreshes (~100 bytes each)
PARSED_KEPT = 1024  # issuers' documents held decoded (a few KiB each)
NONCE_PREFIX = "jti:"  # the cache store's keys of the nonces seen (SA-JTI-2)
MAX_NONCES = 100_000  # nonces one verifier holds at once (each until its token expires)
NONCE_BYTES = 200  # a nonce's entry in a memory store, about (its key and slot)
# What a refresh may change in a refused verification: the key rotated, or a key id added.
_FIXED_BY_A_REFRESH = frozenset({"SA-SIG-1", "SA-KID-2", "SA-ALG-2", "C-SIG-2"})
# An issuer in these states refuses its tokens (SA-ISS-2); UNAVAILABLE is not a verdict.
_REFUSING = {
    Status.DID_NOT_FOUND: "the issuer's DID does not exist",
    Status.DID_DEACTIVATED: "the issuer is not active",
    Status.INVALID_DOCUMENT: "the issuer's DID document is invalid",
    Status.PLC_LOG_INVALID: "the issuer's operation log does not prove its document",
    Status.INVALID_INPUT: "the issuer is not a DID atwhois resolves",
}


class ServiceAuthVerifier:
    """Verifies tokens against issuers looked up in `directory`. The nonces seen (the replay
    check) are kept in `nonces`, a store other daemons share (Redis, a SQLite file), or
    else in memory here; at most `max_nonces` at once from this verifier: past that, a
    replay cannot be ruled out and the check says so (`unavailable`), rather than forget
    one early or grow without bound."""

    def __init__(
        self,
        directory: Directory,
        *,
        nonces: Store | None = None,
        max_nonces: int = MAX_NONCES,
        clock: Callable[[], float] = time.time,
        refresh_every: float = REFRESH_EVERY,
    ) -> None:
        self.directory = directory
        # Its own store is sized to hold every nonce the bound allows: none is evicted early.
        self.nonces = nonces or MemoryStore(max_nonces * NONCE_BYTES, clock=clock)
        self.max_nonces = max_nonces
        self._held: list[float] = []  # when the nonces this verifier added expire (a heap)
        self.clock, self.refresh_every = clock, refresh_every
        self._refreshed: Lru[str, float] = Lru(REFRESHED_KEPT, lambda did, _: 60 + len(did))
        self._refreshing: dict[str, asyncio.Task[Identity]] = {}
        self.outcomes: Counter[tuple[str, str]] = Counter()  # (outcome, rule or "")
        self.refreshes = 0  # forced re-resolutions of an issuer (SA-SIG-2)
        self.replays = 0  # tokens refused as seen before (SA-JTI-2)

    async def verify(self, text: str, expected: Expected, *, replay: bool = False) -> Verification:
        """The outcome for `text` as `expected` receives it; `replay`: refuse a nonce seen
        before from the same issuer within its token's lifetime (SA-JTI-2)."""
        # Whoever sent it, what a token makes atwhois ask upstream (its issuer's resolution,
        # before it is known refused; SA-SIG-2's refresh) keeps to its share (POL-BUDGET-1).
        with charged_to(SERVICE_AUTH):
            verification = await self._verify(text, expected, replay)
        self.outcomes[verification.outcome, verification.rule or ""] += 1
        return verification

    async def _verify(self, text: str, expected: Expected, replay: bool) -> Verification:
        try:
            token = parse_token(text)
            check_claims(token, expected, self.clock())
        except TokenRefused as err:
            return Verification("invalid", err.rule, err.reason)
        identity = await self._resolve_issuer(token.issuer, fresh=False)
        verification = _judged(token, identity, refreshed=False)
        if (
            verification.outcome == "invalid"
            and verification.rule in _FIXED_BY_A_REFRESH
            and _kept(identity)
        ):
            fresh = await self._refresh(token.issuer, identity)
            if fresh is not None:
                verification = _judged(token, fresh, refreshed=True)
        if verification.valid and replay:
            return await self._first_use(token, expected, verification)
        return verification

    async def _resolve_issuer(self, did: str, *, fresh: bool) -> Identity:
        """The one place a token has its issuer resolved (its document alone, SA-ISS-2;
        `fresh` for SA-SIG-2's refresh): what a budget of the resolutions tokens cause
        would wrap."""
        return await self.directory.document(did, fresh=fresh)

    async def _refresh(self, did: str, used: Identity) -> Identity | None:
        """The issuer resolved afresh: once for every caller asking at the same time, and
        not within `refresh_every` seconds of the last resolution of its document, this
        one's included (None: resolved lately, nothing new to ask)."""
        task = self._refreshing.get(did)
        if task is None:
            now = self.clock()
            last = max(self._refreshed.get(did) or 0.0, _resolved_at(used))
            if now - last < self.refresh_every:
                return None
            self._refreshed.put(did, now)
            self.refreshes += 1
            resolving = self._resolve_issuer(did, fresh=True)
            task = self._refreshing[did] = asyncio.ensure_future(resolving)
            task.add_done_callback(lambda _: self._refreshing.pop(did, None))
        # one caller giving up does not cancel the refresh the others wait for
        return await asyncio.shield(task)

    async def _first_use(
        self, token: Token, expected: Expected, verification: Verification
    ) -> Verification:
        now = self.clock()
        while self._held and self._held[0] <= now:
            heapq.heappop(self._held)
        if len(self._held) >= self.max_nonces:
            full = (
                f"{self.max_nonces} nonces held (service_auth_nonces): a replay cannot be ruled out"
            )
            return _about(token, "unavailable", None, full)
        digest = hashlib.sha256(token.nonce.encode()).hexdigest()[:32]
        key = f"{NONCE_PREFIX}{token.issuer}:{digest}"
        try:
            until = token.expires_at + expected.skew
            first = await self.nonces.add(key, b"", until)
        except (StoreUnavailable, OSError) as err:
            return _about(token, "unavailable", None, f"the nonces seen could not be asked: {err}")
        if first:
            heapq.heappush(self._held, until)
            return verification
        self.replays += 1
        return _about(token, "invalid", "SA-JTI-2", "this jti was seen before from this issuer")

    def metrics(self) -> Iterator[Metric]:
        verified = CounterMetricFamily(
            "atwhois_service_auth_verifications",
            "Inter-service auth tokens verified, by outcome and the rule that refused them.",
            labels=["outcome", "rule"],
        )
        for (outcome, rule), count in sorted(self.outcomes.items()):
            verified.add_metric([outcome, rule], count)
        yield verified
        yield CounterMetricFamily(
            "atwhois_service_auth_refreshes",
            "Issuers resolved afresh because a signature failed under a kept document.",
            value=self.refreshes,
        )
        yield CounterMetricFamily(
            "atwhois_service_auth_replays",
            "Tokens refused because their jti was seen before from the same issuer.",
            value=self.replays,
        )


def _kept(identity: Identity) -> bool:
    """Whether the document came from a cache (SA-SIG-2 refreshes a kept one only: one
    resolved for this token is as fresh as a refresh would make it)."""
    return identity.cache is not None and identity.cache.cached


@functools.lru_cache(maxsize=PARSED_KEPT)
def _parsed(document: bytes) -> Any:
    """An issuer's document decoded once while it is the one kept: every token of the
    issuer is checked against the same bytes (read only, never changed)."""
    return json.loads(document)


def _judged(token: Token, identity: Identity, *, refreshed: bool) -> Verification:
    """The token under the document of `identity` (SA-ISS-2, SA-KID-2, SA-ALG-2, SA-SIG-1)."""
    judged = replace(
        _about(token, "valid"),
        document_checked_at=identity.checked_at or None,
        refreshed=refreshed,
    )
    judged = replace(judged, declared_handle=identity.declared_handle)
    if identity.status is Status.UNAVAILABLE:
        reason = f"the issuer's identity could not be resolved: {identity.error}"
        return replace(judged, outcome="unavailable", reason=reason)
    refusing = _REFUSING.get(identity.status)
    if refusing is not None:
        reason = f"{refusing} ({identity.status}): {identity.error}"
        return replace(judged, outcome="invalid", rule="SA-ISS-2", reason=reason)
    document = identity.servable_document
    if document is None:
        reason = f"the issuer's DID document did not resolve ({identity.status})"
        return replace(judged, outcome="invalid", rule="SA-ISS-2", reason=reason)
    try:
        check_signature(token, issuer_key(token, _parsed(document)))
    except TokenRefused as err:
        return replace(judged, outcome="invalid", rule=err.rule, reason=err.reason)
    return judged


def _resolved_at(identity: Identity) -> float:
    """When the document `identity` rests on was resolved (0: unknown)."""
    try:
        return datetime.datetime.fromisoformat(identity.checked_at).timestamp()
    except ValueError:
        return 0.0


def _about(
    token: Token, outcome: Outcome, rule: str | None = None, reason: str = ""
) -> Verification:
    """A verification of `token`, saying what it claims."""
    return Verification(
        outcome,
        rule,
        reason or None,
        issuer=token.issuer,
        key_id=token.key_id,
        method=token.method,
        expires_at=token.expires_at,
    )


async def verify_token(
    token: str, expected: Expected, directory: Directory, *, replay: bool = False
) -> Verification:
    """One token checked through `directory`: a running daemon (`Client`) verifies it
    there, with the nonces its store keeps; any other directory here, by a verifier made
    for this token (a service checking many keeps one `ServiceAuthVerifier`)."""
    if isinstance(directory, Client):
        return await directory.verify_service_auth(token, expected, replay=replay)
    verification = await ServiceAuthVerifier(directory).verify(token, expected)
    if replay and verification.valid:  # a verifier of one token has seen no other
        why = "a replay check needs a verifier that outlives one token, or a daemon"
        return replace(verification, outcome="unavailable", reason=why)
    return verification
