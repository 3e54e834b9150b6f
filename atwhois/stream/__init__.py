"""Following the network's event stream (`com.atproto.sync.subscribeRepos`)."""

from .frames import (
    AccountEvent,
    ErrorFrame,
    Event,
    IdentityEvent,
    InfoEvent,
    MalformedFrame,
    Skipped,
    decode,
)

__all__ = [
    "AccountEvent",
    "ErrorFrame",
    "Event",
    "IdentityEvent",
    "InfoEvent",
    "MalformedFrame",
    "Skipped",
    "decode",
]
