"""One resolution of a query's parts (`CachedResolver`'s miss or refresh): each part reused
while fresh, resolved otherwise, and a held copy kept in place of a resolution the policy
does not let replace it (stale-if-error)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from atwhois.resolver import Resolver
from atwhois.resolver.outcome import Outcome
from atwhois.resolver.report import NO_DOCUMENT, DocumentResolution, HandleResolution, unchecked
from atwhois.resolver.syntax import Query

from .entry import Cached, Entry, Part
from .keys import did_key, handle_key
from .policy import Action, Answer, replacement
from .worth import document_answer, handle_answer, held_kind

P = TypeVar("P", HandleResolution, DocumentResolution)


class Upstream(NamedTuple):
    """One upstream step of a resolution: its kind (dns, https, plc, did_web), how long it
    took, and when it answered (the cache's clock; None: it failed)."""

    kind: str
    seconds: float | None
    answered_at: float | None


@dataclass(frozen=True, slots=True)
class Found:
    """A run's resolution done where nothing was held (a worker process: `cache.workers`),
    to be taken into a run where the entries are (`Run.adopt`): the answer's parts, each
    part resolved on the way by key, and the upstream requests it counted."""

    part: HandleResolution
    document: DocumentResolution
    resolved: dict[str, Part]
    handles: dict[str, HandleResolution]
    documents: dict[str, DocumentResolution]
    counted: dict[str, int]


@dataclass
class Run:
    """One resolution of a query's parts: for each part of the answer, the entry it rests
    on (`basis`: reused while fresh, kept in place of a failed resolution, or None for one
    just resolved), and what the upstreams said (`resolved`)."""

    resolver: Resolver
    held: Callable[[str], Awaitable[Cached | None]]  # the entry under a key, while servable
    counters: Counter[str]
    clock: Callable[[], float]
    reuse: bool
    recheck: bool = False  # something says it changed: the zone's own answer too (H-DNS-9)
    started: float = 0.0
    basis: dict[str, Entry | None] = field(default_factory=dict)
    resolved: dict[str, tuple[Part, Answer, Cached | None]] = field(default_factory=dict)
    handles: dict[str, HandleResolution] = field(default_factory=dict)
    documents: dict[str, DocumentResolution] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.started = self.clock()

    async def query(
        self, query: Query, *, handle: bool = True
    ) -> tuple[HandleResolution, DocumentResolution]:
        """The parts of `query`'s answer (`handle`: False, a DID's document alone, its
        handle left unchecked)."""
        if query.kind == "handle":
            part = await self.handle(query.value, with_document=True)
            did = part.answer.did
            return part, await self.document(did) if did else NO_DOCUMENT
        document = await self.document(query.value)
        declared = self.resolver.declared_handle(document) if handle else None
        if declared is None:
            return unchecked(document), document
        if isinstance(declared, HandleResolution):
            return declared, document
        return await self.handle(declared, with_document=False), document

    def found(self, part: HandleResolution, document: DocumentResolution) -> Found:
        """What this run (one that reused nothing) found, to be adopted elsewhere."""
        resolved = {key: new for key, (new, _, _) in self.resolved.items()}
        counted = {k: n for k, n in self.counters.items() if k.startswith("upstream_")}
        return Found(part, document, resolved, self.handles, self.documents, counted)

    async def adopt(self, found: Found) -> tuple[HandleResolution, DocumentResolution]:
        """`found` as if this run (which reuses nothing) had resolved it: each part judged
        against the entry held here now."""
        for key, new in found.resolved.items():
            held = await self.held(key)
            if isinstance(new, HandleResolution):
                held = (
                    held if held is not None and isinstance(held.part, HandleResolution) else None
                )
                answer = handle_answer(new, held)
            else:
                held = (
                    held if held is not None and isinstance(held.part, DocumentResolution) else None
                )
                answer = document_answer(new, held)
            self.resolved[key] = (new, answer, held)
            self.basis[key] = None
        self.handles.update(found.handles)
        self.documents.update(found.documents)
        self.counters.update(found.counted)
        return found.part, found.document

    async def handle(self, handle: str, *, with_document: bool) -> HandleResolution:
        """A handle's resolution; with `with_document`, the document of the DID it names
        is fetched as soon as a method names it (into `documents`)."""
        resolver = self.resolver

        async def resolve() -> HandleResolution:
            self.counters["upstream_handles"] += 1
            if with_document:
                found, _ = await resolver.resolve_handle_with_document(
                    handle, self.document, recheck=self.recheck
                )
                return found
            return await resolver.resolve_handle(handle, recheck=self.recheck)

        key = handle_key(handle)
        self.handles[handle] = await self._part(key, HandleResolution, resolve, handle_answer)
        return self.handles[handle]

    async def document(self, did: str) -> DocumentResolution:
        if did not in self.documents:

            async def resolve() -> DocumentResolution:
                self.counters["upstream_documents"] += 1
                return await self.resolver.resolve_document(did)

            key = did_key(did)
            self.documents[did] = await self._part(
                key, DocumentResolution, resolve, document_answer
            )
        return self.documents[did]

    def upstreams(self, now: float) -> list[Upstream]:
        """The upstream steps this run took (a part reused took none), each as answered at
        `now` or failed."""
        steps = []
        for new, _, _ in self.resolved.values():
            if isinstance(new, HandleResolution):
                evidence = {"dns": new.dns, "https": new.https}
            else:
                evidence = {"plc" if new.did.startswith("did:plc:") else "did_web": new.evidence}
            for kind, step in evidence.items():
                if step.outcome is Outcome.SKIPPED:
                    continue
                seconds = step.ms / 1000 if step.ms is not None else None
                answered = now if step.outcome is not Outcome.FAILED else None
                steps.append(Upstream(kind, seconds, answered))
        return steps

    async def _part(
        self,
        key: str,
        kind: type[P],
        resolve: Callable[[], Awaitable[P]],
        worth: Callable[[P, Cached | None], Answer],
    ) -> P:
        held = await self.held(key)
        if held is not None and not isinstance(held.part, kind):
            held = None
        if self.reuse and held is not None and self.clock() < held.entry.fresh_until:
            self.basis[key] = held.entry
            return held.part  # type: ignore[return-value]
        new = await resolve()
        answer = worth(new, held)
        self.resolved[key] = (new, answer, held)
        if self.reuse and held is not None and replacement(held_kind(held), answer) is Action.KEEP:
            self.basis[key] = held.entry  # stale-if-error: the held copy stands in
            return held.part  # type: ignore[return-value]
        self.basis[key] = None
        return new
