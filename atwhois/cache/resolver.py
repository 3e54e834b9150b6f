"""`CachedResolver`: the `Resolver`'s lookup, answered from a cache of verified bindings.

Two levels, as Bluesky's Go directory has them: `h:<handle>` holds a handle's DNS/HTTPS
resolution (handle -> DID), `d:<did>` a DID's document resolution (DID -> identity). A
lookup by handle reuses a cached document and a lookup by DID reuses the cached resolution of
its declared handle; the report is composed from the parts by the same pure `compose`, so a
cached answer says what a fresh one would. Only cache entries are ever written here.

What a cached answer means (the README says it too):
- An answer is as fresh as the stalest part it was composed from: its fresh window and its
  maximum age are the smallest of its parts'. A part's windows start when the resolution
  that produced it started.
- A lookup reuses a part only while it is fresh. When every part is present but one is
  stale, the answer is served at once, marked stale, while one background refresh runs;
  when a part is missing, the missing and the stale parts are resolved again.
- A refresh (`refresh`, the background one, an audit's) resolves every part afresh, and
  replaces a part only once the resolution completed and only as `policy.replacement`
  allows: a confirmed answer replaces anything; a transient failure or a broken answer
  never replaces a good one: the old entry stays, marked with the failure, and is served
  stale up to its maximum age.
- Transient failures and cancellations are never cached. Concurrent lookups of one key
  share one resolution; a caller's deadline bounds only its own wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from atwhois.foundation import defaults
from atwhois.resolver import Config, Identity, Resolver, Status
from atwhois.resolver.errors import InvalidInput
from atwhois.resolver.identity import CacheInfo, invalid_input, now_iso
from atwhois.resolver.report import (
    NO_DOCUMENT,
    DocumentResolution,
    HandleResolution,
    compose,
    unchecked,
)
from atwhois.resolver.syntax import Query

from . import claims
from .accounts import AccountStates, Mark
from .claims import Claim
from .entry import DECODERS, Cached, Entry
from .freshness import cache_info, iso, with_cache
from .histories import Histories
from .keys import did_key, handle_key
from .policy import Action, Answer, Policy, replacement
from .run import Run, Upstream
from .stores import Store, StoreUnavailable, in_memory
from .worth import failure_of, held_kind, lifetime_kind

if TYPE_CHECKING:  # the daemon's: a lookup from the command line loads no process pool
    from .workers import Elsewhere

P = TypeVar("P", HandleResolution, DocumentResolution)


class CachedResolver:
    """A `Directory` over a `Resolver`: what it verified, kept in `store` as `policy` says.
    Its other methods are the daemon's (claims, account marks, what it holds)."""

    # the library's API (the documentation's reference shows these)
    PUBLIC = ("lookup", "refresh", "document", "check_pds", "purge", "stats", "aclose")

    def __init__(
        self,
        resolver: Resolver,
        store: Store,
        policy: Policy | None = None,
        *,
        clock: Callable[[], float] = time.time,
        max_resolutions: int = defaults.MAX_RESOLUTIONS,
        accounts: AccountStates | None = None,
    ) -> None:
        self.resolver = resolver
        self.store = in_memory(store, clock=clock)
        # Each resolution holds TLS connections and a stranger's document (up to 64 KiB,
        # several times that while it is read): a flood of misses waits for a slot rather
        # than growing memory without end.
        self._slots = asyncio.Semaphore(max_resolutions)
        self.policy = policy or Policy()
        self.clock = clock
        self._decode = DECODERS[resolver.config.dev]
        self._counters: Counter[str] = Counter()
        self._inflight: dict[str, asyncio.Task[Identity]] = {}
        self._refreshing: dict[str, asyncio.Task[Identity]] = {}
        # shared with the daemon's other resolvers (`accounts`): what the event streams say
        self.accounts = accounts or AccountStates()
        self._observers: list[Callable[[Upstream], None]] = []  # told of each upstream step
        self.claims: dict[str, Claim] = {}  # by DID key: changes a source said, not seen yet
        self.histories = Histories(resolver.audit_log, clock=clock)  # for the pages
        # Where the resolutions that reuse nothing (refreshes, re-verifications) are done:
        # worker processes (`cache.workers`), off the loop that answers; None: here.
        self.elsewhere: Elsewhere | None = None

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

    async def lookup(self, identifier: str, *, timeout: float | None = None) -> Identity:
        """Like `Resolver.lookup`, plus `identity.cache`. `timeout` bounds this caller's
        wait only: the shared resolution goes on for the others, and its result is cached."""
        try:
            query = self.parse(identifier)
        except InvalidInput as err:
            return invalid_input(identifier, err, now_iso())
        cached = await self._from_cache(query)
        if cached is not None:
            identity, stale, retry_at = cached  # stale: or revalidating
            self._counters["stale" if stale else "fresh"] += 1
            if stale and retry_at <= self.clock():
                self._refresh_in_background(query)
            return self._with_account(identity)
        self._counters["miss"] += 1
        return self._with_account(await self._shared(query, timeout, reuse=True))

    async def refresh(self, identifier: str, *, timeout: float | None = None) -> Identity:
        """Resolve every part afresh, whatever is cached (a refresh request, an audit; the
        handle's zone asked too, H-DNS-9), and update the cache as `policy.replacement`
        allows. The report is the new resolution's: a transient failure is returned as
        such, while the old entries keep serving lookups, marked. Calls share one."""
        try:
            query = self.parse(identifier)
        except InvalidInput as err:
            return invalid_input(identifier, err, now_iso())
        self._counters["refreshes_requested"] += 1
        return self._with_account(await self._shared(query, timeout, reuse=False))

    async def document(self, did: str, *, fresh: bool = False) -> Identity:
        """The DID's document alone, its handle not checked (`report.unchecked`): a token's
        issuer (SA-ISS-2), which must not wait on the handle's hosts. Kept and reused as a
        lookup's document part is; `fresh`: resolved afresh, whatever is kept."""
        try:
            query = self.resolver.parse_did(did)
        except InvalidInput as err:
            return invalid_input(did, err, now_iso())
        kept = None if fresh else await self._cached(did_key(query.value))
        if (
            kept
            and isinstance(kept.part, DocumentResolution)
            and self.clock() < kept.entry.fresh_until
        ):
            identity = compose(query, iso(kept.entry.checked_at), unchecked(kept.part), kept.part)
            info = cache_info([kept.entry], self.clock(), resolved_now=False)
            return self._with_account(with_cache(identity, info))
        return self._with_account(await self._shared(query, None, reuse=not fresh, handle=False))

    @property
    def config(self) -> Config:
        return self.resolver.config

    def parse(self, identifier: str) -> Query:
        """Syntax only, as the resolver reads it (`Resolver.parse`): raises `InvalidInput`."""
        return self.resolver.parse(identifier)

    async def check_pds(self, identity: Identity) -> Identity:
        """The PDS check, done now (what a PDS says of an account is not kept here)."""
        return await self.resolver.check_pds(identity)

    def _with_account(self, identity: Identity) -> Identity:
        """The answer as the account's status makes it (`accounts.STATUSES`)."""
        mark = self.accounts.get(identity.did) if identity.did else None
        if mark is None or identity.status in (Status.INVALID_INPUT, Status.UNAVAILABLE):
            return identity
        if mark.serves:
            return dataclasses.replace(identity, warnings=(*identity.warnings, mark.warning))
        return dataclasses.replace(
            identity,
            status=Status.DID_DEACTIVATED,
            error=f"{identity.did}: {mark.reason}; an event stream says so",
        )

    async def mark_account(self, did: str, mark: Mark | None) -> bool:
        """An event stream says how `did`'s account is (None: plainly active): every answer
        about the DID says so from now on, here and in the daemon's other processes (their
        kept answers are dropped), and after a restart. Whether it changed."""
        if not await self.accounts.mark(self.store, did, mark, time.time()):
            return False
        self.store.announce([did_key(did)])  # answers about it change
        return True

    async def claim(self, did: str, what: str, window: float) -> bool:
        """A source says `did`'s document changed (`what`: the event, as reports name it):
        the answer held is stale from now on, and for `window` seconds a resolution that
        does not show the change is stored stale too (`claims`). False: the DID is not
        held. The claim's re-checks are the caller's (`refresh`; `claim_open`)."""
        key = did_key(did)
        cached = await self._cached(key)
        if cached is None or not isinstance(cached.part, DocumentResolution):
            return False
        now = self.clock()
        claim = Claim(what, now, now + window, claims.seen(cached.part))
        self.claims[key] = claim
        entry = claims.marked(claim, Entry.decode(cached.raw, key))
        await self.store.put(key, entry.encode(key), entry.stale_until)
        return True

    def claim_open(self, did: str) -> bool:
        """Whether a claim about `did` waits for its change still (within its window)."""
        return claims.open_claim(self.claims, did_key(did), self.clock()) is not None

    def drop_claim(self, did: str) -> None:
        """What the source says from now on is taken as it is."""
        self.claims.pop(did_key(did), None)

    async def restore_accounts(self) -> None:
        """The account states an earlier run kept in the store."""
        await self.accounts.load(self.store, time.time())

    async def purge(self, identifier: str) -> list[str]:
        """Forget an identity at both levels (a handle change must not hide behind a cached
        document, nor a document change behind a cached handle). Returns the keys purged
        (none when the identifier itself was not cached). Raises `StoreUnavailable` when
        the shared store did not take it."""
        try:
            query = self.parse(identifier)
        except InvalidInput:
            return []
        key = self._key(query)
        cached = await self._cached(key)
        if cached is None:
            await self.store.delete([key])  # an expired leftover, if any
            return []
        keys = [key]
        part = cached.part
        if isinstance(part, HandleResolution):
            keys += [did_key(part.answer.did)] if part.answer.did else []
        else:
            declared = part.data.declared_handle if part.data else None
            keys += [handle_key(declared)] if declared else []
        await self.store.delete(keys)
        self._counters["purged"] += len(keys)
        return keys

    def counts(self) -> dict[str, int]:
        """What the lookups found (fresh, stale, miss, coalesced), and what was resolved."""
        return dict(self._counters)

    def observe_upstreams(self, observer: Callable[[Upstream], None]) -> None:
        """Tell `observer` of every upstream step from now on, as it completes."""
        self._observers.append(observer)

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
            **self._counters,
        }

    # --- reading --------------------------------------------------------------------

    async def held(self, did: str) -> tuple[bool, str | None]:
        """Whether this DID's document is cached, and the handle it declares there: what an
        event about the DID may have made untrue (nothing is resolved to find out)."""
        cached = await self._cached(did_key(did))
        if cached is None or not isinstance(cached.part, DocumentResolution):
            return False, None
        data = cached.part.data
        return True, data.declared_handle if data else None

    async def checked_at(self, did: str) -> float | None:
        """When the document held of `did` was resolved (None: not held): another daemon
        on the shared store may have done it."""
        cached = await self._cached(did_key(did))
        return cached.entry.checked_at if cached is not None else None

    async def hosted_at(self, did: str) -> str | None:
        """The PDS the cached document of this DID names (None: not cached, or none named):
        whose event stream speaks for its account."""
        cached = await self._cached(did_key(did))
        if cached is None or not isinstance(cached.part, DocumentResolution):
            return None
        data = cached.part.data
        return data.pds if data else None

    def _key(self, query: Query) -> str:
        return handle_key(query.value) if query.kind == "handle" else did_key(query.value)

    async def _cached(self, key: str) -> Cached | None:
        """The entry under `key` while it may be served at all (within its maximum age)."""
        try:
            cached: Cached | None = await self.store.decoded(key, self._decode)
        except (ValueError, TypeError, KeyError):
            with contextlib.suppress(StoreUnavailable):
                await self.store.delete([key])  # unreadable: drop it, resolve again
            return None
        if cached is None or self.clock() >= cached.entry.stale_until:
            return None
        return cached

    async def _from_cache(self, query: Query) -> tuple[Identity, bool, float] | None:
        """The report composed from cached parts, whether any part is stale, and when a
        background refresh may next run; None when a part is missing."""
        entries: list[Entry] = []

        async def part(key: str, kind: type[P]) -> P | None:
            cached = await self._cached(key)
            if cached is None or not isinstance(cached.part, kind):
                return None
            entries.append(cached.entry)
            return cached.part

        handle: HandleResolution | None
        document: DocumentResolution | None = NO_DOCUMENT
        if query.kind == "handle":
            handle = await part(handle_key(query.value), HandleResolution)
            if handle is not None and handle.answer.did is not None:
                document = await part(did_key(handle.answer.did), DocumentResolution)
        else:
            document = await part(did_key(query.value), DocumentResolution)
            if document is None:
                return None
            declared = self.resolver.declared_handle(document)
            if isinstance(declared, HandleResolution):
                handle = declared
            else:
                handle = await part(handle_key(declared), HandleResolution)
        if handle is None or document is None:
            return None
        info = cache_info(entries, self.clock(), resolved_now=False)
        stale = info.state != "fresh"
        identity = compose(query, iso(min(e.checked_at for e in entries)), handle, document)
        return with_cache(identity, info), stale, max(e.retry_at for e in entries)

    # --- resolving ------------------------------------------------------------------

    async def _shared(
        self, query: Query, timeout: float | None, *, reuse: bool, handle: bool = True
    ) -> Identity:
        """One resolution for every caller asking the same at once (`handle`: False for a
        DID's document alone, which must not wait on a lookup's handle)."""
        key = ("" if reuse else "fresh:") + ("" if handle else "document:") + self._key(query)
        task = self._inflight.get(key)
        if task is None:
            work = self._resolve_and_store(query, reuse=reuse, recheck=not reuse, handle=handle)
            task = self._start(self._inflight, key, work)
        else:
            self._counters["coalesced"] += 1
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

    async def settled(self) -> None:
        """Until the background refreshes (behind stale answers served) have ended."""
        while self._refreshing:
            await asyncio.gather(*self._refreshing.values(), return_exceptions=True)

    def _refresh_in_background(self, query: Query) -> None:
        key = self._key(query)
        if key not in self._refreshing:
            self._counters["refreshes"] += 1
            work = self._resolve_and_store(query, reuse=False, recheck=False)  # nothing said
            self._start(self._refreshing, key, work)

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

    async def _resolve_and_store(
        self, query: Query, *, reuse: bool, recheck: bool, handle: bool = True
    ) -> Identity:
        """Resolve the parts (`reuse`: those missing or stale; `recheck`: the zone asked too,
        H-DNS-9; `handle`: False, a DID's document alone), compose, store what the table
        allows; as its own task: never cancelled."""
        async with self._slots:
            run = Run(self.resolver, self._cached, self._counters, self.clock, reuse, recheck)
            if not reuse and self.elsewhere is not None:  # nothing reused: a worker's work
                part, document = await self.elsewhere.query(run, query, handle=handle)
            else:
                part, document = await run.query(query, handle=handle)
        keys = [handle_key(part.handle)] if part.handle and part.handle in run.handles else []
        keys += [did_key(document.did)] if document.did in run.documents else []
        identity = compose(query, "", part, document)
        basis = await self._store_parts(run, keys, identity.status)
        kept = [entry for entry in basis if entry is not None]
        checked = min([e.checked_at for e in kept], default=run.started)
        identity = dataclasses.replace(identity, checked_at=iso(checked))
        if not keys or len(kept) < len(basis):  # it rests on a resolution not cached
            return dataclasses.replace(identity, cache=CacheInfo(False, 0.0, "miss"))
        return with_cache(identity, cache_info(kept, self.clock(), resolved_now=True))

    async def _store_parts(self, run: Run, keys: list[str], status: Status) -> list[Entry | None]:
        """Write the parts resolved now as `policy.replacement` says; the entry each part of
        the answer rests on (None: a resolution that was not stored)."""
        self._note_upstreams(run)
        now = self.clock()
        for key, (new, answer, held) in run.resolved.items():
            if answer is not Answer.CONFIRMED:
                self._counters["upstream_failures"] += 1
            if key not in keys:
                continue  # resolved on the way, not part of the answer: not worth keeping
            match replacement(held_kind(held), answer):
                case Action.STORE:
                    life, start = self.policy.lifetime(lifetime_kind(new, status)), run.started
                    body = new.body if isinstance(new, DocumentResolution) else None
                    entry = Entry(
                        new.to_json(), start, start + life.fresh, start + life.max_age, body=body
                    )
                    entry = claims.as_claimed(self.claims, key, new, entry, now, held)
                    await self.store.put(key, entry.encode(key), entry.stale_until)
                    run.basis[key] = entry
                case Action.KEEP:
                    assert held is not None
                    marked = held.marked(key, failure_of(new), now + self.policy.retry_after)
                    await self.store.put(key, marked.encode(key), marked.stale_until)
                    if run.basis[key] is not None:  # the held copy stood in for it
                        run.basis[key] = marked
        return [run.basis[key] for key in keys]

    def _note_upstreams(self, run: Run) -> None:
        """Each upstream step of `run` to the observers (the daemon's /_health and /metrics:
        when each kind of upstream last answered, and how long it took)."""
        for step in run.upstreams(self.clock()) if self._observers else ():
            for observer in self._observers:
                observer(step)
