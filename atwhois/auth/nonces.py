"""The replay check's bounds (SA-JTI-2): the nonces one process holds at once (`Held`), and
the share of that bound each issuer may hold (`share_of`), so that a few issuers sending
valid tokens of their own, each with a new `jti`, fill their shares and not the bound: the
other issuers' tokens stay verifiable. Which issuers press on their share is kept, within a
bound, for the metrics (`Pressing`).

Past either bound a replay cannot be ruled out, and the check says so (`unavailable`):
a nonce is never forgotten before its token expires, and a replay is never `valid`."""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Literal
from urllib.parse import unquote

PRESSING_KEPT = 1000  # shares whose refusals are counted at once (the metrics show the top)


def share_of(did: str) -> str:
    """The share of the bound an issuer draws on: its DID (did:plc, and any method but
    did:web), or for a did:web the registrable domain of its host, approximated as the
    host's last two labels (`did:web:a.b.example.com` and `did:web:example.com` share
    `did:web:example.com`): a subdomain costs nothing extra, so that no one gets a share
    per name they can make up. The approximation knows no public suffix list: the sites
    under a suffix with many owners (`github.io`, `co.uk`) share one share; it never gives
    more shares than there are domains registered."""
    if not did.startswith("did:web:"):
        return did
    host = unquote(did.removeprefix("did:web:").split(":")[0]).partition(":")[0]
    labels = [label for label in host.lower().split(".") if label]
    return "did:web:" + ".".join(labels[-2:])


class Held:
    """The nonces this process recorded or is recording, each until its token expires: at
    most `limit` at once, and at most `share_limit` of one share. A place is taken before
    the store is asked and given back when it records nothing, so that concurrent claims
    cannot pass a bound together, and one issuer's flood of claims on their way cannot
    crowd the others out of the bound (the store, which other processes share, has the
    last word on a share)."""

    def __init__(self, limit: int, share_limit: int) -> None:
        self.limit, self.share_limit = limit, min(share_limit, limit)
        self._until: list[tuple[float, str]] = []  # (expires_at, share): a heap
        self._shares: Counter[str] = Counter()  # places taken, by share
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def take(self, share: str, now: float) -> Literal["taken", "share", "bound"]:
        """A place for one more nonce of `share` at `now`, or which bound is full."""
        while self._until and self._until[0][0] <= now:
            self._give_back(heapq.heappop(self._until)[1])
        if self._shares.get(share, 0) >= self.share_limit:
            return "share"
        if self._count >= self.limit:
            return "bound"
        self._shares[share] += 1
        self._count += 1
        return "taken"

    def settle(self, share: str, until: float | None) -> None:
        """The claim that took a place for `share` recorded a nonce held `until` (None: it
        recorded nothing)."""
        if until is None:
            self._give_back(share)
        else:
            heapq.heappush(self._until, (until, share))

    def _give_back(self, share: str) -> None:
        self._count -= 1
        self._shares[share] -= 1
        if not self._shares[share]:
            del self._shares[share]


class Pressing:
    """Tokens refused because their issuer's share was full, by share: at most
    `PRESSING_KEPT` shares counted (past that the least counted half is dropped), so a
    flood of issuers cannot grow it; the metrics name the top few."""

    def __init__(self) -> None:
        self._refused: Counter[str] = Counter()

    def note(self, share: str) -> None:
        self._refused[share] += 1
        if len(self._refused) > PRESSING_KEPT:
            self._refused = Counter(dict(self._refused.most_common(PRESSING_KEPT // 2)))

    def top(self, count: int) -> list[tuple[str, int]]:
        return self._refused.most_common(count)
