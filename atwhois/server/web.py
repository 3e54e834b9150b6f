"""The daemon in a browser: `GET /` (a lookup form) and `/id/{identifier}` (the `Identity`
report as a page: the verdict, each method's evidence, the document, a did:plc's history).

Server-rendered (Jinja2, autoescaping on: every value a stranger controls is escaped), no
script at all, one stylesheet of its own; a strict Content-Security-Policy on every page.
The pages read what the API reads, through the same cache."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web

from atwhois.resolver import Status
from atwhois.resolver.errors import ResolutionError
from atwhois.resolver.outcome import VERDICTS
from atwhois.resolver.plc import Audit

from .service import Service

STATIC = Path(__file__).with_name("static")
# The files the pages link to, served by name from this table: a path a stranger sends never
# reaches the file system (a name longer than it allows was a 500: ENAMETOOLONG).
STATIC_FILES = {path.name: path for path in STATIC.iterdir() if path.is_file()}
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader(__package__ or "atwhois.server", "templates"),
    autoescape=True,  # every template, whatever its name
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
# How a status looks: a word and a tone (the tone is colour *and* an icon and a word).
TONES = {Status.VERIFIED: "ok", Status.UNAVAILABLE: "unknown"}


def page(template: str, status: int = 200, **context: Any) -> web.Response:
    body = _TEMPLATES.get_template(template).render(**context)
    return web.Response(
        text=body, status=status, content_type="text/html", charset="utf-8", headers=PAGE_HEADERS
    )


def tone(status: str) -> str:
    return TONES.get(Status(status), "bad")


_TEMPLATES.globals.update(
    tone=tone, verdict=lambda s: VERDICTS[Status(s)], quote=urllib.parse.quote
)


class WebPages:
    def __init__(self, service: Service) -> None:
        self.service = service

    def attach(self, app: web.Application) -> None:
        app.router.add_get("/", self.home)
        app.router.add_get("/id", self.search)
        app.router.add_get("/id/{identifier}", self.identity)
        app.router.add_get("/static/{name}", self.static)

    async def static(self, request: web.Request) -> web.StreamResponse:
        path = STATIC_FILES.get(request.match_info["name"])
        if path is None:
            return web.Response(status=404, text="no such file")
        return web.FileResponse(path, headers={"Cache-Control": "public, max-age=3600"})

    async def home(self, _: web.Request) -> web.Response:
        return page("home.html", title="atwhois")

    async def search(self, request: web.Request) -> web.Response:
        """The form's GET: to the permalink of what was typed."""
        typed = request.query.get("q", "").strip()
        if not typed:
            return web.Response(status=303, headers={"Location": "/"})
        return web.Response(
            status=303, headers={"Location": "/id/" + urllib.parse.quote(typed, safe="")}
        )

    async def identity(self, request: web.Request) -> web.Response:
        identifier = request.match_info["identifier"].strip()
        cached = self.service.cached
        identity = await cached.lookup(identifier)
        # A person reads one page at a time: with the setting (or ?check_pds=1), the PDS is
        # asked now, as `lookup --check-pds` does; the JSON routes ask only when asked to.
        asked = request.query.get("check_pds") in ("1", "true")
        if identity.did and (cached.config.check_pds or asked):
            identity = await cached.check_pds(identity)
        report = identity.to_json(include_document=True)
        history: Audit | str | None = None  # the log, or why it could not be read
        if identity.did and identity.did.startswith("did:plc:"):
            try:  # kept a while and fetched once for concurrent views (`cache.histories`)
                history = (await cached.histories.get(identity.did)).audit
            except ResolutionError as err:
                history = str(err)
        return page(
            "identity.html",
            status=400 if identity.status is Status.INVALID_INPUT else 200,
            title=f"{identifier} — atwhois",
            typed=identifier,
            r=report,
            document=(
                json.dumps(report["did_document"], indent=2, ensure_ascii=False)
                if report.get("did_document") is not None
                else None
            ),
            history=history,
        )
