"""The `Identity` report: one immutable value carrying the verdict, the data and the evidence.

Its JSON form (`to_json()`) is the contract shared by `atwhois lookup --json`, the HTTP
service, audits and tests.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from atwhois.foundation import iso_time

from .errors import InvalidInput, MalformedAnswer, ResolutionError
from .outcome import Outcome, Status
from .syntax import INVALID_HANDLE


@dataclass(frozen=True, slots=True)
class Evidence:
    """What one method (dns, https, did_doc) did: its outcome, the DIDs it saw, why it
    failed, how long it took, and where it asked."""

    outcome: Outcome
    dids: tuple[str, ...] = ()
    error: str | None = None
    error_kind: str | None = None  # the error class, e.g. "UpstreamTimeout"
    ms: float | None = None
    source: str | None = None  # the name queried or the URL fetched
    via: str | None = None  # what answered for the source: an atwhois PLC mirror says so
    dnssec: DnssecCheck | None = None  # the DNS method with DNSSEC validation on (S-SEC-*)

    @classmethod
    def skipped(cls, why: str) -> Evidence:
        return cls(Outcome.SKIPPED, error=why)

    @classmethod
    def failure(cls, err: ResolutionError, ms: float, source: str | None) -> Evidence:
        return cls(err.outcome, (), str(err), type(err).__name__, round(ms, 2), source)

    @property
    def did(self) -> str | None:
        return self.dids[0] if self.outcome is Outcome.OK and self.dids else None

    @property
    def stale_resolver(self) -> str | None:
        """What the recursive resolver said when the zone's own answer differed (H-DNS-10;
        only `ZoneOverruled` evidence has it)."""
        return None

    @property
    def confirmed(self) -> bool:
        """Whether this answer says something about the identity: an answer, a confirmed
        absence, invalid data the other side really serves; not a transient failure, nor a
        broken answer (`MalformedAnswer`). Only a confirmed answer may replace a good one."""
        return self.outcome is not Outcome.FAILED and self.error_kind != MalformedAnswer.__name__

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Evidence:
        return cls(
            Outcome(data["outcome"]),
            tuple(data["dids"]),
            data["error"],
            data["error_kind"],
            data["ms"],
            data["source"],
            data.get("via"),
            DnssecCheck.from_json(data["dnssec"]) if data.get("dnssec") else None,
        ).overruling(data.get("stale_resolver"))

    def overruling(self, stale_resolver: str | None) -> Evidence:
        """This evidence, the zone's answer against `stale_resolver`, what the recursive
        resolver said (None: it did not disagree, the evidence is as it is)."""
        if stale_resolver is None:
            return self
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(Evidence)}
        return ZoneOverruled(**fields, said_by_resolver=stale_resolver)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "outcome": str(self.outcome),
            "dids": list(self.dids),
            "error": self.error,
            "error_kind": self.error_kind,
            "ms": self.ms,
            "source": self.source,
            "via": self.via,
        }
        if self.dnssec is not None:
            out["dnssec"] = self.dnssec.to_json()
        if self.stale_resolver is not None:
            out["stale_resolver"] = self.stale_resolver
        return out


@dataclass(frozen=True, slots=True)
class ZoneOverruled(Evidence):
    """The DNS method's evidence when a re-check found the zone's own nameservers answering
    otherwise than the recursive resolver (H-DNS-10), with what the resolver said. A class
    of its own: a slot on every `Evidence` cost each cached identity 70 B (the evidence
    its kept parts hold: `python -m bench serve`, 980 -> 1,048 B)."""

    said_by_resolver: str = ""

    @property
    def stale_resolver(self) -> str | None:
        return self.said_by_resolver


SECURE, INSECURE, BOGUS, INDETERMINATE = "secure", "insecure", "bogus", "indeterminate"


@dataclass(frozen=True, slots=True)
class DnssecCheck:
    """Whether DNSSEC vouches for a DNS answer (`resolver.dnssec_chain`), in RFC 4033's terms:
    SECURE (a chain of signatures from a trust anchor), INSECURE (proven unsigned below a
    signed parent), BOGUS (signatures or proofs that fail), INDETERMINATE (no trust anchor
    above the name, or a resolver that strips DNSSEC records)."""

    state: str
    zone: str | None = None  # secure: the zone whose key signed; insecure: the unsigned cut
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "zone": self.zone, "reason": self.reason}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DnssecCheck:
        return cls(data["state"], data.get("zone"), data.get("reason"))


SKIPPED = Evidence(Outcome.SKIPPED)


HOSTED, INACTIVE, NOT_HOSTED, UNREACHABLE, INVALID = (
    "hosted",
    "inactive",
    "not_hosted",
    "unreachable",
    "invalid",
)


@dataclass(frozen=True, slots=True)
class PdsCheck:
    """What the PDS a document names said of the account, and the evidence (`resolver.pds`)."""

    outcome: str  # HOSTED, INACTIVE, NOT_HOSTED (confirmed), UNREACHABLE, INVALID
    pds: str
    status: str | None = None  # the account's status at the PDS ("active", "deactivated", …)
    rev: str | None = None  # the latest commit's revision
    commit: str | None = None  # its CID
    key: str | None = None  # the document's key that verified it
    signed_with: str | None = None  # an earlier key of the DID that verified it instead
    error: str | None = None
    ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PdsCheck:
        return cls(**{name: data.get(name) for name in cls.__slots__})  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class CacheInfo:
    """Added by the cache: whether the answer came from it, how old it is, and whether it is
    past its fresh window (served while a refresh runs, or while the upstream fails)."""

    cached: bool
    age_s: float
    state: str  # "fresh", "stale", "revalidating" or "miss"
    refresh_error: str | None = None  # the upstream failure a stale answer is standing in for
    fresh_for_s: float = 0.0  # how much longer it is fresh (0: stale, or not cacheable)
    servable_for_s: float = 0.0  # how much longer it may be served at all
    # "revalidating": a source said the DID changed, and the answer is re-checked until the
    # change shows (the claim); `changed_by`: the claim whose change this answer shows
    revalidating: str | None = None
    changed_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "cached": self.cached,
            "age_s": round(self.age_s, 3),
            "state": self.state,
            "refresh_error": self.refresh_error,
            "fresh_for_s": round(self.fresh_for_s),
            "servable_for_s": round(self.servable_for_s),
            "revalidating": self.revalidating,
            "changed_by": self.changed_by,
        }


@dataclass(frozen=True, slots=True)
class LogSummary:
    """A replayed did:plc log in brief (`resolver.plc.summary.summarize`)."""

    operations: int
    created: str | None  # the genesis operation's createdAt
    last_change: str | None  # createdAt of the last operation in force
    last_changes: tuple[str, ...]  # what it changed
    changes: tuple[tuple[str, int], ...]  # kinds of change since creation, with their counts
    tombstoned: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "operations": self.operations,
            "created": self.created,
            "last_change": self.last_change,
            "last_changes": list(self.last_changes),
            "changes": dict(self.changes),
            "tombstoned": self.tombstoned,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LogSummary:
        return cls(
            data["operations"],
            data["created"],
            data["last_change"],
            tuple(data["last_changes"]),
            tuple(data["changes"].items()),
            data["tombstoned"],
        )


@dataclass(frozen=True, slots=True)
class Identity:
    """Who an identifier is, whether the handle <-> DID binding is verified, and why."""

    query: str
    status: Status
    did: str | None = None
    declared_handle: str | None = None
    pds: str | None = None
    signing_key: str | None = None  # did:key
    also_known_as: tuple[str, ...] = ()
    dns: Evidence = SKIPPED
    https: Evidence = SKIPPED
    did_doc: Evidence = SKIPPED
    plc_log: Evidence = SKIPPED  # with --verify-plc: the audit log replayed
    plc_findings: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    error: str | None = None  # the reason, when not verified
    checked_at: str = ""
    handle_queried: str | None = None  # the handle whose resolution the evidence shows
    did_document_json: bytes | None = field(default=None, repr=False)  # as served, UTF-8
    cache: CacheInfo | None = None
    services: tuple[tuple[str, str, str], ...] = ()  # (id, type, endpoint) from the document
    rotation_keys: tuple[str, ...] = ()  # did:plc, from the replayed log (with --verify-plc)
    history: LogSummary | None = None  # did:plc, the replayed log in brief (--verify-plc)
    pds_check: PdsCheck | None = None  # with --check-pds: what the PDS said of the account

    @property
    def did_document(self) -> dict[str, Any] | None:
        """The DID document as served, decoded (anew on each call)."""
        return json.loads(self.did_document_json) if self.did_document_json is not None else None

    @property
    def verified(self) -> bool:
        return self.status is Status.VERIFIED

    @property
    def servable_document(self) -> bytes | None:
        """The DID document as served, when the DID resolved and nothing contradicts it (a
        log that does not prove it, an account its PDS's event stream says is not active):
        what the daemon answers for the DID, and what a token's signature is checked by."""
        if (
            self.status not in (Status.PLC_LOG_INVALID, Status.DID_DEACTIVATED)
            and self.did_doc.outcome is Outcome.OK
        ):
            return self.did_document_json
        return None

    @property
    def _log_replayed(self) -> bool:
        """Whether the did:plc log was read and replayed (`--verify-plc`): only then does the
        report know the rotation keys."""
        return self.plc_log.outcome is not Outcome.SKIPPED

    @property
    def handle(self) -> str:
        """The verified handle, or `handle.invalid` (H-INV-2)."""
        if self.verified and self.declared_handle:
            return self.declared_handle
        return INVALID_HANDLE

    def to_json(self, *, include_document: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "query": self.query,
            "did": self.did,
            "handle": self.handle,
            "declared_handle": self.declared_handle,
            "status": str(self.status),
            "verified": self.verified,
            "pds": self.pds,
            "signing_key": self.signing_key,
            "also_known_as": list(self.also_known_as),
            "services": [{"id": i, "type": t, "endpoint": e} for i, t, e in self.services],
            # null, not []: without the replayed log they were not checked, not found absent
            "rotation_keys": list(self.rotation_keys) if self._log_replayed else None,
            "history": self.history.to_json() if self.history else None,
            "evidence": {
                "handle": self.handle_queried,
                "dns": self.dns.to_json(),
                "https": self.https.to_json(),
                "did_doc": self.did_doc.to_json(),
                "plc_log": {**self.plc_log.to_json(), "findings": list(self.plc_findings)},
            },
            "warnings": list(self.warnings),
            "error": self.error,
            "checked_at": self.checked_at,
            "cache": self.cache.to_json() if self.cache else None,
        }
        if self.pds_check is not None:
            out["evidence"]["pds"] = self.pds_check.to_json()
        if self.cache and self.cache.refresh_error:
            out["evidence"]["refresh"] = {"outcome": "failed", "error": self.cache.refresh_error}
        if include_document:
            out["did_document"] = self.did_document
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Identity:
        """The report back from its JSON form (what `atwhois serve` answers)."""
        evidence = data["evidence"]
        cache = data.get("cache")
        return cls(
            query=data["query"],
            status=Status(data["status"]),
            did=data["did"],
            declared_handle=data["declared_handle"],
            pds=data["pds"],
            signing_key=data["signing_key"],
            also_known_as=tuple(data["also_known_as"]),
            services=tuple((s["id"], s["type"], s["endpoint"]) for s in data.get("services", [])),
            rotation_keys=tuple(data.get("rotation_keys") or ()),
            history=LogSummary.from_json(data["history"]) if data.get("history") else None,
            dns=Evidence.from_json(evidence["dns"]),
            https=Evidence.from_json(evidence["https"]),
            did_doc=Evidence.from_json(evidence["did_doc"]),
            plc_log=Evidence.from_json(evidence["plc_log"]),
            plc_findings=tuple(evidence["plc_log"]["findings"]),
            warnings=tuple(data["warnings"]),
            error=data["error"],
            checked_at=data["checked_at"],
            handle_queried=evidence["handle"],
            did_document_json=_document_json(data.get("did_document")),
            cache=CacheInfo(**cache) if cache else None,
            pds_check=PdsCheck.from_json(evidence["pds"]) if evidence.get("pds") else None,
        )


def _document_json(document: Any) -> bytes | None:
    return json.dumps(document).encode() if document is not None else None


def now_iso() -> str:
    return iso_time(time.time())


def failed_inside(identifier: str, err: Exception, checked_at: str) -> Identity:
    """The report of a lookup that failed inside atwhois (a bug, not an answer): unavailable,
    like any failure that says nothing of the identity, so that one identity's failure never
    ends a batch or an audit run, and never reads as absence or as invalid."""
    error = f"atwhois failed to resolve this: {type(err).__name__}: {err}"
    return Identity(query=identifier, status=Status.UNAVAILABLE, error=error, checked_at=checked_at)


def invalid_input(identifier: str, err: InvalidInput, checked_at: str) -> Identity:
    """The report for input that never reached the network."""
    return Identity(
        query=identifier, status=Status.INVALID_INPUT, error=str(err), checked_at=checked_at
    )


async def timed_evidence(
    run: Callable[[], Awaitable[str]], *, source: str, seen: list[str]
) -> Evidence:
    """What one method found: the DID `run` returns, or the `ResolutionError` it raises
    (with the DIDs it saw on the way), and how long it took."""
    started = time.perf_counter()
    try:
        did = await run()
    except ResolutionError as err:
        failed = Evidence.failure(err, ms_since(started), source)
        return Evidence(
            failed.outcome, tuple(seen), failed.error, failed.error_kind, failed.ms, source
        )
    return Evidence(Outcome.OK, (did,), ms=round(ms_since(started), 2), source=source)


def ms_since(started: float) -> float:
    """Milliseconds since `started` (a `time.perf_counter()` reading)."""
    return (time.perf_counter() - started) * 1000
