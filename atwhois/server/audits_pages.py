"""The audits in a browser: `/audits` (the watch-list with each identity's state and
severity, the recent findings) and `/audits/{identifier}` (its checks over time). Adding
and removing take the same token as the API's write endpoints, typed into the form."""

from __future__ import annotations

import time
import urllib.parse

from aiohttp import web

from atwhois.audit import AuditStore
from atwhois.audit.checks import iso
from atwhois.audit.findings import STATE_SEVERITY
from atwhois.audit.store import LabelTooLong
from atwhois.resolver import Status
from atwhois.resolver.errors import InvalidInput

from .service import Service
from .web import page

RECENT = 7 * 24 * 3600  # findings of the last week


class AuditPages:
    def __init__(self, service: Service, store: AuditStore) -> None:
        self.service, self.store = service, store

    def attach(self, app: web.Application) -> None:
        app.router.add_get("/audits", self.overview)
        app.router.add_get("/audits/{identifier}", self.identity)
        app.router.add_post("/audits/watch", self.edit)

    async def overview(self, request: web.Request) -> web.Response:
        """The page; after an edit (`?watched=ID` or `?unwatched=ID`) a banner that says
        what was done, composed here: the query names an identifier, never the text shown."""
        for key, done in (("watched", "{} is watched."), ("unwatched", "{} is no longer watched.")):
            if key in request.query:
                try:
                    identifier = self.service.cached.parse(request.query[key]).value
                except InvalidInput:
                    break
                return self._overview(done.format(identifier))
        return self._overview()

    def _overview(self, message: str = "", status: int = 200, tone: str = "ok") -> web.Response:
        watched = self.store.watch_list()
        states = self.store.states(w.identifier for w in watched)
        rows = []
        for w in watched:
            state = states.get(w.identifier)
            severity = STATE_SEVERITY[Status(state.status)] if state else "unchecked"
            rows.append(
                {
                    "identifier": w.identifier,
                    "label": w.label,
                    "status": state.status if state else "not checked yet",
                    "severity": str(severity),
                    "since": iso(state.since) if state else None,
                }
            )
        findings = self.store.findings(since=time.time() - RECENT)[::-1][:100]
        return page(
            "audits.html",
            status=status,
            title="Audits — atwhois",
            rows=rows,
            findings=[f.to_json() for f in findings],
            message=message,
            message_tone=tone,
        )

    async def identity(self, request: web.Request) -> web.Response:
        identifier = request.match_info["identifier"]
        labels = {w.identifier: w.label for w in self.store.watch_list()}
        return page(
            "audit_identity.html",
            title=f"{identifier}: audits — atwhois",
            identifier=identifier,
            watched=identifier in labels,
            label=labels.get(identifier),
            checks=[c.to_json() for c in self.store.history(identifier)],
        )

    async def edit(self, request: web.Request) -> web.Response:
        form = await request.post()
        if not self.service.token_matches(str(form.get("token", ""))):
            disabled = not self.service.settings.refresh_token
            why = "editing is disabled: no token configured" if disabled else "wrong token"
            return self._overview(f"Not changed: {why}.", 403, "bad")
        try:
            identifier = self.service.cached.parse(str(form.get("identifier", ""))).value
        except InvalidInput as err:
            return self._overview(f"Not changed: {err}", 400, "bad")
        if form.get("action") == "remove":
            self.store.watch_remove(identifier)
            done = "unwatched"
        else:
            label = str(form.get("label", "")).strip() or None
            try:
                self.store.watch_add(identifier, label)
            except LabelTooLong as err:
                return self._overview(f"Not changed: {err}", 400, "bad")
            done = "watched"
        # after a POST, a GET: reloading the page does not post again
        query = urllib.parse.urlencode({done: identifier})
        return web.Response(status=303, headers={"Location": f"/audits?{query}"})
