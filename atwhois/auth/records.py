"""A record verified at its repository's PDS (docs/spec.md: R-REC-*) through whatever
answers identities: a cache (`CachedResolver`) lends its kept identities to its resolver,
which asks the PDS; a `Resolver` resolves the identity now; a directory standing for a
network of its own verifies it there (`VerifiesRecords`: a running daemon's `Client`, with
the identities it keeps; `atwhois.testing.World`, at its PDS); any other directory answers
the identity, and a resolver of `config` asks the PDS. The rules are
`resolver.record`'s and `resolver.record_proof`'s; here, how often a kept identity is
resolved afresh for them (R-REC-8: the refresh-once rule tokens keep, `refresh`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from atwhois.cache import CachedResolver
from atwhois.resolver import Config, Resolver
from atwhois.resolver.directory import Directory, VerifiesRecords
from atwhois.resolver.record_proof import RecordVerification

from .refresh import REFRESH_EVERY, Refresher

if TYPE_CHECKING:
    from prometheus_client.core import Metric


class RecordVerifier:
    """Records verified through `directory`, each kept identity whose verdict may be its
    document's change resolved afresh through one `Refresher` (R-REC-8): shared by the
    verifications asking at the same time, and at most once a DID every `refresh_every`
    seconds of `clock`, so that a PDS answering every proof with a commit its document's key
    did not sign costs the directory one resolution every few seconds, however many
    verifications ask. `clock` is by default the cache's own (a `CachedResolver`'s: the time
    its identities were kept in). A service verifying many records keeps one, as the daemon
    does; `verify_record` makes one a call, which a cache's refreshed entries still hold to
    the rule one call after another."""

    def __init__(
        self,
        directory: Directory,
        *,
        config: Config | None = None,
        refresh_every: float = REFRESH_EVERY,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.directory, self.config = directory, config
        if clock is None:
            clock = directory.clock if isinstance(directory, CachedResolver) else time.time
        self.refresher = Refresher(directory.refresh, every=refresh_every, clock=clock)

    async def verify(
        self, uri: str, *, cid: str | None = None, record: bytes | None = None
    ) -> RecordVerification:
        """The record `uri` names, verified; `cid` or `record` (DRISL or JSON) is what the
        caller holds. Raises `InvalidInput` before anything is asked."""
        directory, refresh = self.directory, self.refresher.refresh
        if isinstance(directory, CachedResolver):
            resolver = directory.resolver
            return await resolver.verify_record(
                uri, cid=cid, record=record, directory=directory, refresh=refresh
            )
        if isinstance(directory, Resolver):  # resolved now: nothing kept, nothing refreshed
            return await directory.verify_record(uri, cid=cid, record=record)
        if isinstance(directory, VerifiesRecords):  # a daemon, a world: there, as they keep
            return await directory.verify_record(uri, cid=cid, record=record)
        async with Resolver(self.config) as resolver:
            return await resolver.verify_record(
                uri, cid=cid, record=record, directory=directory, refresh=refresh
            )

    @property
    def refreshes(self) -> int:
        """Kept identities resolved afresh for a record's verdict (R-REC-8)."""
        return self.refresher.count

    def metrics(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily

        yield CounterMetricFamily(
            "atwhois_record_refreshes",
            "Kept identities resolved afresh because a record's verdict under them may have "
            "been their document's change (R-REC-8): at most one a DID every few seconds.",
            value=self.refreshes,
        )


async def verify_record(
    directory: Directory,
    uri: str,
    *,
    cid: str | None = None,
    record: bytes | None = None,
    config: Config | None = None,
) -> RecordVerification:
    """The record `uri` names, verified; `cid` or `record` (DRISL or JSON) is what the
    caller holds. Raises `InvalidInput` before anything is asked."""
    return await RecordVerifier(directory, config=config).verify(uri, cid=cid, record=record)
