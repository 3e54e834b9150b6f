"""How long a cached answer is fresh, and how long it may still be served stale.

Defaults, and why (the numbers are in the README too):
- verified bindings: fresh 1 h, servable stale up to 24 h — the TypeScript and Python SDKs'
  stale/max (1 h / 24 h); Bluesky's Go directory keeps hits 24 h. Stale answers are served at
  once while one background refresh runs, and kept when the upstream fails (up to 24 h).
- unverified bindings (handle and document disagree): fresh 5 min, at most 1 h — the Go
  directory's invalid-handle TTL, the AppView's hourly re-check of invalid handles; people fix
  their handle and expect to see it soon.
- confirmed absence or invalid data: fresh 2 min, at most 10 min — the Go error TTL (2 min),
  Slingshot's not-found TTL (60 s).
- transient failures (timeout, SERVFAIL, 5xx, TLS, refused) and cancellations: never cached.
For sign-in flows, keep `verified.fresh` under 10 minutes (H-CACHE-3).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from atwhois.foundation import defaults


class Lifetime(NamedTuple):
    """How long a kind of answer is served: fresh, then stale (while a refresh runs, or
    while the upstream fails) until `max_age`."""

    fresh: float  # seconds during which the entry is served as fresh
    max_age: float  # seconds after which it is never served, not even when upstream fails


class Kind(StrEnum):
    VERIFIED = "verified"
    UNVERIFIED = "unverified"
    ABSENT = "absent"


VERIFIED = Lifetime(*defaults.TTL_VERIFIED)
UNVERIFIED = Lifetime(*defaults.TTL_UNVERIFIED)
ABSENT = Lifetime(*defaults.TTL_ABSENT)


@dataclass(frozen=True, slots=True)
class Policy:
    """How long each kind of answer is served (verified, unverified, absent), and how soon
    a failed refresh is tried again: the cache's lifetimes (`ttl_*` settings)."""

    verified: Lifetime = VERIFIED
    unverified: Lifetime = UNVERIFIED
    absent: Lifetime = ABSENT
    retry_after: float = 30.0  # after a failed background refresh, before the next one

    def lifetime(self, kind: Kind) -> Lifetime:
        return {
            Kind.VERIFIED: self.verified,
            Kind.UNVERIFIED: self.unverified,
            Kind.ABSENT: self.absent,
        }[kind]


# --- which answer may replace which -----------------------------------------------------


class Answer(StrEnum):
    """What a new resolution of one part (a handle's, a DID document's) is worth."""

    CONFIRMED = "confirmed"  # an answer, a confirmed absence (404/410, NXDOMAIN), invalid data
    PROVISIONAL = "provisional"  # HTTPS's DID while DNS, which wins, failed and said another
    UNCONFIRMED = "unconfirmed"  # a transient failure, or a broken answer (MalformedAnswer)


class Held(StrEnum):
    """What the cache holds for that part, within its maximum age."""

    NOTHING = "nothing"
    GOOD = "good"  # an answer: the handle's DID, the DID's document
    NEGATIVE = "negative"  # a confirmed absence or invalid data


class Action(StrEnum):
    STORE = "store"  # the new answer replaces whatever was held
    KEEP = "keep"  # the held entry stays, marked with the failure (stale-if-error)
    NONE = "none"  # nothing to store, nothing to keep


def replacement(held: Held, answer: Answer) -> Action:
    """Only a confirmed answer may replace a good one; a failure never becomes absence."""
    match held, answer:
        case _, Answer.CONFIRMED:
            return Action.STORE
        case Held.GOOD, Answer.PROVISIONAL | Answer.UNCONFIRMED:
            return Action.KEEP
        case Held.NOTHING | Held.NEGATIVE, Answer.PROVISIONAL:
            return Action.STORE  # better than nothing, and than an absence
        case Held.NEGATIVE, Answer.UNCONFIRMED:
            return Action.KEEP
        case Held.NOTHING, Answer.UNCONFIRMED:
            return Action.NONE
    raise AssertionError(f"no row for held={held}, answer={answer}")
