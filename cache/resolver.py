"""`CachedResolver`: the `Resolver`'s lookup, answered from a cache of verified bindings.

Two levels, as Bluesky's Go directory has them: `h:<handle>` holds a handle's DNS/HTTPS
resolution (handle -> DID), `d:<did>` a DID's document resolution (DID -> identity). A
lookup by handle reuses a cached document and a lookup by DID reuses the cached resolution of
its declared handle; the report is composed from the parts by the same pure `compose`, so a
cached answer says what a fresh one would. Only cache entries are ever written here.

Freshness (see `policy`): fresh entries are served as they are; stale ones are served at once
while one background refresh runs (stale-while-revalidate) and keep being served, marked,
when the upstream fails (stale-if-error), up to their maximum age. Transient failures and
cancellations are never cached. Concurrent lookups of one key share one resolution.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import time
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from resolver import Identity, Resolver, Status
from resolver.errors import InvalidInput
from resolver.identity import CacheInfo, Evidence
from resolver.outcome import Outcome
from resolver.report import NO_DOCUMENT, DocumentResolution, HandleResolution, compose
from resolver.resolver import invalid_input, now_iso
from resolver.syntax import Query
from resolver.verdict import Step

from .policy import Kind, Policy
from .stores import Store


@dataclass(frozen=True, slots=True, eq=False)  # hashed by identity: see _decode
class Entry:
    part: dict[str, Any]  # a HandleResolution or DocumentResolution, as JSON
    checked_at: float
    fresh_until: float
    stale_until: float
    refresh_error: str | None = None
    retry_at: float = 0.0  # no background refresh before this (after a failed one)

    def encode(self) -> bytes:
        # Not dataclasses.asdict: it deep-copies the part, the costliest step of a write.
        fields = {name: getattr(self, name) for name in self.__slots__}
        return json.dumps(fields, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Entry:
        return cls(**json.loads(raw))


# A hit decodes nothing twice: the same stored bytes give the same Entry object, and an
# Entry its parts, until these bounded memos forget them.
@lru_cache(maxsize=16384)
def _decode(raw: bytes) -> Entry:
    return Entry.decode(raw)


@lru_cache(maxsize=16384)
def _handle_of(entry: Entry) -> HandleResolution:
    return HandleResolution.from_json(entry.part)


@lru_cache(maxsize=16384)
def _document_of(entry: Entry, dev: bool) -> DocumentResolution:
    return DocumentResolution.from_json(entry.part, dev=dev)


def handle_key(handle: str) -> str:
    return "h:" + handle


def did_key(did: str) -> str:
    return "d:" + did


class CachedResolver:
    def __init__(
        self,
        resolver: Resolver,
        store: Store,
        policy: Policy | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.resolver = resolver
        self.store = store
        self.policy = policy or Policy()
        self.clock = clock
        self.counters: Counter[str] = Counter()
        self._inflight: dict[str, asyncio.Task[Identity]] = {}
        self._refreshing: dict[str, asyncio.Task[Identity]] = {}
        self.upstream_seen: dict[str, float] = {}  # upstream kind -> when it last answered
        # (upstream kind, seconds) of resolutions not yet read by a metrics collector
        self.upstream_latency: deque[tuple[str, float]] = deque(maxlen=100_000)

    async def __aenter__(self) -> CachedResolver:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for task in (*self._inflight.values(), *self._refreshing.values()):
            task.cancel()
        await asyncio.gather(*self._refreshing.values(), return_exceptions=True)
        await self.resolver.aclose()
        await self.store.close()

    # --- the API --------------------------------------------------------------------

    async def lookup(self, identifier: str, *, timeout: float | None = None) -> Identity:
        """Like `Resolver.lookup`, plus `identity.cache`. `timeout` bounds this caller's
        wait only: the shared resolution goes on for the others, and its result is cached."""
        try:
            query = self.resolver.parse(identifier)
        except InvalidInput as err:
            return invalid_input(identifier, err, now_iso())
        cached = await self._from_cache(query)
        if cached is not None:
            identity, stale, retry_at = cached
            self.counters["stale" if stale else "fresh"] += 1
            if stale and retry_at <= self.clock():
                self._refresh_in_background(query)
            return identity
        self.counters["miss"] += 1
        return await self._shared(query, timeout)

    async def revalidate(self, identifier: str, *, timeout: float | None = None) -> Identity:
        """Resolve afresh, whatever is cached (an audit must not be answered from a stale
        entry), and update the cache with the result. Concurrent calls share one
        resolution; a transient failure leaves the old entries, marked, as always."""
        try:
            query = self.resolver.parse(identifier)
        except InvalidInput as err:
            return invalid_input(identifier, err, now_iso())
        self.counters["revalidations"] += 1
        return await self._shared(query, timeout, reuse=False)

    async def refresh(self, identifier: str) -> Identity:
        """Purge both levels of an identity, then resolve it again."""
        await self.purge(identifier)
        return await self.lookup(identifier)

    async def purge(self, identifier: str) -> list[str]:
        """Forget an identity at both levels (a handle change must not hide behind a cached
        document, nor a document change behind a cached handle). Returns the keys purged
        (none when the identifier itself was not cached)."""
        try:
            query = self.resolver.parse(identifier)
        except InvalidInput:
            return []
        key = self._key(query)
        entry = await self._entry(key)
        if entry is None:
            await self.store.delete([key])  # an expired leftover, if any
            return []
        keys = [key]
        if query.kind == "handle":
            did = _handle_of(entry).answer.did
            keys += [did_key(did)] if did else []
        else:
            document = self._document(entry)
            declared = document.data.declared_handle if document.data else None
            keys += [handle_key(declared)] if declared else []
        await self.store.delete(keys)
        self.counters["purged"] += len(keys)
        return keys

    @property
    def inflight(self) -> int:
        """Resolutions under way: shared lookups and background refreshes."""
        return len(self._inflight) + len(self._refreshing)

    async def stats(self) -> dict[str, Any]:
        return {
            "store": self.store.name,
            "entries": await self.store.count(),
            "inflight": len(self._inflight),
            "refreshing": len(self._refreshing),
            **dict(self.counters),
        }

    # --- reading --------------------------------------------------------------------

    def _key(self, query: Query) -> str:
        return handle_key(query.value) if query.kind == "handle" else did_key(query.value)

    async def _entry(self, key: str) -> Entry | None:
        raw = await self.store.get(key)
        if raw is None:
            return None
        try:
            entry = _decode(raw)
        except (ValueError, TypeError, KeyError):
            await self.store.delete([key])  # unreadable: drop it, resolve again
            return None
        return entry if self.clock() < entry.stale_until else None

    def _document(self, entry: Entry) -> DocumentResolution:
        return _document_of(entry, self.resolver.config.dev)

    async def _from_cache(self, query: Query) -> tuple[Identity, bool, float] | None:
        """The report composed from cached parts, whether any part is stale, and when a
        background refresh may next run; None when a part is missing."""
        entries: list[Entry] = []
        if query.kind == "handle":
            handle_entry = await self._entry(handle_key(query.value))
            if handle_entry is None:
                return None
            entries.append(handle_entry)
            handle = _handle_of(handle_entry)
            document = NO_DOCUMENT
            if handle.answer.did is not None:
                document_entry = await self._entry(did_key(handle.answer.did))
                if document_entry is None:
                    return None
                entries.append(document_entry)
                document = self._document(document_entry)
        else:
            document_entry = await self._entry(did_key(query.value))
            if document_entry is None:
                return None
            entries.append(document_entry)
            document = self._document(document_entry)
            declared = self.resolver.declared_handle(document)
            if isinstance(declared, HandleResolution):
                handle = declared
            else:
                handle_entry = await self._entry(handle_key(declared))
                if handle_entry is None:
                    return None
                entries.append(handle_entry)
                handle = _handle_of(handle_entry)
        now = self.clock()
        stale = any(now >= e.fresh_until for e in entries)
        errors = [e.refresh_error for e in entries if e.refresh_error]
        oldest = min(e.checked_at for e in entries)
        identity = compose(query, _iso(oldest), handle, document)
        info = CacheInfo(
            True,
            now - oldest,
            "stale" if stale else "fresh",
            errors[0] if errors else None,
            fresh_for_s=max(0.0, min(e.fresh_until for e in entries) - now),
            servable_for_s=min(e.stale_until for e in entries) - now,
        )
        if errors:
            identity = dataclasses.replace(
                identity, warnings=(*identity.warnings, "stale_upstream_failed")
            )
        return dataclasses.replace(identity, cache=info), stale, max(e.retry_at for e in entries)

    # --- resolving ------------------------------------------------------------------

    async def _shared(self, query: Query, timeout: float | None, *, reuse: bool = True) -> Identity:
        key = ("" if reuse else "fresh:") + self._key(query)
        task = self._inflight.get(key)
        if task is None:
            task = self._start(self._inflight, key, self._resolve_and_store(query, reuse=reuse))
        else:
            self.counters["coalesced"] += 1
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(task)
        except TimeoutError:
            return Identity(
                query=query.text,
                status=Status.UNAVAILABLE,
                checked_at=now_iso(),
                error=f"no answer within the caller's {timeout}s deadline",
            )

    def _refresh_in_background(self, query: Query) -> None:
        key = self._key(query)
        if key not in self._refreshing:
            self.counters["refreshes"] += 1
            self._start(self._refreshing, key, self._resolve_and_store(query, reuse=False))

    def _start(
        self,
        tasks: dict[str, asyncio.Task[Identity]],
        key: str,
        work: Coroutine[Any, Any, Identity],
    ) -> asyncio.Task[Identity]:
        task = asyncio.create_task(work)
        tasks[key] = task

        def done(finished: asyncio.Task[Identity]) -> None:
            tasks.pop(key, None)
            if not finished.cancelled():
                finished.exception()  # retrieved: a waiter (if any) re-raises it

        task.add_done_callback(done)
        return task

    async def _resolve_and_store(self, query: Query, *, reuse: bool) -> Identity:
        """Resolve what is missing (everything, when `reuse` is off), compose, and store
        the parts resolved now. Runs as its own task: a caller's cancellation never
        reaches it, so it can never be cached."""
        checked_at = now_iso()
        resolved_documents: dict[str, DocumentResolution] = {}

        async def document_for(did: str) -> DocumentResolution:
            if reuse and (entry := await self._entry(did_key(did))) is not None:
                return self._document(entry)
            self.counters["upstream_documents"] += 1
            resolved_documents[did] = await self.resolver.resolve_document(did)
            return resolved_documents[did]

        resolved_handle: HandleResolution | None = None
        if query.kind == "handle":
            self.counters["upstream_handles"] += 1
            handle, document = await self.resolver.resolve_handle_with_document(
                query.value, document_for
            )
            resolved_handle = handle
        else:
            document = await document_for(query.value)
            declared = self.resolver.declared_handle(document)
            if isinstance(declared, HandleResolution):
                handle = declared
            elif reuse and (entry := await self._entry(handle_key(declared))) is not None:
                handle = _handle_of(entry)
            else:
                self.counters["upstream_handles"] += 1
                handle = resolved_handle = await self.resolver.resolve_handle(declared)
        identity = compose(query, checked_at, handle, document)
        self._note_upstreams(resolved_handle, resolved_documents.values())
        written: list[Entry | None] = []
        if resolved_handle is not None and resolved_handle.handle is not None:
            written.append(
                await self._store(
                    handle_key(resolved_handle.handle),
                    resolved_handle.to_json(),
                    _handle_kind(resolved_handle, identity.status),
                )
            )
        for did, resolved in resolved_documents.items():
            written.append(
                await self._store(
                    did_key(did), resolved.to_json(), _document_kind(resolved, identity.status)
                )
            )
        now = self.clock()
        kept = [e for e in written if e is not None]
        cacheable = bool(kept) and None not in written
        info = CacheInfo(
            False,
            0.0,
            "miss",
            fresh_for_s=min(e.fresh_until for e in kept) - now if cacheable else 0.0,
            servable_for_s=min(e.stale_until for e in kept) - now if cacheable else 0.0,
        )
        return dataclasses.replace(identity, cache=info)

    def _note_upstreams(
        self, handle: HandleResolution | None, documents: Iterable[DocumentResolution]
    ) -> None:
        """When each kind of upstream last answered, and how long it took (for /_health
        and /metrics)."""
        now = self.clock()
        evidence = {
            "plc" if d.did.startswith("did:plc:") else "did_web": d.evidence for d in documents
        }
        if handle is not None:
            evidence.update(dns=handle.dns, https=handle.https)
        for kind, step in evidence.items():
            if step.outcome is Outcome.SKIPPED:
                continue
            if step.outcome is not Outcome.FAILED:
                self.upstream_seen[kind] = now
            if step.ms is not None:
                self.upstream_latency.append((kind, step.ms / 1000))

    async def _store(self, key: str, part: dict[str, Any], kind: Kind | str) -> Entry | None:
        """Write a part; a transient failure only marks the entry it could not replace.
        Returns what was written (None for a transient failure)."""
        now = self.clock()
        if isinstance(kind, Kind):
            lifetime = self.policy.lifetime(kind)
            entry = Entry(part, now, now + lifetime.fresh, now + lifetime.max_age)
            await self.store.put(key, entry.encode(), entry.stale_until)
            return entry
        self.counters["upstream_failures"] += 1
        old = await self._entry(key)
        if old is not None:  # stale-if-error: keep serving it, and say why
            marked = dataclasses.replace(
                old, refresh_error=kind, retry_at=now + self.policy.retry_after
            )
            await self.store.put(key, marked.encode(), old.stale_until)
        return None


def _iso(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return moment.isoformat(timespec="milliseconds")


def _handle_kind(handle: HandleResolution, status: Status) -> Kind | str:
    """What a handle resolution is worth caching as; a string is a transient failure's
    message (never cached)."""
    match handle.answer.step:
        case Step.OK:
            return Kind.VERIFIED if status is Status.VERIFIED else Kind.UNVERIFIED
        case Step.FAILED:
            return _first_error(handle.dns, handle.https)
        case _:
            return Kind.ABSENT


def _document_kind(document: DocumentResolution, status: Status) -> Kind | str:
    if document.transient:
        return _first_error(document.evidence, document.plc)
    if document.evidence.outcome is Outcome.OK and document.plc.outcome is not Outcome.INVALID:
        return Kind.VERIFIED if status is Status.VERIFIED else Kind.UNVERIFIED
    return Kind.ABSENT


def _first_error(*evidence: Evidence) -> str:
    failed = [e.error for e in evidence if e.outcome is Outcome.FAILED and e.error]
    return failed[0] if failed else "transient failure"
