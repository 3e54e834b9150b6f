"""`Resolver`: say who an identifier is and whether its handle <-> DID binding holds both ways.

The flow goes one way: syntax -> evidence (DNS TXT and HTTPS well-known at once; the DID
document) -> the verdict tables -> an `Identity`. The network edges (`DnsClient`,
`Fetcher`) are injected, or built from the config when first used: a resolver that only
parses, or whose cache answers, never loads the network stack (dnspython and aiohttp are
most of a command-line lookup's start-up).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from .config import Config
from .did import check_http_response, check_plc_response, document_url, mirror_note
from .dns_method import DnsMethod
from .document import parse_json_document
from .errors import (
    InvalidDid,
    InvalidInput,
    MalformedAnswer,
    ResolutionError,
)
from .handle import (
    WELL_KNOWN_MAX_BYTES,
    WELL_KNOWN_PATH,
    did_from_well_known,
)
from .identity import Evidence, Identity, invalid_input, ms_since, now_iso, timed_evidence
from .outcome import Outcome
from .report import NO_DOCUMENT, DocumentResolution, HandleResolution, compose, unchecked
from .response import Getter, TxtAuthority, TxtRecords
from .syntax import (
    Query,
    check_plc_did,
    check_resolvable_handle,
    did_method,
    parse_lookup,
)
from .untrusted import parse_json

if TYPE_CHECKING:
    from .directory import Directory
    from .dns import DnsClient
    from .dnssec_chain import DnssecChain
    from .fetch import Fetcher
    from .plc import Audit
    from .record import Refresh
    from .record_proof import RecordVerification

_CONNECTION_WAIT = 0.5  # seconds a did.json fetch waits for the well-known fetch's connection

_DOC_ACCEPT = "application/did+ld+json, application/json;q=0.9, */*;q=0.1"


class Resolver:
    """Resolve and verify handles, DIDs and at:// URIs. Use as `async with Resolver(cfg)`.
    Its other methods are the parts a cache composes an answer from."""

    # the library's API (the documentation's reference shows these)
    PUBLIC = ("lookup", "refresh", "document", "check_pds", "purge", "audit_log", "aclose")

    def __init__(
        self,
        config: Config | None = None,
        *,
        dns: DnsClient | None = None,
        web: Getter | None = None,
        plc: Getter | None = None,
        txt: TxtRecords | None = None,
        authority: TxtAuthority | None = None,
    ) -> None:
        """The network edges, each built from `config` when first used unless given: `dns`
        (and the DNSSEC walk over it), `web` (strangers' hosts), `plc` (the directory);
        `txt` answers the TXT questions of lookups without --dnssec (by default `dns`),
        `authority` those of a re-check after a change at the zone's own nameservers
        (H-DNS-9; by default over `dns`, none when `txt` is given alone):
        `atwhois.testing.World` gives all but `dns`. Without `config`, the settings are the
        environment's (`Config.from_environment()`), as for `atwhois.lookup` and the
        command: a `Resolver()` and a plain call resolve alike."""
        self.config = config or Config.from_environment()
        self._dns = dns
        self._txt = txt
        self._authority = authority
        self._web: Getter | None = web
        self._plc: Getter | None = plc
        self._dnssec: DnssecChain | None = None
        self._dns_method = DnsMethod(self)

    @property
    def dns(self) -> DnsClient:
        if self._dns is None:
            from .dns import DnsClient

            self._dns = DnsClient(self.config)
        return self._dns

    @property
    def dnssec(self) -> DnssecChain:
        """The DNSSEC walk, and what it proved so far (kept across lookups)."""
        if self._dnssec is None:
            from .dnssec import parse_anchors
            from .dnssec_chain import DnssecChain

            self._dnssec = DnssecChain(
                self.dns.ask,
                parse_anchors(self.config.dnssec_anchors),
                memory_bytes=self.config.dnssec_memory_bytes,
                deadline=self.config.dns_timeout,
            )
        return self._dnssec

    @property
    def web(self) -> Getter:
        """The guarded fetcher, for hosts strangers choose."""
        if self._web is None:
            self._web = self._fetcher(guarded=True)
        return self._web

    @property
    def plc(self) -> Getter:
        """The fetcher for the configured PLC directory (or an in-process mirror)."""
        if self._plc is None:
            self._plc = self._fetcher(guarded=False)
        return self._plc

    @property
    def txt(self) -> TxtRecords:
        """What answers the TXT questions of lookups without --dnssec."""
        return self._txt or self.dns

    @property
    def authority(self) -> TxtAuthority | None:
        """Where a re-check after a change asks the zone itself (H-DNS-9): None when it is
        switched off, or when the TXT answers come from an injected source alone."""
        if not self.config.dns_authoritative:
            return None
        if self._authority is None and self._txt is None:
            from .dns_authority import Authority
            from .fetch import AddressGuard

            self._authority = Authority(self.config, self.dns, AddressGuard(self.config, self.dns))
        return self._authority

    def _fetcher(self, *, guarded: bool) -> Fetcher:
        from .fetch import Fetcher

        return Fetcher(self.config, self.dns, guarded=guarded)

    async def __aenter__(self) -> Resolver:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        edges = (self._web, self._plc, self._dns, self._txt, self._authority)
        await asyncio.gather(*(edge.aclose() for edge in edges if edge))

    async def lookup(self, identifier: str) -> Identity:
        """Resolve a handle (a leading @ allowed), a DID or an at:// URI, and verify it."""
        return await self._lookup(identifier, recheck=False)

    async def refresh(self, identifier: str) -> Identity:
        """A lookup because something says the identity changed: a resolver keeps nothing,
        so every part is resolved afresh anyway, and the handle's TXT is also asked of its
        zone's own nameservers (H-DNS-9)."""
        return await self._lookup(identifier, recheck=True)

    async def _lookup(self, identifier: str, *, recheck: bool) -> Identity:
        checked_at = now_iso()
        try:
            query = self.parse(identifier)
        except InvalidInput as err:
            return invalid_input(identifier, err, checked_at)
        if query.kind == "handle":
            handle, document = await self.resolve_handle_with_document(query.value, recheck=recheck)
        else:
            document = await self.resolve_document(query.value)
            handle = await self.resolve_declared_handle(document, recheck=recheck)
        return compose(query, checked_at, handle, document)

    async def document(self, did: str, *, fresh: bool = False) -> Identity:
        """The DID's document alone, its handle not checked (`report.unchecked`): what a
        token's signature rests on (SA-ISS-2), which must not wait on the handle's hosts.
        A resolver keeps nothing: every call resolves it afresh (`fresh` or not)."""
        checked_at = now_iso()
        try:
            query = self.parse_did(did)
        except InvalidInput as err:
            return invalid_input(did, err, checked_at)
        document = await self.resolve_document(query.value)
        return compose(query, checked_at, unchecked(document), document)

    async def purge(self, identifier: str) -> list[str]:
        """Nothing to forget: a resolver keeps nothing."""
        return []

    def parse(self, identifier: str) -> Query:
        """Syntax only: invalid input never reaches the network. Raises `InvalidInput`."""
        return parse_lookup(identifier, dev=self.config.dev)

    def parse_did(self, did: str) -> Query:
        """`parse`, where only a DID will do (a handle is invalid input there)."""
        query = self.parse(did)
        if query.kind != "did":
            raise InvalidDid(f"{did[:80]!r} is not a DID", "D-SYN-1")
        return query

    async def resolve_handle(self, handle: str, *, recheck: bool = False) -> HandleResolution:
        """DNS TXT and HTTPS well-known at once (H-RES-1/2); with `recheck` (something says
        the handle changed), the TXT at the zone's own nameservers too (H-DNS-9)."""
        dns, https = await asyncio.gather(
            self._dns_method.evidence(handle, recheck=recheck), self._https_method(handle)
        )
        return HandleResolution.of(handle, dns, https)

    async def resolve_handle_with_document(
        self,
        handle: str,
        document_for: Callable[[str], Coroutine[Any, Any, DocumentResolution]] | None = None,
        *,
        recheck: bool = False,
    ) -> tuple[HandleResolution, DocumentResolution]:
        """Both methods at once; the document fetch starts as soon as either names a DID,
        so latency is about max(DNS, HTTPS) + document, not their sum. `document_for`
        replaces `resolve_document` (a cache passes its own); `recheck` as in
        `resolve_handle`."""
        documents: dict[str, asyncio.Task[DocumentResolution]] = {}
        get_document = document_for or self.resolve_document

        def fetch_document(did: str) -> asyncio.Task[DocumentResolution]:
            if did not in documents:
                if did == f"did:web:{handle}" and not https_task.done():
                    documents[did] = asyncio.create_task(after_well_known(did))
                else:
                    documents[did] = asyncio.create_task(get_document(did))
            return documents[did]

        async def after_well_known(did: str) -> DocumentResolution:
            # The well-known fetch holds a connection to this very host: its did.json asked
            # once that is done takes the same connection, one TLS handshake instead of two,
            # and about no later (a new connection spends two round trips before asking).
            # Waited for briefly only: a slow well-known answer must not hold the document.
            await asyncio.wait([https_task], timeout=_CONNECTION_WAIT)
            return await get_document(did)

        dns_task = asyncio.create_task(self._dns_method.evidence(handle, recheck=recheck))
        https_task = asyncio.create_task(self._https_method(handle))
        try:
            pending: set[asyncio.Task[Evidence]] = {dns_task, https_task}
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if (did := task.result().did) is not None:
                        fetch_document(did)
            resolution = HandleResolution.of(handle, dns_task.result(), https_task.result())
            did = resolution.answer.did
            document = await fetch_document(did) if did else NO_DOCUMENT
        finally:
            for leftover in (dns_task, https_task, *documents.values()):
                leftover.cancel()
        return resolution, document

    def declared_handle(self, document: DocumentResolution) -> str | HandleResolution:
        """The handle a document declares, if it may be resolved; else why not (skipped)."""
        if document.data is None:
            return HandleResolution.skipped(None, "no valid DID document")
        declared = document.data.declared_handle
        if declared is None:
            return HandleResolution.skipped(None, "the DID document declares no at:// handle")
        try:
            check_resolvable_handle(declared, allow_test_tld=self.config.allow_test_tld)
        except InvalidInput as err:
            return HandleResolution.skipped(declared, str(err))
        return declared

    async def resolve_declared_handle(
        self, document: DocumentResolution, *, recheck: bool = False
    ) -> HandleResolution:
        """H-RES-5: the handle a document declares, resolved both ways (or why not)."""
        declared = self.declared_handle(document)
        if isinstance(declared, HandleResolution):
            return declared
        return await self.resolve_handle(declared, recheck=recheck)

    # --- the methods ----------------------------------------------------------------

    async def _https_method(self, handle: str) -> Evidence:
        url = f"https://{handle}{WELL_KNOWN_PATH}"
        seen: list[str] = []

        async def run() -> str:
            response = await self.web.get(
                url,
                max_bytes=WELL_KNOWN_MAX_BYTES,
                timeout=self.config.https_timeout,
                max_redirects=self.config.max_redirects,
                accept="text/plain",
            )
            check_http_response(response, "well-known")
            did = did_from_well_known(response.body)
            seen.append(did)
            return did

        return await timed_evidence(run, source=url, seen=seen)

    async def resolve_document(self, did: str) -> DocumentResolution:
        """The DID document; with --verify-plc, checked against the replayed audit log."""
        if did_method(did) != "plc" or not self.config.verify_plc:
            return await self._fetch_document(did)
        fetched, (evidence, audit) = await asyncio.gather(
            self._fetch_document(did), self._replayed_audit_log(did)
        )
        if audit is None:
            return dataclasses.replace(fetched, plc=evidence)
        from .plc import compare  # here: only --verify-plc loads the replay (libipld)
        from .plc.summary import summarize

        findings = list(audit.findings)
        if fetched.evidence.outcome in (Outcome.OK, Outcome.NOT_FOUND):
            findings += compare(audit, fetched.document)
        if findings:
            evidence = dataclasses.replace(
                evidence,
                outcome=Outcome.INVALID,
                error_kind="PlcLogInvalid",
                error=f"{len(findings)} finding(s); first: {findings[0]}",
            )
        keys = audit.state.rotation_keys if audit.state else ()
        return dataclasses.replace(
            fetched,
            plc=evidence,
            plc_findings=tuple(str(f) for f in findings),
            rotation_keys=keys,
            history=summarize(audit),
        )

    async def _fetch_document(self, did: str) -> DocumentResolution:
        started = time.perf_counter()
        url = document_url(did, self.config)
        fetcher = self.plc if did_method(did) == "plc" else self.web
        try:
            response = await fetcher.get(
                url,
                max_bytes=self.config.document_max_bytes,
                timeout=self.config.document_timeout,
                accept=_DOC_ACCEPT,
            )
            if did_method(did) == "plc":
                check_plc_response(response, did)
            else:
                check_http_response(response, "did.json")
            body, data = parse_json_document(did, response.body, dev=self.config.dev)
        except ResolutionError as err:
            return DocumentResolution(did, Evidence.failure(err, ms_since(started), url))
        evidence = Evidence(
            Outcome.OK,
            (did,),
            ms=round(ms_since(started), 2),
            source=url,
            via=mirror_note(response),
        )
        return DocumentResolution(did, evidence, data, body)

    async def _replayed_audit_log(self, did: str) -> tuple[Evidence, Audit | None]:
        started = time.perf_counter()
        url = f"{self.config.plc_url.rstrip('/')}/{did}/log/audit"
        try:
            audit = await self.audit_log(did)
        except ResolutionError as err:
            return Evidence.failure(err, ms_since(started), url), None
        return Evidence(Outcome.OK, (did,), ms=round(ms_since(started), 2), source=url), audit

    async def check_pds(self, identity: Identity) -> Identity:
        """`identity` with the PDS check (`resolver.pds`) of the PDS its document names;
        as it is when it names none (or has no document)."""
        if identity.did is None or identity.pds is None:
            return identity
        from .pds import check_pds

        did = identity.did

        async def earlier_keys() -> tuple[str, ...]:
            return await self.signing_keys(did) if did.startswith("did:plc:") else ()

        check = await check_pds(
            self.web,
            identity.pds,
            did,
            identity.signing_key,
            earlier_keys,
            timeout=self.config.https_timeout,
        )
        return dataclasses.replace(identity, pds_check=check)

    async def verify_record(
        self,
        uri: str,
        *,
        cid: str | None = None,
        record: bytes | None = None,
        directory: Directory | None = None,
        refresh: Refresh | None = None,
    ) -> RecordVerification:
        """The record `uri` names, verified at its PDS (`resolver.record`), its identity
        looked up in `directory` (a cache over this resolver; by default, resolved now);
        `cid` or `record` is what the caller holds; `refresh` resolves a kept identity
        afresh when the verdict may be its change (R-REC-8; by default the directory's
        `refresh`, each time). Raises `InvalidInput`."""
        from .record import verify_record

        found, timeout = directory or self, self.config.https_timeout
        return await verify_record(
            found, self.web, uri, cid=cid, record=record, timeout=timeout, refresh=refresh
        )

    async def signing_keys(self, did: str) -> tuple[str, ...]:
        """Every `#atproto` key a did:plc's log declared, newest first (from its
        `/log`). Raises a `ResolutionError` when the log cannot be had."""
        log = await self._plc_log(did, "/log")
        from .plc.operation import BadOperation, parse_operation

        keys: dict[str, None] = {}
        for op in reversed(log if isinstance(log, list) else []):
            try:
                state = parse_operation(op).state
            except BadOperation:
                continue
            key = state.method("atproto") if state else None
            if key is not None:
                keys[key] = None
        return tuple(keys)

    async def audit_log(self, did: str) -> Audit:
        """Fetch a did:plc's `/log/audit` and replay it (P-AUDIT-1). Raises a
        `ResolutionError` when the log cannot be had; a bad log is an `Audit` with findings."""
        log = await self._plc_log(did, "/log/audit")
        from .plc import replay

        return replay(did, log)

    async def _plc_log(self, did: str, path: str) -> Any:
        """A did:plc's `path` (`/log`, `/log/audit`) from the directory, parsed."""
        check_plc_did(did)
        response = await self.plc.get(
            f"{self.config.plc_url.rstrip('/')}/{did}{path}",
            max_bytes=self.config.audit_log_max_bytes,
            timeout=self.config.document_timeout,
            accept="application/json",
        )
        check_plc_response(response, did)
        try:
            return parse_json(response.body)
        except ValueError:
            raise MalformedAnswer(f"{path} is not JSON") from None
