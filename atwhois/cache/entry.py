"""A cache entry: one resolution part (a handle's, a DID's document) with its times, as
every store keeps it (packed bytes), and as the memory tier keeps it decoded (`Cached`).

What other parts may import to read or write entries themselves (the fuzz targets do)."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from dataclasses import dataclass
from typing import Any

from atwhois.resolver.report import DocumentResolution, HandleResolution

from . import compact
from .packing import pack, unpack

Part = HandleResolution | DocumentResolution


@dataclass(frozen=True, slots=True)
class Entry:
    part: dict[str, Any]  # a HandleResolution or DocumentResolution, as JSON
    checked_at: float  # when the resolution that produced it started
    fresh_until: float
    stale_until: float
    refresh_error: str | None = None
    retry_at: float = 0.0  # no background refresh before this (after a failed one)
    # A source said the DID changed (an event) and this resolution does not show it yet: what
    # it said; the entry is stale from the start while the claim is re-checked.
    revalidating: str | None = None
    changed_by: str | None = None  # the claim this resolution saw the change for, and when
    body: bytes | None = None  # a DID document's bytes, as served

    def encode(self, key: str) -> bytes:
        """The entry as kept under `key`: in its compact form (`compact`: rebuilt on the way
        out from its parts) where it has one, else whole (`encode_whole`)."""
        # Not dataclasses.asdict: it deep-copies the part, the costliest step of a write.
        fields = {name: getattr(self, name) for name in self.__slots__ if name != "body"}
        return compact.encode(key, fields, self.body) or _whole(fields, self.body)

    def encode_whole(self) -> bytes:
        """The fields as one line of JSON, then the document's bytes as they are (JSON
        never holds a raw newline), packed (`packing`): how every entry was kept before
        the compact form, and how one without a compact form still is."""
        fields = {name: getattr(self, name) for name in self.__slots__ if name != "body"}
        return _whole(fields, self.body)

    @classmethod
    def decode(cls, raw: bytes, key: str) -> Entry:
        """The entry kept under `key`, in whichever form it was written: compact, packed
        whole, or a plain line of JSON as before entries were packed (a compact entry
        begins with its kind, 1 or 2; a packed one with 0x78, JSON with '{')."""
        if raw and raw[0] in compact.KINDS:
            fields, body = compact.decode(key, raw)
            return cls(**fields, body=body)
        if not raw.startswith(b"{"):
            raw = unpack(raw)
        head, newline, body = raw.partition(b"\n")
        return cls(**json.loads(head), body=body if newline else None)


def _whole(fields: dict[str, Any], body: bytes | None) -> bytes:
    head = json.dumps(fields, separators=(",", ":")).encode()
    return pack(head if body is None else head + b"\n" + body)


@dataclass(frozen=True, slots=True)
class Cached:
    """A decoded entry, as the memory tier keeps it: its times (`entry`, whose `part` is
    left empty: its JSON took most of a decoded entry's memory), the part it holds, decoded,
    and the bytes it was decoded from (the memory tier's own: nothing more is held)."""

    entry: Entry
    part: Part
    raw: bytes

    def marked(self, key: str, refresh_error: str, retry_at: float) -> Entry:
        """The whole entry (kept under `key`), with a failed refresh noted."""
        entry = Entry.decode(self.raw, key)
        return dataclasses.replace(entry, refresh_error=refresh_error, retry_at=retry_at)


def decode_cached(key: str, raw: bytes, *, dev: bool) -> tuple[Cached, int]:
    entry = Entry.decode(raw, key)
    part: Part
    if "evidence" in entry.part:
        part = DocumentResolution.from_json(entry.part, entry.body, dev=dev)
    else:
        part = HandleResolution.from_json(entry.part)
    # The decoded part's objects, estimated by the JSON they were made from (an overestimate).
    size = _json_size(entry.part) + len(entry.body or b"") + 4 * sys.getsizeof(entry)
    times = dataclasses.replace(entry, part={}, body=None)
    return Cached(times, part, raw), size


# One decoder per mode: the memory tier keeps what a decoder made while the same decoder
# asks, so every resolver of a process shares the decoded entries.
DECODERS = {dev: functools.partial(decode_cached, dev=dev) for dev in (False, True)}


def _json_size(value: Any) -> int:
    """About how many bytes decoded JSON occupies here (walked without recursion: a
    stranger's document may nest deeply)."""
    size, pending = 0, [value]
    while pending:
        item = pending.pop()
        size += sys.getsizeof(item)
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return size
