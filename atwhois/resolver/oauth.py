"""OAuth discovery's documents and token responses read by the atproto profile (docs/spec.md:
O-*), pure: a PDS's protected resource metadata, its authorization server's metadata, the
issuer's origin form, a token response's `sub` and `scope`. Bytes or decoded JSON in, the
value checked or `OAuthRefused` naming the rule out; the fetching is `resolver.oauth_flow`'s.

What the verdicts are: `OAuthServer` (an account's authorization server found, or why not:
`ok`, `invalid` with the rule, `not_verified` with the identity's status, `unavailable`)
and `TokenCheck` (a token response bound to its account and issuer, or not)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from .errors import InvalidData
from .handle import account_did
from .identity import Identity
from .syntax import is_valid_handle
from .untrusted import parse_json

PROTECTED_RESOURCE_PATH = "/.well-known/oauth-protected-resource"  # O-PRM-1
AUTHORIZATION_SERVER_PATH = "/.well-known/oauth-authorization-server"  # O-ASM-1
_LOOPBACK = ("localhost", "127.0.0.1", "::1")
_DEFAULT_PORTS = {"https": 443, "http": 80}


class OAuthRefused(InvalidData):
    """A document or a token response the atproto profile of OAuth refuses; `rule` names
    the rule, `message` says why without it."""

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(f"{message} [{rule}]")
        self.message, self.rule = message, rule


Outcome = Literal["ok", "invalid", "not_verified", "unavailable"]


@dataclass(frozen=True, slots=True)
class OAuthServer:
    """An account's OAuth authorization server, found from its identity and checked (O-*):
    `ok` (the verified identity, its PDS, the PDS's protected resource metadata, the
    server's metadata), `invalid` (a document broke `rule`), `not_verified` (the identity
    itself does not verify: `status` says how), `unavailable` (transient)."""

    outcome: Outcome
    query: str
    did: str | None = None
    handle: str | None = None  # the verified handle, or handle.invalid
    pds: str | None = None  # the PDS's origin
    issuer: str | None = None  # the authorization server, named by the PDS (O-PRM-2)
    rule: str | None = None
    reason: str | None = None
    status: str | None = None  # the identity's status
    protected_resource: dict[str, Any] | None = None  # as the PDS serves it
    authorization_server: dict[str, Any] | None = None  # as the issuer serves it
    kept_s: float | None = None  # how long the documents had been kept (None: fetched now)
    identity: Identity | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__slots__}
        out["identity"] = self.identity.to_json() if self.identity is not None else None
        return {**out, "ok": self.ok}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OAuthServer:
        fields = {name: data.get(name) for name in cls.__slots__}
        identity = data.get("identity")
        fields["identity"] = Identity.from_json(identity) if identity is not None else None
        return cls(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class TokenCheck:
    """A token response checked (O-TOK-*): its `sub` an atproto DID, its `scope` with
    `atproto`, `sub` the DID the flow started from (when it started from one), and `sub`'s
    own authorization server, resolved afresh, the session's `issuer` (`server`)."""

    outcome: Literal["ok", "invalid", "unavailable"]
    issuer: str
    did: str | None = None  # the DID the flow started from (None: it started from a server)
    sub: str | None = None
    scope: str | None = None
    rule: str | None = None
    reason: str | None = None
    server: OAuthServer | None = None  # sub's authorization server, as found for this check

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__slots__}
        out["server"] = self.server.to_json() if self.server is not None else None
        return {**out, "ok": self.ok}

    def refused(self, rule: str, reason: str) -> TokenCheck:
        return dataclasses.replace(self, outcome="invalid", rule=rule, reason=reason)


# --- origins ---------------------------------------------------------------------------


def origin_of(url: str) -> str:
    """A URL's origin as the reference writes it (`new URL(url).origin`): the scheme and
    host in lower case, the port only when not the scheme's own. A PDS endpoint that passed
    DOC-PDS-2 has one."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    port = parts.port
    shown = f":{port}" if port is not None and port != _DEFAULT_PORTS.get(parts.scheme) else ""
    return f"{parts.scheme.lower()}://{host}{shown}"


def check_issuer(value: Any, *, dev: bool) -> str:
    """O-ISS-1: an authorization server's issuer is an origin in its one written form:
    https, a host name (plain http only for a loopback host in development), an optional
    port not the default, nothing else. Raises `OAuthRefused`."""
    if not isinstance(value, str):
        raise OAuthRefused("an issuer is a string, an https origin", "O-ISS-1")
    why = _not_an_origin(value, dev=dev)
    if why is not None:
        raise OAuthRefused(f"{value[:120]!r} is not an issuer: {why}", "O-ISS-1")
    return value


def _not_an_origin(value: str, *, dev: bool) -> str | None:
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return "not a URL"
    host = parts.hostname or ""
    if parts.scheme not in _DEFAULT_PORTS:
        return "not an https URL"
    if "@" in parts.netloc:
        return "credentials are not part of an origin"
    if parts.path:
        return "a path (even /) is not part of an origin"
    if "?" in value or "#" in value:
        return "a query or fragment is not part of an origin"
    if port == 0:
        return "port 0 is no port"
    loopback = host in _LOOPBACK
    if parts.scheme == "http" and not (dev and loopback):
        return "plain http only for localhost, in development"
    if parts.scheme == "https" and loopback:
        return "https on a loopback host is no server's"
    if not loopback and not is_valid_handle(host):
        return "the host must be a domain name (not an address)"
    if host.endswith(".local"):
        return "a .local name is no server's on the internet"
    canonical = origin_of(value)
    if value != canonical:
        return f"not written as an origin is ({canonical})"
    return None


def _is_web_url(value: Any, *, dev: bool) -> bool:
    """An endpoint: https to a host (plain http to a loopback host in development)."""
    if not isinstance(value, str):
        return False
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises on a port that is not one
    except ValueError:
        return False
    host = parts.hostname or ""
    return bool(host) and (
        parts.scheme == "https" or (parts.scheme == "http" and dev and host in _LOOPBACK)
    )


# --- the two documents -----------------------------------------------------------------


def read_document(body: bytes, content_type: str | None, url: str) -> dict[str, Any]:
    """O-FETCH-2: a metadata document is served as `application/json` and is a JSON object
    (read strictly: no key given twice)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        said = repr(content_type or "no content type")[:60]
        raise OAuthRefused(f"{url[:120]}: served as {said}, not application/json", "O-FETCH-2")
    try:
        document = parse_json(body)
    except ValueError:
        raise OAuthRefused(f"{url[:120]}: not JSON", "O-FETCH-2") from None
    if not isinstance(document, dict):
        raise OAuthRefused(f"{url[:120]}: not a JSON object", "O-FETCH-2")
    return document


def check_protected_resource(document: dict[str, Any], pds: str, *, dev: bool) -> str:
    """O-PRM-1, O-PRM-2, O-ISS-1: the PDS's protected resource metadata names the PDS's own
    origin (`pds`) and exactly one authorization server; that server's issuer."""
    resource = document.get("resource")
    if resource != pds:
        said = repr(resource)[:120]
        raise OAuthRefused(f"resource is {said}, not the PDS's origin {pds}", "O-PRM-1")
    servers = document.get("authorization_servers")
    if not isinstance(servers, list) or len(servers) != 1 or not isinstance(servers[0], str):
        said = f"{len(servers)} entries" if isinstance(servers, list) else repr(servers)[:60]
        why = f"authorization_servers must name exactly one server ({said})"
        raise OAuthRefused(why, "O-PRM-2")
    return check_issuer(servers[0], dev=dev)


def check_server_metadata(
    document: dict[str, Any], issuer: str, resource: str, *, dev: bool
) -> None:
    """O-ASM-1..13: the authorization server's metadata, held to the atproto profile's
    MUSTs, each refused under its own rule (the first broken, in the order below)."""
    said = document.get("issuer")
    if said != issuer:
        said = repr(said)[:120]
        raise OAuthRefused(f"issuer is {said}, not the server named {issuer}", "O-ASM-1")
    if document.get("require_pushed_authorization_requests") is not True:
        raise OAuthRefused("require_pushed_authorization_requests must be true", "O-ASM-2")
    for field in ("pushed_authorization_request_endpoint", "authorization_endpoint"):
        _endpoint(document, field, dev)
    _endpoint(document, "token_endpoint", dev)
    _includes(document, "dpop_signing_alg_values_supported", ["ES256"], "O-ASM-3")
    _true(document, "client_id_metadata_document_supported", "O-ASM-4")
    _true(document, "authorization_response_iss_parameter_supported", "O-ASM-5")
    _includes(document, "scopes_supported", ["atproto"], "O-ASM-6")
    _includes(document, "response_types_supported", ["code"], "O-ASM-7")
    grants = ["authorization_code", "refresh_token"]
    _includes(document, "grant_types_supported", grants, "O-ASM-8")
    _includes(document, "code_challenge_methods_supported", ["S256"], "O-ASM-9")
    methods = ["none", "private_key_jwt"]
    _includes(document, "token_endpoint_auth_methods_supported", methods, "O-ASM-10")
    signing = "token_endpoint_auth_signing_alg_values_supported"
    if "none" in _includes(document, signing, ["ES256"], "O-ASM-11"):
        raise OAuthRefused(f"{signing} must not include none", "O-ASM-11")
    if document.get("require_request_uri_registration", True) is not True:
        raise OAuthRefused("require_request_uri_registration, when given, is true", "O-ASM-12")
    if "protected_resources" not in document:
        return
    if resource not in _strings(document["protected_resources"], "protected_resources", "O-ASM-13"):
        raise OAuthRefused(f"protected_resources does not include {resource}", "O-ASM-13")


def _endpoint(document: dict[str, Any], field: str, dev: bool) -> None:
    if not _is_web_url(document.get(field), dev=dev):
        raise OAuthRefused(f"{field} must be an https URL", "O-ASM-2")


def _true(document: dict[str, Any], field: str, rule: str) -> None:
    if document.get(field) is not True:
        raise OAuthRefused(f"{field} must be true", rule)


def _strings(value: Any, field: str, rule: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise OAuthRefused(f"{field} must be an array of strings", rule)
    return value


def _includes(document: dict[str, Any], field: str, needed: Sequence[str], rule: str) -> list[str]:
    values = _strings(document.get(field), field, rule)
    missing = [value for value in needed if value not in values]
    if missing:
        raise OAuthRefused(f"{field} must include {' and '.join(missing)}", rule)
    return values


# --- after the token exchange ----------------------------------------------------------


def read_token_response(response: Any) -> tuple[str, str]:
    """O-TOK-1..3: a token response (its JSON text, or decoded) of the atproto profile: a
    DPoP access token, `sub` an atproto DID, `scope` including `atproto`; its sub and scope.
    Raises `OAuthRefused`."""
    if isinstance(response, bytes | str):
        try:
            response = parse_json(response)
        except ValueError:
            raise OAuthRefused("the token response is not JSON", "O-TOK-1") from None
    if not isinstance(response, dict):
        raise OAuthRefused("the token response is not a JSON object", "O-TOK-1")
    if response.get("token_type") != "DPoP":
        said = repr(response.get("token_type"))[:40]
        raise OAuthRefused(f"token_type is {said}, not DPoP", "O-TOK-1")
    token = response.get("access_token")
    if not isinstance(token, str) or not token:
        raise OAuthRefused("no access_token", "O-TOK-1")
    if "id_token" in response:
        raise OAuthRefused("an id_token is OpenID's, not the atproto profile's", "O-TOK-1")
    sub = response.get("sub")
    if not isinstance(sub, str):
        raise OAuthRefused("no sub: the atproto profile returns the account's DID", "O-TOK-2")
    try:
        account_did(sub)
    except InvalidData as err:
        raise OAuthRefused(f"sub {sub[:80]!r} is no account's DID: {err}", "O-TOK-2") from None
    scope = response.get("scope")
    if not isinstance(scope, str):
        raise OAuthRefused("no scope: the atproto profile always returns it", "O-TOK-3")
    if "atproto" not in scope.split(" "):
        raise OAuthRefused(f"scope {scope[:120]!r} does not include atproto", "O-TOK-3")
    return sub, scope
