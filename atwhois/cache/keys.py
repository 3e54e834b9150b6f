"""The cache's key scheme, as Bluesky's Go directory has it: `h:<handle>` holds a handle's
resolution (handle -> DID), `d:<did>` a DID's document resolution (DID -> identity).

What other parts may import to name entries (the daemon's kept answers, the event
stream's follower)."""

from __future__ import annotations

from atwhois.resolver import Identity


def handle_key(handle: str) -> str:
    return "h:" + handle


def did_key(did: str) -> str:
    return "d:" + did


def identifier_of(key: str) -> str:
    """The handle or DID an entry's key names (`handle_key`, `did_key`)."""
    return key[2:]


def resting_on(identity: Identity) -> list[str]:
    """The keys of the entries an answer about `identity` is composed from: a change of any
    of them may change the answer (more keys than it used are harmless)."""
    handles = {identity.handle_queried, identity.declared_handle} - {None}
    keys = [handle_key(handle) for handle in handles if handle]
    return [*keys, did_key(identity.did)] if identity.did else keys
