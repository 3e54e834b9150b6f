"""DID -> document rules: where a DID's document lives and what an HTTP answer means.
Pure functions over the config and a fetched `Response` (the fetch itself is the caller's).
"""

from __future__ import annotations

from .config import Config
from .errors import DidDeactivated, NotFound, UnconfirmedAbsence, UpstreamFailure
from .response import Response
from .syntax import did_method, parse_did_web
from .untrusted import parse_json


def document_url(did: str, config: Config) -> str:
    if did_method(did) == "plc":
        return f"{config.plc_url.rstrip('/')}/{did}"  # D-PLC-2
    web = parse_did_web(did, dev=config.dev, allow_test_tld=config.allow_test_tld)
    if web.host == "localhost":
        port = f":{web.port}" if web.port else ""
        return f"http://localhost{port}/.well-known/did.json"  # D-WEB-3
    return f"https://{web.host}/.well-known/did.json"  # D-WEB-4


def check_http_response(response: Response, what: str) -> None:
    """H-WK-2 / D-WEB-4: any 2xx is an answer; 404 and 410 are absence; the rest is a
    failure (never absence: a 5xx, a 403 from a firewall, a 429 may pass)."""
    if 200 <= response.status < 300:
        return
    if response.status in (404, 410):
        raise NotFound(f"{what}: HTTP {response.status}")
    raise UpstreamFailure(f"{what}: HTTP {response.status}")


def check_plc_response(response: Response, did: str) -> None:
    """P-API-1: 404 "not registered" is absence; "DID not available"
    (404 from the reference server, 410 per the API spec) is a tombstone; every other
    non-2xx status is a transient failure."""
    if 200 <= response.status < 300:
        return
    message = ""
    try:
        body = parse_json(response.body)
        message = str(body.get("message", "")) if isinstance(body, dict) else ""
    except ValueError:
        pass
    if response.status == 410 or (response.status == 404 and "not available" in message):
        raise DidDeactivated(f"{did} is deactivated (tombstoned): HTTP {response.status}")
    if response.status == 404:
        if not mirror_was_current(response):
            raise UnconfirmedAbsence(
                f"{did} is not known to the PLC mirror, which had not read its upstream since "
                "this lookup began: a DID created meanwhile is not known yet [P-API-2]"
            )
        raise NotFound(f"{did} is not registered in the PLC directory")
    # Any other status says nothing about the DID: a 403 from a firewall, a 429, a 400 for
    # a syntactically valid DID are the directory's trouble, to be retried, never absence.
    raise UpstreamFailure(f"PLC directory: HTTP {response.status}")


def mirror_was_current(response: Response) -> bool:
    """Whether the answer rests on a view of the directory as it was when it was asked
    (P-API-2): the directory itself always; an atwhois PLC mirror when it says `current=yes`
    (it read its upstream after the request came; one that does not say so may be behind)."""
    if response.provenance is None:
        return True
    return _mirror_fields(response).get("current") == "yes"


def _mirror_fields(response: Response) -> dict[str, str]:
    return mirror_fields(response.provenance or "")


def mirror_fields(provenance: str) -> dict[str, str]:
    """The `Atwhois-Plc-Mirror` header's `name=value` fields (and `verified`), as sent."""
    return dict(part.strip().partition("=")[::2] for part in provenance[:400].split(";"))


VIEW_AGE_MAX = 10.0**9  # seconds; a `complete=` older than about 30 years is not an age


def view_age(provenance: str | None) -> float | None:
    """How long before it answered the source's view of the directory was complete
    (P-API-2): 0 for the directory itself (no `Atwhois-Plc-Mirror` header), what an
    atwhois mirror says in `complete=` (`4.2s`), None when that is not known (a mirror
    backfilling, one too old to say, a field that is not a number of seconds)."""
    if provenance is None:
        return 0.0
    text = mirror_fields(provenance).get("complete", "")
    try:
        age = float(text.removesuffix("s")) if text.endswith("s") else None
    except ValueError:
        return None
    return age if age is not None and 0.0 <= age <= VIEW_AGE_MAX else None


def mirror_note(response: Response) -> str | None:
    """What an atwhois PLC mirror says of its answer (`Atwhois-Plc-Mirror:
    verified; upstream=URL; behind=1.2s; cursor=TIME`), as evidence text. Only the known
    fields are read, and only printable text, capped: a header is the server's to write."""
    if not response.provenance:
        return None
    fields = _mirror_fields(response)
    if "verified" not in fields:
        return None
    upstream = "".join(c for c in fields.get("upstream", "?") if c.isprintable())
    behind = fields.get("behind", "?")
    lag = "backfilling" if behind == "backfilling" else f"{behind} behind"
    return f"verified PLC mirror of {upstream[:200]} ({lag[:40]})"
