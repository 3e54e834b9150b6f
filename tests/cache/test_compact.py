"""The compact form of an entry (`cache.compact`, issue 69): what it keeps is rebuilt byte for
byte, what it cannot rebuild is kept whole, and bytes it did not write are refused."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from atwhois.cache import compact
from atwhois.cache.entry import Entry
from atwhois.cache.freshness import iso
from atwhois.cache.packing import UnreadableEntry
from devnet.shaped_entries import shaped

IDENTITIES = [shaped(index) for index in range(300)]  # every kind of the network's shape


def untimed(part: dict[str, Any]) -> dict[str, Any]:
    copied = json.loads(json.dumps(part))
    for method in ("dns", "https", "evidence"):
        if method in copied:
            copied[method]["ms"] = None
    return copied


def test_a_verified_binding_is_rebuilt_from_its_parts() -> None:
    for key, entry in (pair for identity in IDENTITIES for pair in identity.entries):
        kept = entry.encode(key)
        again = Entry.decode(kept, key)
        assert again.body == entry.body  # the document's bytes as served (XRPC answers)
        assert iso(again.checked_at) == iso(entry.checked_at)
        assert abs(again.stale_until - entry.stale_until) < 0.001
        if kept[0] in compact.KINDS:
            assert again.part == untimed(entry.part)  # all but the timings
            assert len(kept) < len(entry.encode_whole()) / 2
        else:  # a did:web's document, of its host's own form: kept whole
            assert key.startswith("d:did:web:") and again == entry


def test_most_of_the_networks_identities_are_compact_and_small() -> None:
    sizes = [len(entry.encode(key)) for i in IDENTITIES for key, entry in i.entries]
    kinds = [entry.encode(key)[0] for i in IDENTITIES for key, entry in i.entries]
    assert sum(kind in compact.KINDS for kind in kinds) >= 0.98 * len(kinds)
    assert sum(sizes) / len(IDENTITIES) < 130  # both entries of an identity


def _variant(entry: Entry, **changes: Any) -> Entry:
    return dataclasses.replace(entry, **changes)


def test_what_no_form_rebuilds_is_kept_whole() -> None:
    (handle_key, handle), (did_key, document) = IDENTITIES[0].entries
    assert document.body is not None
    body = document.body
    for other in (
        body.replace(b'"id":', b'"id" :', 1),
        body.replace(b'["at://', b'["at://x.test","at://'),
        body.replace(b"Multikey", b"Multikey2"),
    ):  # a document of no standard form: kept whole (packed) in a compact entry
        kept = _variant(document, body=other).encode(did_key)
        assert kept[0] in compact.KINDS and Entry.decode(kept, did_key).body == other
    others = [
        (did_key, _variant(document, refresh_error="upstream down", retry_at=5.0)),
        (did_key, _variant(document, revalidating="#identity seq 7")),
        (did_key, _variant(document, checked_at=document.checked_at + 0.25)),
        (handle_key, _variant(handle, part={**handle.part, "handle": "other.test"})),
        (handle_key, _variant(handle, part=_with_error(handle.part, "https", "odd text"))),
    ]
    for key, entry in others:
        kept = entry.encode(key)
        assert kept[:1] == b"\x78", entry  # packed whole, every field as it was
        assert Entry.decode(kept, key) == entry


def _with_error(part: dict[str, Any], method: str, error: str) -> dict[str, Any]:
    return {**part, method: {**part[method], "error": error}}


def test_bytes_it_did_not_write_are_refused() -> None:
    for key, entry in IDENTITIES[0].entries:
        kept = entry.encode(key)
        for cut in range(1, len(kept)):
            with pytest.raises(UnreadableEntry):
                Entry.decode(kept[:cut], key)
        with pytest.raises(UnreadableEntry):
            Entry.decode(kept + b"\0", key)
    (handle_key, handle), (did_key, _) = IDENTITIES[0].entries
    with pytest.raises(UnreadableEntry):  # a handle's entry is no document's
        Entry.decode(handle.encode(handle_key), did_key)


def _first_kinds(kept: bytes) -> bytes:
    """A short-kind entry (3, 4) written as the first compact kinds (1, 2) wrote it."""
    times_end = 9
    while kept[times_end] & 0x80:  # the fresh window's varint
        times_end += 1
    times_end += 1
    while kept[times_end] & 0x80:  # the stale window's
        times_end += 1
    times_end += 1
    head, rest = kept[1:times_end], kept[times_end:]
    if kept[0] == 3:  # the two methods' codes a byte each, the DID tagged as a did:plc
        return b"\1" + head + bytes([rest[0] & 0xF, rest[0] >> 4]) + b"\0" + rest[1:]
    form, handle_size = rest[0], rest[1]  # a handle shorter than 128 bytes
    handle_end = 2 + handle_size
    return b"\2" + head + b"\1" + bytes([form]) + rest[1:handle_end] + b"\x21" + rest[handle_end:]


def test_the_common_identity_takes_the_short_kinds_and_the_first_kinds_are_still_read() -> None:
    """Issue 69: a handle naming one did:plc and a directory's `Multikey` document take the
    short kinds (4 bytes an identity fewer); entries of the first kinds, written before,
    read the same."""
    short = 0
    for key, entry in (pair for identity in IDENTITIES for pair in identity.entries):
        kept = entry.encode(key)
        if kept[0] not in (3, 4):
            continue
        short += 1
        first = _first_kinds(kept)
        assert len(first) == len(kept) + 2
        assert Entry.decode(first, key) == Entry.decode(kept, key)
    assert short >= 0.98 * 2 * len(IDENTITIES)
    sizes = [len(entry.encode(key)) for i in IDENTITIES for key, entry in i.entries]
    assert sum(sizes) / len(IDENTITIES) < 113
