"""A record verified at its repository's PDS (docs/spec.md: R-REC-*) through whatever
answers identities: a running daemon (`Client`) verifies it there, with the identities it
keeps; a cache (`CachedResolver`) lends its kept identities to its resolver, which asks the
PDS; a `Resolver` resolves the identity now; any other directory (`atwhois.testing.World`)
answers the identity, and a resolver of `config` asks the PDS. The rules are
`resolver.record`'s and `resolver.record_proof`'s."""

from __future__ import annotations

from atwhois.cache import CachedResolver
from atwhois.resolver import Config, Resolver
from atwhois.resolver.directory import Directory
from atwhois.resolver.record_proof import RecordVerification
from atwhois.resolver.remote import Client


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
    if isinstance(directory, Client):
        return await directory.verify_record(uri, cid=cid, record=record)
    if isinstance(directory, CachedResolver):
        resolver = directory.resolver
        return await resolver.verify_record(uri, cid=cid, record=record, directory=directory)
    if isinstance(directory, Resolver):
        return await directory.verify_record(uri, cid=cid, record=record)
    async with Resolver(config) as resolver:
        return await resolver.verify_record(uri, cid=cid, record=record, directory=directory)
