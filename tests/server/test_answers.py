"""The kept answers (`server.answers`): a cache hit is ready bytes, never an answer an entry
no longer backs, and each method answers from a record only what it would have answered."""

from __future__ import annotations

import dataclasses
import time
import urllib.parse
from pathlib import Path

import httpx
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from atwhois.cache import MemoryStore, SqliteStore, TieredStore
from atwhois.resolver import Identity, Resolver, Status
from atwhois.server.answers import AnswerCache
from atwhois.server.answers import _rendered_size as answers_size
from devnet.identities import verified
from devnet.network import DevnetState
from tests.support.cache_model import LoopThread, start_daemon, stop_daemons
from tests.support.clock import Clock
from tests.support.http import XRPC

DOCUMENT = b'{"id":"did:plc:a"}'
HANDLE_A = XRPC + "resolveHandle?handle=a.test"


def _kept(answers: AnswerCache, identity: Identity, document: bytes | None = DOCUMENT) -> None:
    answers.put(identity, document, answers.changes)


async def test_an_answer_is_kept_while_fresh_and_dropped_when_an_entry_it_rests_on_changes() -> (
    None
):
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0])
    answers = AnswerCache(store, clock=lambda: now[0])
    _kept(answers, verified("did:plc:a", "a.test", fresh_for=60))
    now[0] += 59  # past the old half-second limit, still fresh
    found = answers.get(HANDLE_A)
    assert found == (
        b'{"did":"did:plc:a"}',
        "public, max-age=1, stale-while-revalidate=60, stale-if-error=60",
    )
    now[0] += 2
    assert answers.get(HANDLE_A) is None  # never past its fresh window
    for changed in ("d:did:plc:a", "h:a.test"):
        _kept(answers, verified("did:plc:a", "a.test"))
        await store.put("h:other.test", b"x", now[0] + 60)
        assert answers.get(HANDLE_A) is not None  # another entry changed: still true
        await store.delete([changed])
        assert answers.get(HANDLE_A) is None, changed
        assert answers.get(XRPC + "resolveDid?did=did:plc:a") is None, changed
    _kept(answers, verified("did:plc:a", "a.test"))
    store.announce(["d:did:plc:a"])  # what the key means changed (an account's status)
    assert answers.get(HANDLE_A) is None
    assert len(answers._records) == 0  # nothing left under either key


async def test_an_answer_looked_up_across_a_change_of_its_entries_is_not_kept() -> None:
    """Only a change of an entry the answer rests on refuses it: while a relay is followed
    the store announces changes all the time (revalidations, cursors, account marks)."""
    later = time.time() + 60
    for changed in ("d:did:plc:a", "h:a.test"):
        store = MemoryStore()
        answers = AnswerCache(store)
        before = answers.changes
        await store.put("h:other.test", b"x", later)
        await store.put("stream-cursor:wss://relay.test", b"12", later)
        await store.put(changed, b"new", later)  # while the lookup ran
        await store.put("d:did:plc:other", b"x", later)
        answers.put(verified("did:plc:a", "a.test"), DOCUMENT, before)
        assert answers.get(HANDLE_A) is None, changed
    store = MemoryStore()
    answers = AnswerCache(store)
    before = answers.changes
    await store.put("h:other.test", b"x", later)  # only others changed
    await store.put("stream-cursor:wss://relay.test", b"12", later)
    answers.put(verified("did:plc:a", "a.test"), DOCUMENT, before)
    assert answers.get(HANDLE_A) is not None
    store.announce(None)  # anything may have changed
    answers.put(verified("did:plc:a", "a.test"), DOCUMENT, answers.changes - 1)
    assert answers.get(HANDLE_A) is None
    before = answers.changes  # more changes than are remembered: not kept
    for i in range(AnswerCache.RECENT_CHANGES + 1):
        store.announce([f"h:u{i}.test"])
    answers.put(verified("did:plc:a", "a.test"), DOCUMENT, before)
    assert answers.get(HANDLE_A) is None
    answers.put(verified("did:plc:a", "a.test"), DOCUMENT, answers.changes - 10)
    assert answers.get(HANDLE_A) is not None


async def test_answers_are_kept_half_a_second_while_other_processes_changes_are_not_followed(
    tmp_path: Path,
) -> None:
    now = [1000.0]
    store = TieredStore(MemoryStore(), SqliteStore(tmp_path / "c.db"))
    answers = AnswerCache(store, clock=lambda: now[0])
    assert not store.following  # not yet watching
    _kept(answers, verified("did:plc:a", "a.test"))
    now[0] += 0.4
    assert answers.get(HANDLE_A) is not None
    now[0] += 0.2
    assert answers.get(HANDLE_A) is None
    await store.close()


async def test_a_kept_answer_spares_the_memory_tier_its_entries(tmp_path: Path) -> None:
    """A hot identity is held once in memory, as the record its answers are rendered from,
    not also as the entries it was composed from, while the store below holds those (issue
    18: 3.2 KB per identity, a third of it such copies); memory alone keeps its entries."""
    tier = TieredStore(MemoryStore(), SqliteStore(tmp_path / "c.db"))
    alone = MemoryStore()
    for store in (tier, alone):
        answers = AnswerCache(store)
        for key in ("h:a.test", "d:did:plc:a"):
            await store.put(key, b"entry", time.time() + 60)
        _kept(answers, verified("did:plc:a", "a.test"))
        assert answers.get(HANDLE_A) is not None
    assert tier.memory.slot("h:a.test") is None and tier.memory.slot("d:did:plc:a") is None
    found = await tier.get("d:did:plc:a")  # read back from below to compose a new answer
    assert found is not None and found.value == b"entry"
    assert alone.slot("h:a.test") is not None and alone.slot("d:did:plc:a") is not None
    await tier.close()


def test_answers_pushed_out_by_the_bound_leave_nothing_behind() -> None:
    answers = AnswerCache(MemoryStore(), max_bytes=10_000)
    for i in range(1000):
        _kept(answers, verified(f"did:plc:{i}", f"u{i}.test"))
    assert answers.used_bytes <= 10_000
    by_did = [answers.get(f"{XRPC}resolveDid?did=did:plc:{i}") is not None for i in range(1000)]
    by_handle = [answers.get(f"{XRPC}resolveHandle?handle=u{i}.test") for i in range(1000)]
    assert 0 < sum(by_did) < 1000
    assert [found is not None for found in by_handle] == by_did  # both keys, or neither
    assert len(answers._records) == 2 * sum(by_did)


def _as(identity: Identity, status: Status, **changes: str | None) -> Identity:
    return dataclasses.replace(identity, status=status, **changes)  # type: ignore[arg-type]


def test_one_record_answers_each_method_only_what_the_method_would() -> None:
    """An identity's record answers resolveHandle, resolveDid and resolveIdentity, by DID and
    by handle, for the one spelling of each question it can be sure of; everything else
    goes the long way (None here)."""
    answers = AnswerCache(MemoryStore())
    _kept(answers, verified("did:plc:a", "a.test"))

    def body(question: str) -> bytes | None:
        found = answers.get(XRPC + question)
        return found[0] if found else None

    full = b'{"did":"did:plc:a","handle":"a.test","didDoc":{"id":"did:plc:a"}}'
    assert body("resolveHandle?handle=a.test") == b'{"did":"did:plc:a"}'
    assert body("resolveDid?did=did:plc:a") == b'{"didDoc":{"id":"did:plc:a"}}'
    assert body("resolveDid?did=did%3Aplc%3Aa") == b'{"didDoc":{"id":"did:plc:a"}}'
    assert body("resolveIdentity?identifier=a.test") == full
    assert body("resolveIdentity?identifier=did:plc:a") == full
    for other in (
        "resolveHandle?handle=A.test",  # the long way lower-cases it
        "resolveHandle?handle=did:plc:a",
        "resolveHandle?handle=a.test&x=1",
        "resolveDid?did=a.test",
        "resolveDid?handle=a.test",
        "resolveIdentity?handle=a.test",
        "refreshIdentity?identifier=a.test",
    ):
        assert body(other) is None, other
    assert answers.get("/xrpc/com.bad-example.identity.resolveMiniDoc?identifier=a.test") is None

    # a DID whose handle does not verify: no answer by that handle, handle.invalid by DID
    _kept(answers, _as(verified("did:plc:b", "b.test"), Status.HANDLE_MISMATCH, query="did:plc:b"))
    assert body("resolveHandle?handle=b.test") is None
    assert body("resolveIdentity?identifier=b.test") is None
    shown = body("resolveIdentity?identifier=did:plc:b")
    assert shown == b'{"did":"did:plc:b","handle":"handle.invalid","didDoc":{"id":"did:plc:a"}}'
    # a handle that could not be checked: resolveIdentity fails, the document is served
    _kept(answers, _as(verified("did:plc:c", "c.test"), Status.UNAVAILABLE))
    assert body("resolveIdentity?identifier=did:plc:c") is None
    assert body("resolveDid?did=did:plc:c") is not None
    # no document to serve: only resolveHandle answers
    _kept(answers, verified("did:plc:d", "d.test"), document=None)
    assert body("resolveHandle?handle=d.test") == b'{"did":"did:plc:d"}'
    assert body("resolveDid?did=did:plc:d") is None
    assert body("resolveIdentity?identifier=d.test") is None


def test_a_handle_holds_one_record_and_another_handles_lookup_keeps_none() -> None:
    """A DID that declares a handle another DID holds takes the handle's key: the other
    record goes whole (under its DID too), never half. A lookup of a handle that names
    another DID's document rests on that handle too, which no record is kept under."""
    answers = AnswerCache(MemoryStore())
    _kept(answers, verified("did:plc:a", "a.test"))
    claim = _as(verified("did:plc:x", "a.test"), Status.HANDLE_MISMATCH, handle_queried=None)
    _kept(answers, claim)
    assert answers.get(HANDLE_A) is None
    assert answers.get(XRPC + "resolveDid?did=did:plc:a") is None
    assert answers.get(XRPC + "resolveDid?did=did:plc:x") is not None
    assert len(answers._records) == 2
    answers.changed(["h:a.test"])
    assert len(answers._records) == 0
    other = _as(verified("did:plc:y", "y.test"), Status.HANDLE_MISMATCH, handle_queried="z.test")
    _kept(answers, other)
    assert answers.get(XRPC + "resolveDid?did=did:plc:y") is None


def test_a_kept_answer_is_what_its_method_answered(devnet: DevnetState, tmp_path: Path) -> None:
    """Each method's kept answer, rendered from the identity's record, is byte for byte what
    the method answered (asked twice: resolved, then composed from the cache and kept),
    with the same Cache-Control; also for a DID sent percent-encoded, as the TypeScript and
    Go clients send it, and for a DID whose handle does not verify. A spelling the record
    does not answer (an upper-case handle) is answered the long way, the same."""
    alice, trent = devnet.did("alice"), devnet.did("trent")
    questions = [
        "resolveHandle?handle=alice.test",
        f"resolveDid?did={alice}",
        f"resolveDid?did={alice.replace(':', '%3A')}",
        "resolveIdentity?identifier=alice.test",
        f"resolveIdentity?identifier={alice}",
        f"resolveIdentity?identifier={trent}",  # claims alice.test: handle.invalid
        f"resolveDid?did={trent}",
    ]
    loop = LoopThread()
    store = TieredStore(MemoryStore(), SqliteStore(tmp_path / "c.db"))
    daemon = loop.run(start_daemon(Resolver(devnet.config()), store, Clock()))
    try:
        with httpx.Client(base_url=daemon.url) as client:
            for question in questions:
                target = XRPC + question
                answered = [client.get(target) for _ in range(2)]
                kept = daemon.service.answers.get(target)
                assert kept is not None, question
                for answer in (*answered, client.get(target)):
                    assert answer.status_code == 200, question
                    assert answer.content == kept[0], question
                    assert answer.headers["Cache-Control"] == kept[1], question
            upper = client.get(XRPC + "resolveHandle?handle=ALICE.test")
            assert upper.json() == {"did": alice}
            assert daemon.service.answers.get(XRPC + "resolveHandle?handle=ALICE.test") is None
            shown = client.get(XRPC + f"resolveIdentity?identifier={trent}").json()
            assert shown["handle"] == "handle.invalid"
    finally:
        stop_daemons(loop, [daemon])
        loop.stop()


@examples(max_examples=500, deadline=None)
@given(
    st.sampled_from(["resolveHandle?handle=", "resolveDid?did=", "resolveIdentity?identifier="]),
    st.one_of(st.sampled_from(["a.test", "did:plc:a", "A.test"]), st.text(max_size=40)),
    st.sampled_from(["", "%", "&x=1", "#"]),
    st.booleans(),
)
def test_a_strangers_target_is_answered_from_a_record_or_not_at_all(
    question: str, value: str, tail: str, encoded: bool
) -> None:
    """The target is read as sent, by hand: whatever the bytes, a lookup answers what the
    record says for exactly its DID or handle, or nothing; it never raises."""
    answers = AnswerCache(MemoryStore())
    _kept(answers, verified("did:plc:a", "a.test"))
    sent = urllib.parse.quote(value, safe="") if encoded else value
    found = answers.get(XRPC + question + sent + tail)
    if found is not None:
        assert tail == "" and value in ("a.test", "did:plc:a")


async def test_a_target_asked_again_is_answered_rendered_aged_and_as_its_record_changes() -> None:
    """From its second hit a target's answer is kept rendered (body and head made once); its
    Cache-Control still counts down with the clock, and a new record under its key (another
    DID claiming the handle), or a change of an entry it rests on, is what the next hit
    answers from."""
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0])
    answers = AnswerCache(store, clock=lambda: now[0])
    _kept(answers, verified("did:plc:a", "a.test", fresh_for=60))
    first, second = answers.answer(HANDLE_A), answers.answer(HANDLE_A)
    assert first is not None and second is not None and first is not second
    third = answers.answer(HANDLE_A)
    assert third is second  # kept rendered
    assert third.path == XRPC + "resolveHandle" and third.body == b'{"did":"did:plc:a"}'
    assert b"Cache-Control: public, max-age=60," in third.head
    assert b"Content-Length: 19\r\n" in third.head
    now[0] += 10.5
    aged = answers.answer(HANDLE_A)
    assert aged is third and aged.cache.startswith("public, max-age=49,")
    assert b"max-age=49," in aged.head and answers.get(HANDLE_A) == (aged.body, aged.cache)
    _kept(answers, verified("did:plc:b", "a.test", fresh_for=60))
    claimed = answers.answer(HANDLE_A)
    assert claimed is not None and claimed.body == b'{"did":"did:plc:b"}'
    answers.answer(HANDLE_A)
    store.announce(["h:a.test"])
    assert answers.answer(HANDLE_A) is None
    answers.clear()
    assert answers.used_bytes == 0


def test_rendered_answers_stay_within_their_share_of_the_bound_as_they_age() -> None:
    """Rendered answers are counted the same while they age (their Cache-Control's length
    changes), so what the bound counts is what is held, within its eighth of the bytes."""
    now = [1000.0]
    answers = AnswerCache(MemoryStore(clock=lambda: now[0]), 40_000, clock=lambda: now[0])
    targets = [f"{XRPC}resolveDid?did=did:plc:{i}" for i in range(200)]
    for i in range(200):
        _kept(answers, verified(f"did:plc:{i}", f"u{i}.test", fresh_for=100))
    for step in range(3):
        for target in targets * 2:
            answers.answer(target)
        now[0] += 95 if step == 0 else 2  # max-age 100 -> 5 -> 3: a shorter head
    rendered = answers._rendered
    assert 0 < len(rendered) < 200
    assert rendered.bytes == sum(answers_size(key, value) for key, value in rendered.items())
    assert rendered.bytes <= 40_000 // AnswerCache.RENDERED_SHARE
