"""A token checked against its issuer's identity (docs/spec.md: SA-*). The rules are
`resolver.service_auth`'s (pure); here the issuer's document comes through a directory
(kept, or resolved now; its handle never resolved: a token's verdict rests on the document
and its key alone, SA-ISS-2), a signature refused under a kept document gets one refresh of
it (SA-SIG-2: shared by concurrent ones, and none for a document resolved within
`refresh_every` seconds, so a refused token costs the directory one request at most: the
rule every verifier of signed data shares, `refresh`), and a nonce may be remembered
(SA-JTI-2) in a store several daemons share, within a bound for this process and a share
of it per issuer (`nonces`).

Three outcomes, never mixed: `valid`; `invalid` with the rule it broke; `unavailable` when
the issuer's identity (or the nonce store) could not be asked now, or a replay cannot be
ruled out. A token is judged before its issuer is looked up, so malformed, expired or
misaddressed tokens cost the directory nothing.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from atwhois.cache.stores import MemoryNonces, NonceStore, NoncesUnavailable
from atwhois.foundation import defaults
from atwhois.foundation.errors import AtwhoisError
from atwhois.foundation.pace import SERVICE_AUTH, charged_to
from atwhois.resolver.directory import Directory
from atwhois.resolver.identity import Identity
from atwhois.resolver.outcome import Status
from atwhois.resolver.remote import Client
from atwhois.resolver.service_auth import (
    MAX_LIFETIME,
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
from atwhois.resolver.signer import parsed_document, refusal

from .nonces import Held, Pressing, share_of
from .refresh import REFRESH_EVERY, Refresher, kept

if TYPE_CHECKING:
    from prometheus_client.core import Metric

__all__ = ["REFRESH_EVERY", "Expected", "ServiceAuthVerifier", "Verification", "verify_token"]

PRESSING_SHOWN = 10  # issuers named in the metrics as pressing on their share
# What a refresh may change in a refused verification: the key rotated, or a key id added.
_FIXED_BY_A_REFRESH = frozenset({"SA-SIG-1", "SA-KID-2", "SA-ALG-2", "C-SIG-2"})


class ServiceAuthVerifier:
    """Verifies tokens against issuers looked up in `directory`. The nonces seen (the replay
    check) are kept in `nonces`: a store other daemons share (`Store.nonces()` of a Redis
    or SQLite cache), or else this process's memory, which the verdicts then say
    (`replay: process`). At most `max_nonces` at once from this verifier, of which one
    issuer (`nonces.share_of`) holds at most `issuer_nonces`: past either, a replay cannot
    be ruled out and the check says so (`unavailable`), rather than forget a nonce early or
    grow without bound. With the check on, a token may live at most `replay_lifetime`
    seconds (SA-JTI-3): how long a nonce is kept."""

    def __init__(
        self,
        directory: Directory,
        *,
        nonces: NonceStore | None = None,
        max_nonces: int = defaults.SERVICE_AUTH_NONCES,
        issuer_nonces: int = defaults.SERVICE_AUTH_ISSUER_NONCES,
        replay_lifetime: int = MAX_LIFETIME,
        clock: Callable[[], float] = time.time,
        refresh_every: float = REFRESH_EVERY,
    ) -> None:
        self.directory = directory
        self.nonces = MemoryNonces() if nonces is None else nonces
        self.held = Held(max_nonces, issuer_nonces)
        self.replay_lifetime = replay_lifetime
        self.clock, self.refresh_every = clock, refresh_every
        # SA-SIG-2's refreshes: shared by concurrent callers, one a DID every refresh_every
        self._refresher = Refresher(
            lambda did: self._resolve_issuer(did, fresh=True), every=refresh_every, clock=clock
        )
        self.outcomes: Counter[tuple[str, str]] = Counter()  # (outcome, rule or "")
        self.replays = 0  # tokens refused as seen before (SA-JTI-2)
        self.unruled: Counter[str] = Counter()  # replays not ruled out: "issuer" or "bound"
        self.pressing = Pressing()  # the issuers whose share was full

    async def verify(self, text: str, expected: Expected, *, replay: bool = False) -> Verification:
        """The outcome for `text` as `expected` receives it; `replay`: refuse a nonce seen
        before from the same issuer within its token's lifetime (SA-JTI-2)."""
        # Whoever sent it, what a token makes atwhois ask upstream (its issuer's resolution,
        # before it is known refused; SA-SIG-2's refresh) keeps to its share (POL-BUDGET-1).
        with charged_to(SERVICE_AUTH):
            verification = await self._verify(text, expected, replay)
        if replay:
            verification = replace(
                verification, replay="shared" if self.nonces.shared else "process"
            )
        self.outcomes[verification.outcome, verification.rule or ""] += 1
        return verification

    async def _verify(self, text: str, expected: Expected, replay: bool) -> Verification:
        try:
            token = parse_token(text)
            check_claims(token, expected, self.clock())
        except TokenRefused as err:
            return Verification("invalid", err.rule, err.reason)
        lifetime = token.expires_at - token.issued_at
        if replay and lifetime > self.replay_lifetime:
            why = f"a lifetime of {lifetime} s; the replay check keeps {self.replay_lifetime} s"
            return _about(token, "invalid", "SA-JTI-3", why)
        identity = await self._resolve_issuer(token.issuer, fresh=False)
        verification = _judged(token, identity, refreshed=False)
        if (
            verification.outcome == "invalid"
            and verification.rule in _FIXED_BY_A_REFRESH
            and kept(identity)
        ):
            fresh = await self._refresher.refresh(token.issuer, identity)
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

    @property
    def refreshes(self) -> int:
        """Forced re-resolutions of an issuer (SA-SIG-2)."""
        return self._refresher.count

    async def _first_use(
        self, token: Token, expected: Expected, verification: Verification
    ) -> Verification:
        now, share = self.clock(), share_of(token.issuer)
        until = token.expires_at + expected.skew
        nonce = hashlib.sha256(f"{token.issuer}\n{token.nonce}".encode()).hexdigest()[:32]
        # Past a bound the store is still asked, to record nothing (a limit of 0): a replay
        # is refused as one whatever is full.
        taken = self.held.take(share, now)
        claimed = None
        try:
            limit = self.held.share_limit if taken == "taken" else 0
            claimed = await self.nonces.claim(share, nonce, until, limit, now)
        except NoncesUnavailable as err:
            return _about(token, "unavailable", None, f"the nonces seen could not be asked: {err}")
        finally:
            if taken == "taken":
                self.held.settle(share, until if claimed == "first" else None)
        if claimed == "first":
            return verification
        if claimed == "seen":
            self.replays += 1
            return _about(token, "invalid", "SA-JTI-2", "this jti was seen before from this issuer")
        if taken == "bound":
            self.unruled["bound"] += 1
            held = f"{self.held.limit} nonces held (service_auth_nonces)"
            return _about(token, "unavailable", None, f"{held}: a replay cannot be ruled out")
        self.unruled["issuer"] += 1  # its share is full, here or in the store
        self.pressing.note(share)
        full = f"{share} holds its share, {self.held.share_limit} nonces"
        why = f"{full} (service_auth_issuer_nonces): a replay cannot be ruled out"
        return _about(token, "unavailable", None, why)

    def metrics(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

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
        unruled = CounterMetricFamily(
            "atwhois_service_auth_replays_not_ruled_out",
            "Valid tokens answered unavailable because the replay check was full: the "
            "issuer's share of the nonces, or this process's bound.",
            labels=["full"],
        )
        for full in ("issuer", "bound"):
            unruled.add_metric([full], self.unruled[full])
        yield unruled
        yield GaugeMetricFamily(
            "atwhois_service_auth_nonces_held",
            "Nonces this process holds for the replay check (each until its token expires).",
            value=len(self.held),
        )
        yield GaugeMetricFamily(
            "atwhois_service_auth_nonces_limit",
            "The most nonces this process holds at once (service_auth_nonces).",
            value=self.held.limit,
        )
        pressing = GaugeMetricFamily(
            "atwhois_service_auth_issuers_at_share",
            f"Tokens answered unavailable because their issuer's share of the nonces was "
            f"full, for the {PRESSING_SHOWN} issuers (did:plc, or did:web domain) with most.",
            labels=["issuer"],
        )
        for share, count in self.pressing.top(PRESSING_SHOWN):
            pressing.add_metric([share], count)
        yield pressing


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
    refused = refusal(identity, "the issuer")
    document = identity.servable_document
    if refused is not None or document is None:
        return replace(judged, outcome="invalid", rule="SA-ISS-2", reason=refused)
    try:
        check_signature(token, issuer_key(token, parsed_document(document)))
    except TokenRefused as err:
        return replace(judged, outcome="invalid", rule=err.rule, reason=err.reason)
    return judged


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
    for this token (a service checking many keeps one `ServiceAuthVerifier`). A replay
    check needs the nonces seen before: a daemon's, or a `ServiceAuthVerifier` kept from
    token to token; asked of a verifier made for one token, it is refused
    (`ReplayNeedsAVerifier`), never answered `unavailable` without saying why."""
    if isinstance(directory, Client):
        return await directory.verify_service_auth(token, expected, replay=replay)
    if replay:
        raise ReplayNeedsAVerifier(
            "a replay check needs the nonces seen before: keep one "
            "atwhois.ServiceAuthVerifier(directory) and call its verify(token, expected, "
            "replay=True), or ask a running daemon (directory=atwhois.Client(url))"
        )
    return await ServiceAuthVerifier(directory).verify(token, expected)


class ReplayNeedsAVerifier(AtwhoisError):
    """A replay check asked of a verifier made for one token, which has seen no other."""
