"""Following the network's event stream (`com.atproto.sync.subscribeRepos`); reading a
labeler's (`com.atproto.label.subscribeLabels`): `decode_labels` and `LabelsEvent` are for
the library's users too, whose verifier takes a frame's labels (docs/guides/signed-data.md)."""

from .frames import (
    AccountEvent,
    ErrorFrame,
    Event,
    IdentityEvent,
    InfoEvent,
    LabelsEvent,
    MalformedFrame,
    Skipped,
    decode,
    decode_labels,
)

__all__ = [
    "AccountEvent",
    "ErrorFrame",
    "Event",
    "IdentityEvent",
    "InfoEvent",
    "LabelsEvent",
    "MalformedFrame",
    "Skipped",
    "decode",
    "decode_labels",
]
