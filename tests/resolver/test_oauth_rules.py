"""OAuth discovery's rules, pure (`resolver/oauth.py`): the reference's own documents
(tests/vectors/oauth/, written by its encoders) pass; each document that breaks one rule of
the atproto profile is refused naming that rule; an issuer is an origin in one written form;
a token response shaped as the reference's `buildTokenResponse` passes and each part of it
the profile requires is refused when missing or wrong. The documents `atwhois.testing`
serves (and the test network's entryway) are the reference's, byte for byte; what is kept of
them is bounded and expires (O-CACHE-1)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from atwhois.resolver.oauth import (
    OAuthRefused,
    OAuthServer,
    check_issuer,
    check_protected_resource,
    check_server_metadata,
    origin_of,
    read_document,
    read_token_response,
)
from atwhois.resolver.oauth_flow import KeptDocuments
from atwhois.testing import authorization_server_metadata, protected_resource_metadata
from tests.support.oauth import BROKEN, TOKEN_BROKEN, VECTORS, vector

LIVE = "https://live.test"
ENTRYWAY = "https://entryway.test"
ENTRYWAY_PDS = "https://pds.entryway.test"


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def test_the_world_serves_the_reference_s_documents_byte_for_byte() -> None:
    """`atwhois.testing`'s documents (what `World` and the test network's entryway serve)
    are what the reference's encoders wrote: the same fields, values and order."""
    live = authorization_server_metadata(LIVE, protected_resources=[LIVE])
    assert compact(live) == (VECTORS / "authorization-server-live.json").read_text()
    entryway = authorization_server_metadata(ENTRYWAY)
    assert compact(entryway) == (VECTORS / "authorization-server-entryway.json").read_text()
    for resource, issuer, name in ((LIVE, LIVE, "live"), (ENTRYWAY_PDS, ENTRYWAY, "entryway")):
        made = compact(protected_resource_metadata(resource, issuer))
        assert made == (VECTORS / f"protected-resource-{name}.json").read_text()


def test_the_reference_s_documents_pass_every_rule() -> None:
    """O-PRM-1, O-PRM-2, O-ASM-1..13: a PDS that is its own server, and one behind an
    entryway, both as the reference writes them."""
    for pds, name in ((LIVE, "live"), (ENTRYWAY_PDS, "entryway")):
        issuer = check_protected_resource(vector(f"protected-resource-{name}.json"), pds, dev=True)
        assert issuer == (LIVE if name == "live" else ENTRYWAY)
        check_server_metadata(vector(f"authorization-server-{name}.json"), issuer, pds, dev=True)


def refused(rule: str) -> Any:
    return pytest.raises(OAuthRefused, match=rf"\[{rule}\]$")


# --- the protected resource metadata -----------------------------------------------------


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"resource": "https://other.test"}, "O-PRM-1"),
        ({"resource": LIVE + "/"}, "O-PRM-1"),  # the origin, exactly
        ({"resource": None}, "O-PRM-1"),
        ({"authorization_servers": []}, "O-PRM-2"),
        ({"authorization_servers": [LIVE, ENTRYWAY]}, "O-PRM-2"),  # exactly one
        ({"authorization_servers": LIVE}, "O-PRM-2"),
        ({"authorization_servers": [7]}, "O-PRM-2"),
        ({"authorization_servers": None}, "O-PRM-2"),
        ({"authorization_servers": [LIVE + "/"]}, "O-ISS-1"),
        ({"authorization_servers": ["http://live.test"]}, "O-ISS-1"),
    ],
)
def test_a_protected_resource_document_is_refused_naming_its_rule(
    change: dict[str, Any], rule: str
) -> None:
    document = {**vector("protected-resource-live.json"), **change}
    if change.get("resource", "") is None:
        del document["resource"]
    with refused(rule):
        check_protected_resource(document, LIVE, dev=True)


# --- the issuer's form -----------------------------------------------------------------


@pytest.mark.parametrize(
    "issuer",
    [
        "https://live.test/",  # a path, even /
        "https://live.test/oauth",  # the reference's schema takes a path; the spec does not
        "https://live.test:443",  # the default port written
        "https://LIVE.test",  # not in its canonical case
        "https://user:pass@live.test",
        "https://live.test?x=1",
        "https://live.test#x",
        "https://live.test:0",
        "https://live.test:99999",
        "http://live.test",  # plain http, not loopback
        "https://localhost",  # https on a loopback host
        "https://127.0.0.1",
        "https://10.0.0.1",  # an address, not a name
        "https://[2001:db8::1]",
        "https://printer.local",
        "https://host",  # one label
        "ftp://live.test",
        "live.test",
        "",
    ],
)
def test_an_issuer_that_is_not_an_origin_in_its_form_is_refused(issuer: str) -> None:
    """O-ISS-1, in development too (where plain http to a loopback host is allowed)."""
    with refused("O-ISS-1"):
        check_issuer(issuer, dev=True)


def test_an_issuer_is_an_https_origin_with_a_port_when_not_443() -> None:
    """O-ISS-1: what passes; plain http only to a loopback host, only in development."""
    for issuer in (
        "https://bsky.social",
        "https://pds.example.com:8443",
        "https://xn--bcher-kva.example",
    ):
        assert check_issuer(issuer, dev=False) == issuer
    for issuer in ("http://localhost:2583", "http://127.0.0.1:2583", "http://[::1]:2583"):
        assert check_issuer(issuer, dev=True) == issuer
        with refused("O-ISS-1"):
            check_issuer(issuer, dev=False)
    with refused("O-ISS-1"):
        check_issuer(["https://bsky.social"], dev=False)


def test_an_origin_is_written_as_the_reference_writes_one() -> None:
    assert origin_of("https://PDS.Example.com:443/") == "https://pds.example.com"
    assert origin_of("https://pds.example.com:8443") == "https://pds.example.com:8443"
    assert origin_of("http://localhost:80") == "http://localhost"
    assert origin_of("http://[::1]:2583/") == "http://[::1]:2583"


# --- the authorization server's metadata -----------------------------------------------


@pytest.mark.parametrize("case", list(BROKEN))
def test_metadata_missing_a_must_is_refused_naming_its_rule(case: str) -> None:
    change, rule = BROKEN[case]
    document = vector("authorization-server-live.json")
    change(document)
    with refused(rule):
        check_server_metadata(document, LIVE, LIVE, dev=True)


def test_what_the_profile_leaves_open_passes() -> None:
    """O-ASM-12 and O-ASM-13 when left out; fields the profile does not read, anything."""
    document = vector("authorization-server-live.json")
    for field in ("require_request_uri_registration", "protected_resources", "jwks_uri"):
        del document[field]
    document["request_object_signing_alg_values_supported"] = ["none"]
    document["x-extra"] = {"anything": [None]}
    check_server_metadata(document, LIVE, LIVE, dev=True)
    local = authorization_server_metadata("http://localhost:2583")  # development only
    check_server_metadata(local, "http://localhost:2583", "http://localhost:2583", dev=True)
    with refused("O-ASM-2"):
        check_server_metadata(local, "http://localhost:2583", "http://localhost:2583", dev=False)


@pytest.mark.parametrize(
    ("body", "content_type", "rule"),
    [
        (b"{}", "text/html", "O-FETCH-2"),
        (b"{}", None, "O-FETCH-2"),
        (b"{}", "application/jsonp", "O-FETCH-2"),
        (b"[1]", "application/json", "O-FETCH-2"),
        (b"<html>", "application/json", "O-FETCH-2"),
        (b'{"a": 1, "a": 2}', "application/json", "O-FETCH-2"),  # a key given twice
        (b"[" * 100_000, "application/json", "O-FETCH-2"),
    ],
)
def test_a_document_is_json_served_as_json(
    body: bytes, content_type: str | None, rule: str
) -> None:
    with refused(rule):
        read_document(body, content_type, "https://live.test/.well-known/x")


def test_the_json_content_type_is_read_without_its_parameters_or_case() -> None:
    """O-FETCH-2: the reference PDS says `application/json; charset=utf-8` for one document
    and `application/json` for the other."""
    for said in ("application/json; charset=utf-8", "Application/JSON", "application/json"):
        assert read_document(b'{"a": 1}', said, "u") == {"a": 1}


# --- the token response ----------------------------------------------------------------


def test_the_reference_s_token_response_passes() -> None:
    """O-TOK-1..3, as text, bytes or decoded."""
    raw = (VECTORS / "token-response.json").read_text()
    for given in (raw, raw.encode(), json.loads(raw)):
        sub, scope = read_token_response(given)
        assert (sub, scope) == ("did:plc:ewvi7nxzyoun6zhxrhs64oiz", "atproto transition:generic")


@pytest.mark.parametrize("case", list(TOKEN_BROKEN))
def test_a_token_response_is_refused_naming_its_rule(case: str) -> None:
    change, rule = TOKEN_BROKEN[case]
    response = {**vector("token-response.json"), **change}
    for field, value in change.items():
        if value is None:
            del response[field]
    with refused(rule):
        read_token_response(response)


def test_a_token_response_that_is_no_object_is_refused() -> None:
    for given in (b"not json", "[]", 7, None, b'{"sub": 1, "sub": 2}'):
        with refused("O-TOK-1"):
            read_token_response(given)


def test_a_verdict_reads_back_from_its_json() -> None:
    server = OAuthServer("invalid", "alice.test", did="did:plc:x", rule="O-ASM-6", reason="r")
    back = OAuthServer.from_json(json.loads(json.dumps(server.to_json())))
    assert back == server and server.to_json()["ok"] is False


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_the_documents_kept_are_bounded_and_expire() -> None:
    """O-CACHE-1: past their lifetime documents are gone; past the bound in bytes, the
    least recently used go first."""
    clock = Clock()
    kept = KeptDocuments(lifetime=300, max_bytes=3000, clock=clock)
    documents = ("https://a.example", {"resource": "a"}, {"issuer": "a"})
    for pds in ("https://a.example", "https://b.example"):
        kept.put(pds, documents, 1000)
    assert kept.get("https://a.example") is not None  # used: b is now the older
    kept.put("https://c.example", documents, 1500)
    assert kept.get("https://b.example") is None and kept.get("https://c.example") is not None
    clock.now += 300
    assert kept.get("https://a.example") is not None
    clock.now += 1
    assert kept.get("https://a.example") is None
