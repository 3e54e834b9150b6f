"""One webhook delivery per audit run that found something: the run, its counts and its
findings, structured, as JSON (or as a Slack message), signed with HMAC-SHA256 when a secret
is configured. The payload is written to the audit store (the outbox) in the transaction
that finishes the run, and removed only once the receiver took it: a delivery that fails
after its retries is sent again by the next run, in order, so nothing is lost and nothing is
sent twice on purpose. A process sending a delivery claims it for a while: processes sharing
a store do not send one twice.

Headers: `X-Atwhois-Run` (the run id, for receivers that deduplicate), and with a secret
`X-Atwhois-Signature: sha256=<hex HMAC-SHA256 of the raw body>`."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from typing import Any

import httpx

from atwhois.foundation import defaults
from atwhois.foundation.version import agent
from atwhois.resolver.errors import AtwhoisError

from .findings import Finding
from .report import RunReport
from .store import AuditStore

log = logging.getLogger("atwhois.audit")
FORMATS = ("json", "slack")
SLACK_LINES = 20


class UnknownFormat(AtwhoisError, ValueError):
    """A webhook format atwhois does not write."""


class Webhook:
    def __init__(
        self,
        url: str,
        *,
        secret: str | None = None,
        format: str = defaults.WEBHOOK_FORMAT,
        attempts: int = 4,
        backoff: float = 0.5,
        timeout: float = 5.0,
    ) -> None:
        if format not in FORMATS:
            raise UnknownFormat(f"webhook format {format!r}: one of {', '.join(FORMATS)}")
        self.url, self.secret, self.format = url, secret, format
        self.attempts, self.backoff, self.timeout = attempts, backoff, timeout
        self._client = httpx.AsyncClient(timeout=timeout, headers={"User-Agent": agent()})
        self.delivered = 0
        self.failed = 0

    def queue(self, store: AuditStore, report: RunReport, findings: list[Finding]) -> None:
        """A run's delivery, owed until sent (nothing when it found nothing)."""
        if findings:
            labels = store.labels({f.identifier for f in findings})
            store.outbox_add(report.run_id, payload(report, findings, labels))

    async def deliver(self, store: AuditStore) -> bool | None:
        """Send every delivery owed that no other process is sending, oldest first. True:
        nothing is left undelivered; False: some is, for the next run; None: there was
        nothing to send."""
        queued = store.outbox_claim(self.claim_seconds())
        if not queued and not store.owed():
            return None
        for delivery, body in queued:
            error = await self._send(body)
            if error is None:
                store.outbox_done(delivery)
                self.delivered += 1
            else:
                store.outbox_failed(delivery, error)
                self.failed += 1
                log.warning(
                    json.dumps(
                        {"event": "webhook_undelivered", "run": body["run_id"], "error": error}
                    )
                )
        return not store.owed()

    def claim_seconds(self) -> float:
        """Long enough to try one delivery every time, with the waits between tries."""
        waits = sum(self.backoff * 2**attempt for attempt in range(self.attempts - 1))
        return float(self.attempts * self.timeout * 2 + waits)

    async def _send(self, data: dict[str, Any]) -> str | None:
        """None once the receiver took it; else the last error."""
        body = json.dumps(data if self.format == "json" else slack(data)).encode()
        headers = {"Content-Type": "application/json", "X-Atwhois-Run": str(data["run_id"])}
        if self.secret:
            digest = hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
            headers["X-Atwhois-Signature"] = f"sha256={digest}"
        error = "not tried"
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                # the status is the answer: the receiver's body is never read (a receiver
                # that answers gigabytes costs nothing)
                async with self._client.stream(
                    "POST", self.url, content=body, headers=headers
                ) as response:
                    status, success = response.status_code, response.is_success
            except httpx.HTTPError as err:
                error = f"{type(err).__name__}: {err}"
                continue
            if success:
                return None
            error = f"HTTP {status}"
        return error

    async def aclose(self) -> None:
        await self._client.aclose()


def payload(report: RunReport, findings: list[Finding], labels: dict[str, str]) -> dict[str, Any]:
    ordered = sorted(findings, key=lambda f: (-f.severity.rank, f.identifier, f.kind))
    return {
        "event": "atwhois.audit",
        **{k: v for k, v in report.to_json().items() if k != "webhook_delivered"},
        "findings": [{**f.to_json(), "label": labels.get(f.identifier)} for f in ordered],
    }


def slack(data: dict[str, Any]) -> dict[str, str]:
    """The payload as a Slack (or Mattermost, Discord /slack) incoming-webhook message."""
    counts = data["findings_by_severity"]
    head = ", ".join(f"{counts[s]} {s}" for s in ("critical", "warning", "info") if counts.get(s))
    lines = [f"*atwhois audit run {data['run_id']}* ({data['source']}): {head}"]
    for f in data["findings"][:SLACK_LINES]:
        who = f["identifier"] + (f" ({f['label']})" if f["label"] else "")
        lines.append(f"• *{f['severity']}* {who}: {f['kind']}: {f['detail']}")
    if len(data["findings"]) > SLACK_LINES:
        lines.append(f"… and {len(data['findings']) - SLACK_LINES} more")
    return {"text": "\n".join(lines)}
