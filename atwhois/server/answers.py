"""The answers fresh cache hits get, rendered from one record per identity (its DID, handle
verdict and deflated document), so that a hit is a dictionary lookup and a few joins; the
targets asked again and again keep their answer rendered, ready to send."""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple
from urllib.parse import unquote

from atwhois.cache import Tier, identifier_of, resting_on
from atwhois.cache.packing import deflate, inflate
from atwhois.foundation.lru import Lru
from atwhois.resolver import Identity, Status
from atwhois.resolver.syntax import INVALID_HANDLE

from .bodies import did_body, json_head, with_document
from .routes import BY_NSID, XRPC


class Record(NamedTuple):
    """What one identity's answers are rendered from. One record under its DID and its
    handle answers every kept method: each answer kept whole cost 1.5 KB of objects per
    identity (two bodies, two request targets, an index of what they rested on), the
    record about 560 B; a named tuple weighs what a plain tuple does (`bench serve`)."""

    kept_until: float
    fresh_until: float
    servable_until: float
    did: str
    handle: str | None  # the declared one
    verified: bool  # the handle is verified
    by_did_ok: bool  # resolveIdentity answers by DID (not while the handle is unchecked)
    document: bytes | None  # deflated; None: the document methods do not answer from here


def _record_size(key: str, record: Record) -> int:
    """Counted in full under the DID, as a key under the handle."""
    if key == record.did:
        return 300 + len(key) + len(record.document or b"")
    return 100 + len(key)


def _resolve_handle(record: Record, by_handle: bool) -> bytes | None:
    return did_body(record.did) if by_handle and record.verified else None


def _resolve_did(record: Record, by_handle: bool) -> bytes | None:
    if by_handle or record.document is None:
        return None
    return with_document({}, inflate(record.document))


def _resolve_identity(record: Record, by_handle: bool) -> bytes | None:
    answers = record.verified if by_handle else record.by_did_ok  # by handle: verified only
    if not answers or record.document is None:
        return None
    shown = record.handle if record.verified and record.handle else INVALID_HANDLE
    return with_document({"did": record.did, "handle": shown}, inflate(record.document))


# What a record answers for each kept method, asked by handle or not: the methods come
# from the one table (`routes.METHODS`), their parameter with them.
_RENDER: dict[str, Callable[[Record, bool], bytes | None]] = {
    "com.atproto.identity.resolveHandle": _resolve_handle,
    "com.atproto.identity.resolveDid": _resolve_did,
    "com.atproto.identity.resolveIdentity": _resolve_identity,
}
_KEPT = {
    nsid: (BY_NSID[nsid].parameter, render, BY_NSID[nsid].path) for nsid, render in _RENDER.items()
}


def cache_control(identity: Identity) -> str:
    """From the freshness policy: fresh for what is left of the fresh window; after that a
    shared cache may serve it stale while revalidating, or on error, up to the maximum."""
    info = identity.cache
    return _cache_control(info.fresh_for_s, info.servable_for_s) if info else "no-store"


def _cache_control(fresh_for: float, servable_for: float) -> str:
    if servable_for <= 0:
        return "no-store"
    fresh = max(0, int(fresh_for))
    extra = int(servable_for) - fresh
    header = f"public, max-age={fresh}"
    return header + (f", stale-while-revalidate={extra}, stale-if-error={extra}" if extra else "")


class Rendered:
    """One target's answer as a hit sends it, rendered from its record once: the body, its
    Cache-Control and the head of its response (`json_head`), made again only when the
    Cache-Control's whole seconds change. It answers while its record is the one kept under
    `key`: a change drops that record, and the next hit renders from the new one."""

    __slots__ = ("_seconds", "body", "cache", "head", "key", "path", "record")

    def __init__(self, record: Record, key: str, path: str, body: bytes) -> None:
        self.record, self.key, self.path, self.body = record, key, path, body
        self.cache, self.head = "", b""
        self._seconds: tuple[int, int, bool] | None = None

    def age(self, now: float) -> None:
        """Its Cache-Control counted from `now` (what `_cache_control` reads of it)."""
        fresh_for, servable_for = self.record.fresh_until - now, self.record.servable_until - now
        seconds = (int(fresh_for), int(servable_for), servable_for <= 0)
        if seconds != self._seconds:
            self._seconds = seconds
            self.cache = _cache_control(fresh_for, servable_for)
            self.head = json_head(self.body, self.cache)


def _rendered_size(target: str, rendered: Rendered) -> int:
    """The same for as long as it is held (its head's length changes as it ages: counted as
    a constant), its record included: it keeps that alive after a change dropped it."""
    return 400 + len(target) + len(rendered.body) + len(rendered.record.document or b"")


class AnswerCache:
    """A record is kept until its fresh window ends (never a stale one: that must reach
    the cache to be revalidated), within a bound in bytes, and dropped as soon as the store
    says an entry it rests on changed, here or in another process; while the store cannot
    follow other processes' changes, for half a second at most. A record whose lookup
    overlapped a change of an entry it rests on is not kept (it may be composed from an old
    entry); changes of other keys do not matter, as far back as the last `RECENT_CHANGES`
    (further back, or a change of anything: not kept). Following a relay, the store
    announces changes all the time (revalidations, account marks, the stream's cursor):
    refusing a record for any of them left lookups composing answers from the store over
    and over (serve p99 6.4 times the run's without a stream, `bench follow`)."""

    UNFOLLOWED_SECONDS = 0.5
    RECENT_CHANGES = 4096
    # A target's answer is kept rendered from its second hit among the last `SEEN` targets
    # hit once: answers kept for every warm target would push each other out before their
    # next hit, costing each hit a render and a put; a hot target's stays.
    SEEN = 4096
    RENDERED_SHARE = 8  # of the bound in bytes, held by rendered answers

    def __init__(
        self,
        store: Tier,
        max_bytes: int = 32 * 1024 * 1024,
        clock: Callable[[], float] = time.time,  # the cache's: answers age with its entries
    ) -> None:
        self._store, self._clock = store, clock
        rendered_bytes = max_bytes // self.RENDERED_SHARE
        # under its DID and under its declared handle: the keys of the entries it rests on
        # (`resting_on`) without their prefix, so a change finds it with no index of its own
        self._records: Lru[str, Record] = Lru(
            max_bytes - rendered_bytes, _record_size, evicted=self._unlink
        )
        self._rendered: Lru[str, Rendered] = Lru(rendered_bytes, _rendered_size)
        self._seen: set[str] = set()  # targets hit once, not rendered yet
        self.changes = 0  # changes the store announced, ever
        # the record keys each of the last changes named, newest last (None: anything)
        self._recent: deque[tuple[str, ...] | None] = deque(maxlen=self.RECENT_CHANGES)
        store.listeners.append(self.changed)

    def get(self, target: str) -> tuple[bytes, str] | None:
        """The answer to a request for `target` (as sent) and its Cache-Control (`answer`)."""
        rendered = self.answer(target)
        return (rendered.body, rendered.cache) if rendered is not None else None

    def answer(self, target: str) -> Rendered | None:
        """The answer to a request for `target` (as sent), its Cache-Control counted from
        now (it aged while kept), or None. Only one spelling of each question is answered
        here, the one with a single parameter, the handle in lower case; the others go the
        long way, to the same answer."""
        rendered = self._rendered.get(target)
        if rendered is not None:
            now = self._clock()
            record = self._records.get(rendered.key)
            if record is rendered.record and record.kept_until >= now:
                rendered.age(now)
                return rendered
            self._rendered.pop(target)  # its record changed or ended: rendered anew below
        return self._render(target)

    def _render(self, target: str) -> Rendered | None:
        if not target.startswith(XRPC):
            return None
        nsid, _, query = target[len(XRPC) :].partition("?")
        kept = _KEPT.get(nsid)
        if kept is None:
            return None
        name, _, key = query.partition("=")
        if name != kept[0]:
            return None
        if "%" in key:
            key = unquote(key)
        record = self._records.get(key)
        if record is None:
            return None
        now = self._clock()
        if record.kept_until < now:
            self._drop(key)
            return None
        body = kept[1](record, key != record.did)
        if body is None:
            return None
        rendered = Rendered(record, key, kept[2], body)
        rendered.age(now)
        if target in self._seen:
            self._seen.discard(target)
            self._rendered.put(target, rendered)
        else:
            if len(self._seen) >= self.SEEN:
                self._seen.clear()
            self._seen.add(target)
        return rendered

    def put(self, identity: Identity, document: bytes | None, changes_before: int) -> None:
        """Keep what `identity` answers (`document`: the document as served, None where it
        is not), looked up when `changes` was `changes_before`. Only an identity asked for
        by its DID or its own handle: another handle's lookup rests on that handle too."""
        info, did, handle = identity.cache, identity.did, identity.declared_handle
        if (
            info is None
            or info.state == "stale"
            or info.fresh_for_s <= 0
            or did is None
            or identity.handle_queried not in (None, handle)
            or self._changed_since(changes_before, (did, handle))
        ):
            return
        now, fresh = self._clock(), info.fresh_for_s
        keep = fresh if self._store.following else min(fresh, self.UNFOLLOWED_SECONDS)
        fresh_end = now + fresh
        until = fresh_end if keep == fresh else now + keep  # one float fewer, most of the time
        record = Record(
            until,
            fresh_end,
            now + info.servable_for_s,
            did,
            handle,
            identity.verified,
            identity.status is not Status.UNAVAILABLE,
            deflate(document) if document is not None else None,
        )
        for key in (did, handle) if handle else (did,):
            self._drop(key)  # its old record, or another DID's that declared this handle
            self._records.put(key, record)
        # The record is what a hit needs of its entries: the memory tier need not hold
        # them too while a shared store does (they are read back to compose a new record).
        self._store.spare(resting_on(identity))

    def changed(self, keys: Sequence[str] | None) -> None:
        self.changes += 1
        if keys is None:
            self._recent.append(None)
            self.clear()
            return
        named = tuple(identifier_of(entry) for entry in keys)
        self._recent.append(named)
        for key in named:
            self._drop(key)

    def _changed_since(self, changes_before: int, keys: tuple[str, str | None]) -> bool:
        """Whether a change announced after the count was `changes_before` may have named
        one of `keys`."""
        missed = self.changes - changes_before
        if missed <= 0:
            return False
        if missed > len(self._recent):
            return True
        return any(
            change is None or any(key in change for key in keys)
            for change in itertools.islice(reversed(self._recent), missed)
        )

    def _drop(self, key: str) -> None:
        record = self._records.pop(key)
        if record is not None:
            self._unlink(key, record)

    def _unlink(self, key: str, record: Record) -> None:
        """`record` left under `key`: it leaves its other key too."""
        other = record.handle if key == record.did else record.did
        if other is not None and self._records.peek(other) is record:
            self._records.pop(other)

    def clear(self) -> None:
        self._records.clear()
        self._rendered.clear()

    @property
    def used_bytes(self) -> int:
        return self._records.bytes + self._rendered.bytes
