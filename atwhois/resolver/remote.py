"""`Client`: a running `atwhois serve` as a `Directory` (`lookup --server URL`),
which shares its cache with everyone who asks it. It reads `/v1/identity/{identifier}`,
the same report a local lookup gives, answered from the daemon's cache.

It speaks HTTP through the standard library's `http.client`, one request on a worker
thread: the daemon is the operator's own, at an address they gave, so none of the fetcher's
guards against strangers' hosts apply, and asking it should cost the command line no more
than the answer. httpx would cost a third of a second to import (and with trio installed,
twice that); aiohttp as much. The answer still has a deadline and a size cap, and
redirects are not followed.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from atwhois.foundation.bounded import BoundedBody
from atwhois.foundation.version import agent

from .errors import AtwhoisError, InvalidIdentifier
from .identity import Identity, now_iso
from .label import MAX_BATCH, MAX_BATCH_BYTES, MAX_LABEL, LabelRefused, LabelVerification, read
from .oauth import OAuthServer
from .outcome import Status
from .record_proof import RecordVerification, claimed_cid, record_uri
from .rules import cited
from .service_auth import Expected, Verification
from .tls import tls_context
from .untrusted import parse_json

_REFRESH = "/xrpc/com.atproto.identity.refreshIdentity"
_VERIFY = "/v1/verify/service-auth"
_RECORD = "/v1/verify/record"
_LABEL = "/v1/verify/label"
_LABEL_BYTES = MAX_BATCH_BYTES - MAX_LABEL - 64  # a request's labels, and room for one more
_OAUTH = "/v1/oauth/"
_MAX_BYTES = 4 * 1024 * 1024  # a report with its document is a few KiB
_CHUNK = 64 * 1024


class PurgeNotOffered(AtwhoisError):
    """The daemon's API has no purge: it is purged where it runs (`atwhois cache purge`)."""


class NotADaemonUrl(AtwhoisError, ValueError):
    """The daemon's address is not an http:// or https:// URL."""


class DaemonUnanswered(AtwhoisError):
    """The daemon gave no usable answer (unreachable, too slow, too large)."""


class Client:
    """A running `atwhois serve`, asked as a `Directory` (async); from synchronous code,
    `atwhois.lookup(identifier, directory=Client(url))`."""

    def __init__(self, url: str, timeout: float = 30.0, *, token: str | None = None) -> None:
        """`token`: the daemon's refresh token, which `refresh` needs."""
        self.url = url.rstrip("/")
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise NotADaemonUrl(f"{url!r} is not an http:// or https:// URL")
        self._parts = parts
        self._timeout = timeout
        self._token = token

    async def lookup(self, identifier: str) -> Identity:
        return await self._report(identifier)

    async def check_pds(self, identity: Identity) -> Identity:
        """The daemon's report with its PDS check (`?check_pds=1`), done there now."""
        return await self._report(identity.query, "?check_pds=1")

    async def _report(self, identifier: str, query: str = "") -> Identity:
        path = "/v1/identity/" + urllib.parse.quote(identifier, safe="") + query
        try:
            _, body = await self._ask("GET", path)
            return Identity.from_json(parse_json(body))
        except (DaemonUnanswered, ValueError, KeyError, TypeError) as err:
            return self._unanswered(identifier, f"did not answer: {err or type(err).__name__}")

    async def refresh(self, identifier: str) -> Identity:
        """The daemon resolves every part afresh (`refreshIdentity`, with the token), then
        its report."""
        if self._token is None:
            return self._unanswered(identifier, "refreshes only with its token (refresh_token)")
        headers = {"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"}
        body = json.dumps({"identifier": identifier}).encode()
        try:
            status, _ = await self._ask("POST", _REFRESH, body, headers)
        except DaemonUnanswered as err:
            return self._unanswered(identifier, f"did not answer: {err}")
        if status in (401, 403):
            return self._unanswered(identifier, f"refused the refresh ({status})")
        return await self.lookup(identifier)

    async def document(self, did: str, *, fresh: bool = False) -> Identity:
        """The daemon's report of the DID, its handle checked there too: its API has no
        document alone. A token is verified where the daemon runs (`verify_service_auth`),
        whose verdict never waits on the handle."""
        return await (self.refresh(did) if fresh else self.lookup(did))

    async def verify_service_auth(
        self, token: str, expected: Expected, *, replay: bool = False
    ) -> Verification:
        """The daemon checks `token` (`POST /v1/verify/service-auth`): its issuers' documents
        and the nonces seen are the ones it keeps, shared with every daemon on its store."""
        request = {
            "token": token,
            "audience": expected.audience,
            "key_ids": list(expected.key_ids),
            "replay": replay,
        }
        if expected.method is not None:
            request["method"] = expected.method
        headers = {"Content-Type": "application/json"}
        try:
            status, body = await self._ask("POST", _VERIFY, json.dumps(request).encode(), headers)
            answer = parse_json(body)
            if status in (200, 502) and isinstance(answer, dict) and "outcome" in answer:
                return Verification.from_json(answer)
            why = f"answered {status}: {str(answer.get('message', ''))[:200]}"
        except (DaemonUnanswered, ValueError, KeyError, TypeError, AttributeError) as err:
            why = f"did not answer: {err or type(err).__name__}"
        return Verification("unavailable", None, f"atwhois serve at {self.url} {why}")

    async def verify_record(
        self, uri: str, *, cid: str | None = None, record: bytes | None = None
    ) -> RecordVerification:
        """The daemon verifies the record (`GET /v1/verify/record`) with the identities it
        keeps; what the caller holds is read into its CID here. Raises `InvalidInput`
        before asking (R-REC-1, R-REC-7)."""
        record_uri(uri)
        claimed = claimed_cid(cid, record)
        query = urllib.parse.urlencode({"uri": uri, **({"cid": claimed} if claimed else {})})
        try:
            status, body = await self._ask("GET", f"{_RECORD}?{query}")
            answer = parse_json(body)
            if status in (200, 502) and isinstance(answer, dict) and "outcome" in answer:
                return RecordVerification.from_json(answer)
            why = f"answered {status}: {str(answer.get('message', ''))[:200]}"
        except (DaemonUnanswered, ValueError, KeyError, TypeError, AttributeError) as err:
            why = f"did not answer: {err or type(err).__name__}"
        reason = f"atwhois serve at {self.url} {why}"
        return RecordVerification("unavailable", uri, reason=reason, claimed=claimed)

    async def verify_labels(self, labels: Sequence[Any]) -> list[LabelVerification]:
        """The daemon verifies the labels (`POST /v1/verify/label`, a thousand a request)
        with the labelers' documents it keeps; each is sent in the lexicon's JSON form, and
        one that cannot be read as a label is refused here, naming its rule."""
        verdicts: list[LabelVerification | None] = []
        sending: list[tuple[int, dict[str, Any]]] = []
        for index, item in enumerate(labels):
            try:
                sending.append((index, read(item).to_json()))
            except LabelRefused as err:
                verdicts.append(LabelVerification("invalid", err.rule, err.reason))
                continue
            verdicts.append(None)
        chunk: list[tuple[int, dict[str, Any]]] = []
        size = 0
        for at, (index, label) in enumerate(sending):
            chunk.append((index, label))
            size += len(json.dumps(label)) + 2
            if at + 1 == len(sending) or len(chunk) == MAX_BATCH or size > _LABEL_BYTES:
                answered = await self._verify_labels([label for _, label in chunk])
                for (held, _), verdict in zip(chunk, answered, strict=True):
                    verdicts[held] = verdict
                chunk, size = [], 0
        return [verdict for verdict in verdicts if verdict is not None]

    async def _verify_labels(self, labels: list[dict[str, Any]]) -> list[LabelVerification]:
        headers = {"Content-Type": "application/json"}
        body = json.dumps({"labels": labels}).encode()
        try:
            status, answered = await self._ask("POST", _LABEL, body, headers)
            answer = parse_json(answered)
            verdicts = answer.get("verdicts") if isinstance(answer, dict) else None
            if status in (200, 502) and isinstance(verdicts, list) and len(verdicts) == len(labels):
                return [LabelVerification.from_json(verdict) for verdict in verdicts]
            why = f"answered {status}: {str(answer.get('message', ''))[:200]}"
        except (DaemonUnanswered, ValueError, KeyError, TypeError, AttributeError) as err:
            why = f"did not answer: {err or type(err).__name__}"
        reason = f"atwhois serve at {self.url} {why}"
        return [LabelVerification("unavailable", reason=reason) for _ in labels]

    async def oauth_server(self, identifier: str) -> OAuthServer:
        """The daemon finds the account's authorization server (`GET /v1/oauth/{id}`), with
        the identities and documents it keeps (O-CACHE-1). Raises `InvalidInput` for what
        it refuses as such (400)."""
        path = _OAUTH + urllib.parse.quote(identifier, safe="")
        try:
            status, body = await self._ask("GET", path)
            answer = parse_json(body)
            if status in (200, 502) and isinstance(answer, dict) and "outcome" in answer:
                return OAuthServer.from_json(answer)
            message = str(answer.get("message", ""))[:200]
            if status == 400:  # input the daemon refused, as a lookup here would
                rule = (cited(message) or ["O-FLOW-1"])[0]
                raise InvalidIdentifier(message.removesuffix(f" [{rule}]"), rule)
            why = f"answered {status}: {message}"
        except (DaemonUnanswered, ValueError, KeyError, TypeError, AttributeError) as err:
            why = f"did not answer: {err or type(err).__name__}"
        return OAuthServer("unavailable", identifier, reason=f"atwhois serve at {self.url} {why}")

    async def purge(self, identifier: str) -> list[str]:
        raise PurgeNotOffered(
            f"atwhois serve at {self.url} offers no purge: run `atwhois cache purge` where it runs"
        )

    def _unanswered(self, identifier: str, why: str) -> Identity:
        return Identity(
            query=identifier,
            status=Status.UNAVAILABLE,
            checked_at=now_iso(),
            error=f"atwhois serve at {self.url} {why}",
        )

    async def _ask(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        return await asyncio.to_thread(self._exchange, method, path, body, headers or {})

    def _exchange(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """One request on its own connection; the status and the whole body, read within
        the deadline and the cap."""
        deadline = time.monotonic() + self._timeout
        parts = self._parts
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=self._timeout, context=tls_context(None)
            )
        else:
            connection = http.client.HTTPConnection(
                parts.hostname or "", parts.port, timeout=self._timeout
            )
        try:
            headers = {"User-Agent": agent(), **headers}
            connection.request(method, parts.path + path, body=body, headers=headers)
            response = connection.getresponse()
            answer = BoundedBody(
                _MAX_BYTES,
                lambda _: DaemonUnanswered(f"an answer over {_MAX_BYTES} bytes"),
                deadline=deadline,
                too_slow=lambda _: DaemonUnanswered(f"no complete answer within {self._timeout}s"),
            )
            while chunk := response.read1(_CHUNK):
                answer.add(chunk)
            return response.status, answer.value()
        except (OSError, http.client.HTTPException) as err:
            raise DaemonUnanswered(str(err) or type(err).__name__) from None
        finally:
            connection.close()

    async def aclose(self) -> None:
        return None
