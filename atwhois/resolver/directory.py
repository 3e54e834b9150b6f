"""`Directory`: what answers identity lookups, whoever does the work. Implemented by
`Resolver` (resolves now, keeps nothing), `cache.CachedResolver` (answers from a cache of
verified bindings) and `Client` (asks a running `atwhois serve`), as Bluesky's Go
identity package has `Directory` for its base, cached and API directories. A directory that
stands for a network of its own verifies records there too (`VerifiesRecords`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .identity import Identity

if TYPE_CHECKING:
    from .record_proof import RecordVerification


class Directory(Protocol):
    async def lookup(self, identifier: str) -> Identity:
        """A handle, DID or at:// URI, resolved and verified both ways (or the cached
        answer that says so)."""
        ...

    async def refresh(self, identifier: str) -> Identity:
        """As `lookup`, every part resolved afresh (and what is kept updated)."""
        ...

    async def document(self, did: str, *, fresh: bool = False) -> Identity:
        """The DID's document alone, its handle not resolved (the report says it was not
        checked): a token's issuer (SA-ISS-2). `fresh`: resolved afresh, whatever is kept."""
        ...

    async def check_pds(self, identity: Identity) -> Identity:
        """`identity` with the PDS check of the PDS its document names (`resolver.pds`):
        always done now, never kept."""
        ...

    async def purge(self, identifier: str) -> list[str]:
        """Forget what is kept about `identifier`; the keys forgotten."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class VerifiesRecords(Protocol):
    """A directory that verifies a record itself, over the network it stands for: a `Client`
    (its daemon, with the identities it keeps), `atwhois.testing.World` (the world's PDS)."""

    async def verify_record(
        self, uri: str, *, cid: str | None = None, record: bytes | None = None
    ) -> RecordVerification: ...
