"""The memory store's arena (issue 69): entries packed in chunks under an index of their
places, within the bound in bytes the store counts from the chunks and the index
themselves; CLOCK eviction (the entries read since written survive the unread), compaction
of dead space, the index's growth, walks that see every key held however the entries move,
and what an entry may be (any key, any value: none, or larger than a chunk)."""

from __future__ import annotations

import time
from typing import Any

from atwhois.cache.stores.memory import MemoryStore, Slot
from tests.support.clock import Clock

LATER = time.time() + 3600


async def test_eviction_keeps_the_bound_and_spares_the_entries_read() -> None:
    """Under churn the bound holds after every write, and what is read between the writes
    (a hot identity) survives while the entries never read are pushed out."""
    store = MemoryStore(40_000, decoded_share=0)  # chunks of 1,250 B: ~9 entries each
    for i in range(100):
        await store.put(f"h:cold{i}.test", b"c" * 100, LATER)
    hot = [f"h:hot{i}.test" for i in range(5)]
    for key in hot:
        await store.put(key, b"h" * 100, LATER)
    for i in range(3_000):
        await store.put(f"h:churn{i}.test", b"x" * 100, LATER)
        assert store.used_bytes <= store.max_bytes
        if i % 50 == 0:
            assert all([await store.get(key) is not None for key in hot]), i
    assert all([await store.get(key) is not None for key in hot])
    assert [i for i in range(100) if await store.get(f"h:cold{i}.test")] == []
    assert 200 < await store.count() < 300  # the bound full, not emptied


async def test_dead_space_is_compacted_and_pushes_no_entry_out() -> None:
    """Keys replaced again and again among entries that stay leave every chunk mostly dead,
    yet never empty: compaction gives that space back, so the arena stays about as large
    as what it holds, and no entry kept beside the replaced ones is evicted for them."""
    store = MemoryStore(2_000_000, decoded_share=0)  # chunks of 62,500 B
    for i in range(400):
        await store.put(f"h:kept{i}.test", b"k" * 100, LATER)
    for round in range(60):
        for i in range(400):
            await store.put(f"h:changed{i}.test", b"%02d" % round * 50, LATER)
            if i % 20 == 0:  # a new entry that stays, in each chunk
                await store.put(f"h:new{round}-{i}.test", b"n" * 100, LATER)
        assert store.used_bytes < store.max_bytes / 2, round  # not on its way to the bound
    assert await store.count() == 400 + 400 + 60 * 20
    assert all([await store.get(f"h:kept{i}.test") is not None for i in range(400)])
    found = await store.get("h:changed7.test")
    assert found is not None and found.value == b"59" * 50


async def test_the_index_grows_and_shrinks_its_probes_back_on_delete() -> None:
    """Doubling as it fills, a segment at a time (and counted in `used_bytes`); a deleted
    key's slot is refilled by the keys that probed past it, so every other key is still
    found."""
    store = MemoryStore()
    keys = [f"d:did:plc:{i:024d}" for i in range(20_000)]
    for key in keys:
        await store.put(key, key[-6:].encode(), LATER)
    index = store._arena._index.slots
    assert index >= 20_000 / 0.7 and store.used_bytes > 8 * index
    # grown a segment at a time, none past 16,384 slots: no growth moved the whole index
    segments = store._arena._index._segments
    assert len(segments) > 1 and max(map(len, segments)) <= 16_384
    await store.delete(keys[::2])
    assert await store.count() == 10_000
    for number, key in enumerate(keys):
        found = await store.get(key)
        assert (found is None) if number % 2 == 0 else (found and found.value == key[-6:].encode())
    for key in keys[::2]:
        await store.put(key, b"again", LATER)
    assert await store.count() == 20_000 and store._arena._index.slots == index


async def test_a_walk_sees_every_key_held_while_entries_are_evicted_and_moved() -> None:
    """Between the pages the bound evicts whole chunks, ahead of the walk at first (the
    keys read move to the newest chunk, the others go) and dead space is compacted: every
    key held from the first page to the last is seen."""
    store = MemoryStore(60_000, decoded_share=0)  # chunks of 1,875 B: ~17 entries each
    held = [f"d:did:plc:held{i:020d}" for i in range(40)]
    fillers = iter(range(1_000_000))
    for _ in range(100):
        await store.put(f"h:filler{next(fillers)}.test", b"f" * 60, LATER)
    for key in held:
        await store.put(key, b"v" * 60, LATER)
        await store.put(f"h:filler{next(fillers)}.test", b"f" * 60, LATER)
    for _ in range(300):
        await store.put(f"h:filler{next(fillers)}.test", b"f" * 60, LATER)
    first = store._arena._seqs[store._arena._order[0]]
    seen: list[str] = []
    position, pages = "", 0
    while True:
        page, position = await store.walk("d:", 10, position)
        seen += page
        pages += 1
        for key in held:  # read: spared by each eviction, moved to the newest chunk
            assert await store.get(key) is not None
        for _ in range(200 if pages <= 3 else 5):  # churn: the oldest chunks evicted
            await store.put(f"h:filler{next(fillers)}.test", b"c" * 60, LATER)
        await store.put(held[pages % 40], b"w" * 60, LATER)  # a replaced key: dead space
        if not position:
            break
        assert pages < 500
    assert set(held) <= set(seen)
    assert (
        store._arena._seqs[store._arena._order[0]] > first
    )  # the chunks the walk began in are gone


async def test_a_walk_position_of_another_store_starts_it_again() -> None:
    one, two = MemoryStore(), MemoryStore()
    for store in (one, two):
        for i in range(30):
            await store.put(f"d:did:web:u{i}.test", b"v", LATER)
    page, position = await one.walk("d:", 10)
    assert len(page) == 10 and position
    again, _ = await two.walk("d:", 10, position)
    assert again == page  # from the start: the position names its store
    one.clear()  # a position from before a clear names no chunk made since
    written = "d:did:web:" + "y" * 200 + ".test"
    await one.put(written, b"v", LATER)
    assert (await one.walk("d:", 10, position)) == ([written], "")


async def test_expired_entries_are_absent_and_their_times_are_the_tiers_to_set() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    kept = store.keep("h:a.test", b"a", clock.now + 10, loaded_at=5.0)
    assert kept == Slot(b"a", clock.now + 10, 5.0)
    kept.loaded_at = 99.0  # a copy: changes nothing held
    slot = store.slot("h:a.test")
    assert slot is not None and slot.loaded_at == 5.0
    store.refresh("h:a.test", 7.0, clock.now + 20)  # what the tier says it saw below
    assert store.slot("h:a.test") == Slot(b"a", clock.now + 20, 7.0)
    clock.now += 20
    assert store.slot("h:a.test") is None and await store.count() == 0
    store.refresh("h:a.test", 8.0, clock.now + 20)  # of nothing held: nothing
    assert await store.get("h:a.test") is None


async def test_keys_of_any_text_and_values_of_any_size() -> None:
    """Unicode keys (a lone surrogate too, as a URL may carry), an empty value (held, not
    absent), a value larger than a chunk (kept in a chunk of its own), one larger than the
    whole bound (not kept: the key's earlier value goes too), a key past 64 KiB (not kept)."""
    store = MemoryStore(200_000, decoded_share=0)  # chunks of 6,250 B
    keys = ["h:ünïcødé.test", "h:日本語.test", "h:\U0001f600.test", "h:\ud800.test", "h:ü"]
    for number, key in enumerate(keys):
        await store.put(key, key.encode("utf-8", "surrogatepass") + b"%d" % number, LATER)
    for number, key in enumerate(keys):
        found = await store.get(key)
        assert found is not None
        assert found.value == key.encode("utf-8", "surrogatepass") + b"%d" % number
    assert sorted(k for k, _ in await store.scan("h:ü", 10)) == ["h:ü", "h:ünïcødé.test"]
    page, _ = await store.walk("h:\ud800", 10)
    assert page == ["h:\ud800.test"]

    await store.put("h:empty.test", b"", LATER)
    found = await store.get("h:empty.test")
    assert found is not None and found.value == b""

    large = bytes(range(256)) * 100  # 25,600 B: four chunks' worth
    await store.put("d:did:web:large.test", large, LATER)
    assert await store.get("h:empty.test") is not None  # written after it, kept apart
    assert store.used_bytes > len(large)
    found = await store.get("d:did:web:large.test")
    assert found is not None and found.value == large
    await store.put("h:after.test", b"a", LATER)  # the chunk written to is a new one
    page, _ = await store.walk("", 100)
    assert page[-3:] == ["h:empty.test", "d:did:web:large.test", "h:after.test"]
    await store.delete(["d:did:web:large.test"])
    assert store.used_bytes < len(large)  # its chunk given back

    await store.put("d:did:web:huge.test", b"small", LATER)
    await store.put("d:did:web:huge.test", b"x" * 300_000, LATER)
    assert await store.get("d:did:web:huge.test") is None
    assert store.used_bytes <= store.max_bytes and await store.count() == len(keys) + 2
    long = "h:" + "x" * 70_000 + ".test"  # a key past what a record's length says
    await store.put(long, b"v", LATER)
    assert await store.get(long) is None and await store.count() == len(keys) + 2


async def test_a_decoded_form_is_of_the_value_held() -> None:
    """A slot a tier read from below and did not keep is decoded anew, and does not
    replace the decoded form of the value held; a moved record keeps its decoded form."""
    store = MemoryStore(60_000, decoded_share=0.5)
    calls: list[bytes] = []

    def decode(key: str, raw: bytes) -> tuple[Any, int]:
        calls.append(raw)
        return raw.upper(), 10

    await store.put("h:a.test", b"held", LATER)
    assert await store.decoded("h:a.test", decode) == b"HELD"
    assert store.decode("h:a.test", Slot(b"other", LATER), decode) == b"OTHER"
    assert await store.decoded("h:a.test", decode) == b"HELD" and calls == [b"held", b"other"]
    for i in range(400):  # its chunk evicted: read, it moves to the newest
        await store.get("h:a.test")
        await store.put(f"h:churn{i}.test", b"c" * 40, LATER)
    assert await store.decoded("h:a.test", decode) == b"HELD" and len(calls) == 2


async def test_a_did_plc_key_is_kept_in_its_15_bytes_and_read_as_its_text() -> None:
    """The arena keeps a did:plc key as the compact entries keep the DID (16 bytes, not 32);
    walks, scans and evictions give it back as its text; a key only like one (upper case,
    another length) is kept as its text, apart from it."""
    store = MemoryStore(60_000, decoded_share=0)
    plc = "d:did:plc:abcdefghijklmnopqrstuvwx"
    await store.put(plc, b"", LATER)
    assert store._arena._live_bytes == 40  # 23 B of head, 16 of key, aligned on 4
    others = ["d:did:plc:ABCDEFGHIJKLMNOPQRSTUVWX", "d:did:plc:abc", "d:did:web:a.test"]
    for key in others:
        await store.put(key, key.encode(), LATER)
    found = await store.get(plc)
    assert found is not None and found.value == b""
    assert [k for k, _ in await store.scan("d:did:plc:a", 10)] == [plc, "d:did:plc:abc"]
    assert (await store.walk("d:", 10))[0] == [plc, *others]
    assert (await store.walk("d:did:plc:ab", 10))[0] == [plc, "d:did:plc:abc"]
    assert (await store.walk("d:did:web:", 10))[0] == ["d:did:web:a.test"]
    await store.delete([plc])
    assert await store.get(plc) is None and await store.count() == 3

    clock = Clock()
    swept = MemoryStore(60_000, clock=clock, decoded_share=0.5)
    await swept.put(plc, b"v", clock.now + 10)
    held = swept.used_bytes
    assert await swept.decoded(plc, lambda key, raw: (key, 1_000)) == plc
    assert swept.used_bytes > held + 1_000
    clock.now += 31  # past its expiry and the sweep's interval
    await swept.put("h:a.test", b"a", clock.now + 10)  # the sweep drops it, by its text
    assert swept.used_bytes < held + 1_000
