"""`Resolver`: say who an identifier is and whether its handle <-> DID binding holds both ways.

The flow goes one way: syntax -> evidence (DNS TXT and HTTPS well-known at once; the DID
document) -> the verdict tables -> an `Identity`. The network edges (`DnsClient`,
`Fetcher`) are built from the config, or injected.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from . import verdict
from .config import Config
from .did import check_http_response, check_plc_response, document_url
from .dns import DnsClient
from .document import AtprotoData, parse_json_document
from .errors import InvalidData, InvalidInput, ResolutionError, UnsupportedDidMethod
from .fetch import Fetcher
from .handle import (
    WELL_KNOWN_MAX_BYTES,
    WELL_KNOWN_PATH,
    did_from_txt,
    did_from_well_known,
    dids_in_txt,
    txt_name,
)
from .identity import SKIPPED, Evidence, Identity
from .outcome import Outcome, Status
from .plc import Audit, compare, replay
from .syntax import (
    SUPPORTED_DID_METHODS,
    Query,
    check_plc_did,
    check_resolvable_handle,
    did_method,
    parse_did_web,
    parse_query,
)
from .verdict import Binding, HandleAnswer, Step

_DOC_ACCEPT = "application/did+ld+json, application/json;q=0.9, */*;q=0.1"


@dataclass(frozen=True, slots=True)
class _Document:
    evidence: Evidence
    data: AtprotoData | None = None
    raw: dict[str, Any] | None = None
    plc: Evidence = SKIPPED
    plc_findings: tuple[str, ...] = ()


class Resolver:
    """Resolve and verify handles, DIDs and at:// URIs. Use as `async with Resolver(cfg)`."""

    def __init__(
        self,
        config: Config | None = None,
        *,
        dns: DnsClient | None = None,
        web: Fetcher | None = None,
        plc: Fetcher | None = None,
    ) -> None:
        self.config = config or Config()
        self.dns = dns or DnsClient(self.config)
        self.web = web or Fetcher(self.config, self.dns, guarded=True)
        self.plc = plc or Fetcher(self.config, self.dns, guarded=False)

    async def __aenter__(self) -> Resolver:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await asyncio.gather(self.web.aclose(), self.plc.aclose())

    async def lookup(self, identifier: str) -> Identity:
        """Resolve a handle (a leading @ allowed), a DID or an at:// URI, and verify it."""
        checked_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        try:
            query = self._parse(identifier)
        except InvalidInput as err:
            return Identity(
                query=identifier,
                status=Status.INVALID_INPUT,
                error=str(err),
                checked_at=checked_at,
            )
        if query.kind == "handle":
            return await self._lookup_handle(query, checked_at)
        return await self._lookup_did(query, checked_at)

    def _parse(self, identifier: str) -> Query:
        """Syntax only: invalid input never reaches the network."""
        query = parse_query(identifier)
        if query.kind == "handle":
            check_resolvable_handle(query.value, allow_test_tld=self.config.allow_test_tld)
            return query
        method = did_method(query.value)
        if method not in SUPPORTED_DID_METHODS:
            raise UnsupportedDidMethod(f"did:{method} is not supported for accounts", "D-SYN-9")
        if method == "plc":
            check_plc_did(query.value)
        else:
            parse_did_web(
                query.value, dev=self.config.dev, allow_test_tld=self.config.allow_test_tld
            )
        return query

    # --- handle first ---------------------------------------------------------------

    async def _lookup_handle(self, query: Query, checked_at: str) -> Identity:
        handle = query.value
        documents: dict[str, asyncio.Task[_Document]] = {}

        def fetch_document(did: str) -> asyncio.Task[_Document]:
            if did not in documents:
                documents[did] = asyncio.create_task(self._document(did))
            return documents[did]

        # Both methods at once; a DID document fetch starts as soon as either names a DID,
        # so latency is about max(DNS, HTTPS) + document, not their sum.
        dns_task = asyncio.create_task(self._dns_method(handle))
        https_task = asyncio.create_task(self._https_method(handle))
        try:
            pending: set[asyncio.Task[Evidence]] = {dns_task, https_task}
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if (did := task.result().did) is not None:
                        fetch_document(did)
            dns, https = dns_task.result(), https_task.result()
            answer = verdict.combine_methods(dns, https)
            document = await fetch_document(answer.did) if answer.did else _Document(SKIPPED)
        finally:
            for leftover in (dns_task, https_task, *documents.values()):
                leftover.cancel()
        binding = Binding.NOT_CHECKED
        if document.data is not None:
            same = document.data.declared_handle == handle
            binding = Binding.MATCH if same else Binding.MISMATCH
        status = verdict.handle_first(answer.step, verdict.step_of(document.evidence), binding)
        return self._report(query, status, checked_at, answer, dns, https, document, handle)

    # --- DID first ------------------------------------------------------------------

    async def _lookup_did(self, query: Query, checked_at: str) -> Identity:
        did = query.value
        document = await self._document(did)
        dns = https = SKIPPED
        answer = HandleAnswer(Step.SKIPPED, None)
        declared = document.data.declared_handle if document.data else None
        binding = Binding.NOT_CHECKED
        if document.data is not None:
            if declared is None:
                dns = https = Evidence.skipped("the DID document declares no at:// handle")
            else:
                try:
                    check_resolvable_handle(declared, allow_test_tld=self.config.allow_test_tld)
                except InvalidInput as err:
                    dns = https = Evidence.skipped(str(err))
                else:
                    dns, https = await asyncio.gather(
                        self._dns_method(declared), self._https_method(declared)
                    )
                    answer = verdict.combine_methods(dns, https)
                    binding = Binding.MATCH if answer.did == did else Binding.MISMATCH
            if answer.step is Step.SKIPPED:
                answer = HandleAnswer(Step.SKIPPED, None)
        status = verdict.did_first(verdict.step_of(document.evidence), answer.step, binding)
        return self._report(
            query, status, checked_at, answer, dns, https, document, declared, did=did
        )

    # --- the methods ----------------------------------------------------------------

    async def _dns_method(self, handle: str) -> Evidence:
        name = txt_name(handle)
        if name is None:
            return Evidence.skipped("_atproto name is over 253 characters [H-DNS-5]")
        seen: list[str] = []

        async def run() -> str:
            records = await self.dns.txt(name)
            seen.extend(dids_in_txt(records))
            return did_from_txt(records)

        return await _timed(run, source=name, seen=seen)

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

        return await _timed(run, source=url, seen=seen)

    async def _document(self, did: str) -> _Document:
        if did_method(did) != "plc" or not self.config.verify_plc:
            return await self._fetch_document(did)
        fetched, (evidence, audit) = await asyncio.gather(
            self._fetch_document(did), self._replayed_audit_log(did)
        )
        if audit is None:
            return dataclasses.replace(fetched, plc=evidence)
        findings = list(audit.findings)
        if fetched.evidence.outcome in (Outcome.OK, Outcome.NOT_FOUND):
            findings += compare(audit, fetched.raw)
        if findings:
            evidence = dataclasses.replace(
                evidence,
                outcome=Outcome.INVALID,
                error_kind="PlcLogInvalid",
                error=f"{len(findings)} finding(s); first: {findings[0]}",
            )
        return dataclasses.replace(
            fetched, plc=evidence, plc_findings=tuple(str(f) for f in findings)
        )

    async def _fetch_document(self, did: str) -> _Document:
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
            raw, data = parse_json_document(did, response.body, dev=self.config.dev)
        except ResolutionError as err:
            return _Document(Evidence.failure(err, _ms(started), url))
        evidence = Evidence(Outcome.OK, (did,), ms=round(_ms(started), 2), source=url)
        return _Document(evidence, data, raw)

    async def _replayed_audit_log(self, did: str) -> tuple[Evidence, Audit | None]:
        started = time.perf_counter()
        url = f"{self.config.plc_url.rstrip('/')}/{did}/log/audit"
        try:
            audit = await self.audit_log(did)
        except ResolutionError as err:
            return Evidence.failure(err, _ms(started), url), None
        return Evidence(Outcome.OK, (did,), ms=round(_ms(started), 2), source=url), audit

    async def audit_log(self, did: str) -> Audit:
        """Fetch a did:plc's `/log/audit` and replay it (spec checklist 10.6). Raises a
        `ResolutionError` when the log cannot be had; a bad log is an `Audit` with findings."""
        check_plc_did(did)
        response = await self.plc.get(
            f"{self.config.plc_url.rstrip('/')}/{did}/log/audit",
            max_bytes=self.config.audit_log_max_bytes,
            timeout=self.config.document_timeout,
            accept="application/json",
        )
        check_plc_response(response, did)
        try:
            log = json.loads(response.body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise InvalidData("the audit log is not JSON") from None
        return replay(did, log)

    # --- the report -----------------------------------------------------------------

    def _report(
        self,
        query: Query,
        status: Status,
        checked_at: str,
        answer: HandleAnswer,
        dns: Evidence,
        https: Evidence,
        document: _Document,
        handle: str | None,
        *,
        did: str | None = None,
    ) -> Identity:
        data = document.data
        warnings = (*answer.warnings, *(data.warnings if data else ()))
        status = verdict.with_plc_log(status, verdict.step_of(document.plc))
        return Identity(
            query=query.text,
            status=status,
            did=did or answer.did,
            declared_handle=data.declared_handle if data else None,
            pds=data.pds if data else None,
            signing_key=data.signing_key.did_key if data and data.signing_key else None,
            also_known_as=data.also_known_as if data else (),
            dns=dns,
            https=https,
            did_doc=document.evidence,
            plc_log=document.plc,
            plc_findings=document.plc_findings,
            warnings=warnings,
            error=_reason(status, handle, data, dns, https, document.evidence, document.plc),
            checked_at=checked_at,
            handle_queried=handle,
            did_document=document.raw,
        )


async def _timed(run: Callable[[], Awaitable[str]], *, source: str, seen: list[str]) -> Evidence:
    started = time.perf_counter()
    try:
        did = await run()
    except ResolutionError as err:
        failed = Evidence.failure(err, _ms(started), source)
        return Evidence(
            failed.outcome, tuple(seen), failed.error, failed.error_kind, failed.ms, source
        )
    return Evidence(Outcome.OK, (did,), ms=round(_ms(started), 2), source=source)


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _reason(
    status: Status,
    handle: str | None,
    data: AtprotoData | None,
    dns: Evidence,
    https: Evidence,
    document: Evidence,
    plc_log: Evidence,
) -> str | None:
    """One sentence saying why the binding is not verified."""
    match status:
        case Status.VERIFIED:
            return None
        case Status.PLC_LOG_INVALID:
            return plc_log.error
        case Status.HANDLE_MISMATCH if data is not None and data.declared_handle is None:
            return "the DID document declares no valid at:// handle"
        case Status.HANDLE_MISMATCH if data is not None and handle == data.declared_handle:
            names = sorted({d for d in (*dns.dids, *https.dids) if d != data.did})
            return f"{handle} resolves to {', '.join(names) or 'another DID'}, not {data.did}"
        case Status.HANDLE_MISMATCH if data is not None:
            return f"the DID document declares {data.declared_handle}, not {handle}"
        case Status.DID_NOT_FOUND | Status.DID_DEACTIVATED | Status.INVALID_DOCUMENT:
            return document.error
        case _:
            errors = [e.error for e in (dns, https, document, plc_log) if e.error]
            return "; ".join(dict.fromkeys(errors)) or None
