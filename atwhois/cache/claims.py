"""An event is a claim that something changed, not an answer. `Claim`: a source (an event
stream's `#identity`) says a DID's document changed. The source the document is read from
may not have it yet (a PLC replica, a mirror between two polls: "a few hundred milliseconds"
behind, or seconds), and a refresh that reads the old document must not be cached as fresh
for its whole lifetime. So until the change shows, or the claim's window ends, every
resolution of the DID is stored stale from the start (served as *revalidating*: never with a
fresh `max-age`), and re-checked; the one that shows it says which claim it settled and how
long after the event. Pure functions over entries and parts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from atwhois.resolver.report import DocumentResolution

from .entry import Cached, Entry, Part


@dataclass(frozen=True, slots=True)
class Claim:
    what: str  # the event, as a report names it
    heard_at: float  # on the cache's clock
    until: float  # the window's end: past it, what the source says is taken as it is
    before: tuple[str, bytes | None]  # the document held when the claim came (`seen`)


def seen(part: DocumentResolution) -> tuple[str, bytes | None]:
    """What a resolution says of the document, for comparing two: its outcome and bytes."""
    return str(part.evidence.outcome), part.body


def settles(claim: Claim, part: Part) -> bool:
    """Whether a resolution of the claimed DID settles the claim: it shows another document
    (or an absence, a tombstone) than the one held when the claim came, or it was read from
    the DID's own host (did:web: no replica stands between), which has no lag to wait out."""
    if not isinstance(part, DocumentResolution) or part.did.startswith("did:web:"):
        return True
    return seen(part) != claim.before


def marked(claim: Claim, entry: Entry) -> Entry:
    """`entry` stale from now on, naming the claim it is re-checked for; no background
    refresh before the window ends (the re-checks are the claim's)."""
    return dataclasses.replace(
        entry,
        fresh_until=min(entry.fresh_until, claim.heard_at),
        revalidating=claim.what,
        retry_at=claim.until,
    )


def settled(claim: Claim, entry: Entry, now: float) -> Entry:
    """`entry`, which shows the change, with the claim it settled and when it showed."""
    after = max(0.0, now - claim.heard_at)
    return dataclasses.replace(
        entry, changed_by=f"{claim.what}; the change showed {after:.1f} s after it"
    )


def open_claim(open_claims: dict[str, Claim], key: str, now: float) -> Claim | None:
    """The claim open about `key`; one whose window ended is closed here."""
    claim = open_claims.get(key)
    if claim is not None and now >= claim.until:
        del open_claims[key]
        return None
    return claim


def as_claimed(
    open_claims: dict[str, Claim],
    key: str,
    new: Part,
    entry: Entry,
    now: float,
    held: Cached | None,
) -> Entry:
    """`entry`, the resolution `new` of `key`, as an open claim about it allows: stale from
    the start while it does not show the change; naming the claim once it does, which
    closes it (as does the end of its window). With no claim open, a resolution that shows
    the document `held` showed keeps the claim that document settled (the handles
    re-verified after it resolve the document again)."""
    claim = open_claim(open_claims, key, now)
    if claim is None:
        return _carried(entry, new, held)
    if not settles(claim, new):  # a document some earlier claim settled still names it
        return marked(claim, _carried(entry, new, held))
    del open_claims[key]
    return settled(claim, entry, now)


def _carried(entry: Entry, new: Part, held: Cached | None) -> Entry:
    if held is None or held.entry.changed_by is None:
        return entry
    if not isinstance(new, DocumentResolution) or not isinstance(held.part, DocumentResolution):
        return entry
    if seen(new) != seen(held.part):
        return entry
    return dataclasses.replace(entry, changed_by=held.entry.changed_by)
