"""Labels checked against their labeler's identity (docs/spec.md: L-*). The rules are
`resolver.label`'s (pure); here the labeler's DID document comes through a directory (kept,
or resolved now; its handle never resolved, L-KEY-2), a label refused under a kept document
gets one fresh resolution of it (L-KEY-3: `refresh`, SA-SIG-2's rule, so a
flood of bad labels for one labeler costs its directory one request), and labels verified
together ask each labeler's document once for all of its labels.

Three outcomes, never mixed: `verified` (in force, or not: negated, expired), `invalid` with
the rule it broke, `unavailable` when the labeler's identity cannot be resolved now. A
label is read before its labeler is looked up, so a malformed one costs the directory
nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from atwhois.foundation.pace import SERVICE_AUTH, charged_to
from atwhois.resolver.directory import Directory
from atwhois.resolver.identity import Identity
from atwhois.resolver.label import (
    KEY_ID,
    Label,
    LabelRefused,
    LabelVerification,
    about,
    check_signature,
    label_key,
    read,
)
from atwhois.resolver.outcome import Status
from atwhois.resolver.remote import Client
from atwhois.resolver.signer import document_key, refusal

from .refresh import REFRESH_EVERY, Refresher, kept

if TYPE_CHECKING:
    from prometheus_client.core import Metric

__all__ = ["LabelVerifier", "verify_labels"]

LABELERS_AT_ONCE = 16  # labelers' documents asked at once for one batch
# What a refresh may change in a refused label: the key rotated, or a key added.
_FIXED_BY_A_REFRESH = frozenset({"L-SIG-3", "L-KEY-1"})


class LabelVerifier:
    """Verifies labels against their labelers, looked up in `directory` (a cache's kept
    documents are refreshed once for a label they refuse: at most one a labeler within
    `refresh_every` seconds). A service verifying a stream of labels keeps one."""

    def __init__(
        self,
        directory: Directory,
        *,
        refresh_every: float = REFRESH_EVERY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self.clock = clock
        self._refresher = Refresher(
            lambda did: self.directory.document(did, fresh=True), every=refresh_every, clock=clock
        )
        self.outcomes: Counter[tuple[str, str]] = Counter()  # (outcome, rule or "")

    @property
    def refreshes(self) -> int:
        """Labelers resolved afresh because a label failed under a kept document (L-KEY-3)."""
        return self._refresher.count

    async def verify(self, label: Any) -> LabelVerification:
        """One label's verdict: `label` as JSON text, DRISL bytes, or an object of the
        lexicon's JSON form or of DRISL's (as `stream.decode_labels` gives a frame's)."""
        return (await self.verify_many([label]))[0]

    async def verify_many(self, labels: Sequence[Any]) -> list[LabelVerification]:
        """Each label's verdict, in order; each labeler's document asked once for all."""
        # Whoever sent them, what labels make atwhois ask upstream keeps to the share the
        # verification of signed data has (POL-BUDGET-1, L-KEY-2).
        with charged_to(SERVICE_AUTH):
            verdicts = await self._verify(labels)
        for verdict in verdicts:
            self.outcomes[verdict.outcome, verdict.rule or ""] += 1
        return verdicts

    async def _verify(self, labels: Sequence[Any]) -> list[LabelVerification]:
        now = self.clock()
        verdicts: list[LabelVerification | None] = []
        by_labeler: dict[str, list[tuple[int, Label]]] = {}
        for index, item in enumerate(labels):
            try:
                label = read(item)
            except LabelRefused as err:
                verdicts.append(LabelVerification("invalid", err.rule, err.reason))
                continue
            verdicts.append(None)
            by_labeler.setdefault(label.src, []).append((index, label))
        gate = asyncio.Semaphore(LABELERS_AT_ONCE)

        async def judge(did: str, held: list[tuple[int, Label]]) -> None:
            async with gate:
                identity = await self.directory.document(did)
            judged = [_judged(label, identity, now) for _, label in held]
            if kept(identity) and any(
                v.outcome == "invalid" and v.rule in _FIXED_BY_A_REFRESH for v in judged
            ):
                fresh = await self._refresher.refresh(did, identity)
                if fresh is not None:  # the document as it is now decides them all
                    judged = [_judged(label, fresh, now, refreshed=True) for _, label in held]
            for (index, _), verdict in zip(held, judged, strict=True):
                verdicts[index] = verdict

        if len(by_labeler) == 1:  # most often: no task to make
            await judge(*next(iter(by_labeler.items())))
        else:
            await asyncio.gather(*(judge(did, held) for did, held in by_labeler.items()))
        return [verdict for verdict in verdicts if verdict is not None]

    def metrics(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily

        verified = CounterMetricFamily(
            "atwhois_label_verifications",
            "Labels verified, by outcome and the rule that refused them.",
            labels=["outcome", "rule"],
        )
        for (outcome, rule), count in sorted(self.outcomes.items()):
            verified.add_metric([outcome, rule], count)
        yield verified
        yield CounterMetricFamily(
            "atwhois_label_refreshes",
            "Labelers resolved afresh because a label failed under a kept document.",
            value=self.refreshes,
        )


def _judged(
    label: Label, identity: Identity, now: float, *, refreshed: bool = False
) -> LabelVerification:
    """`label` under the labeler's document of `identity` (L-KEY-1..2, L-SIG-2..3)."""
    document = {"document_checked_at": identity.checked_at or None, "refreshed": refreshed}
    if identity.status is Status.UNAVAILABLE:
        reason = f"the labeler's identity could not be resolved: {identity.error}"
        return about(label, "unavailable", now, reason=reason, **document)
    refused = refusal(identity, "the labeler")
    served = identity.servable_document
    if refused is not None or served is None:
        return about(label, "invalid", now, rule="L-KEY-2", reason=refused, **document)
    try:
        key = label_key(document_key(served, label.src, KEY_ID))
        check_signature(label, key)
    except LabelRefused as err:
        return about(label, "invalid", now, rule=err.rule, reason=err.reason, **document)
    return about(label, "verified", now, key=key.did_key, **document)


async def verify_labels(directory: Directory, labels: Sequence[Any]) -> list[LabelVerification]:
    """Labels checked through `directory`: a running daemon (`Client`) verifies them there,
    with the documents it keeps; any other directory here, by a verifier made for them (a
    service checking a stream of labels keeps one `LabelVerifier`)."""
    if isinstance(directory, Client):
        return await directory.verify_labels(labels)
    return await LabelVerifier(directory).verify_many(labels)
