"""Fuzz targets for OAuth discovery (issue 68): a PDS's protected resource metadata and its
server's metadata, as bytes (the reference's own with bytes flipped or cut, or random) and
as JSON (the reference's with parts swapped, deleted or repeated), through the pure rules
and through the whole flow over `atwhois.testing.World`; and token responses. Each may end
only as the code promises: `OAuthRefused` naming a rule, a verdict of `ok` only for
documents every rule passes, `invalid` always with a rule."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import strategies as st

import atwhois
from atwhois.resolver.oauth import (
    OAuthRefused,
    check_protected_resource,
    check_server_metadata,
    read_document,
    read_token_response,
)
from atwhois.testing import World

from .fuzz_inputs import json_bytes, json_values, mutated_json
from .oauth import VECTORS, vector

PDS = "https://pds.world.example"
_RESOURCES = [vector("protected-resource-live.json"), vector("protected-resource-entryway.json")]
_SERVERS = [vector("authorization-server-live.json"), vector("authorization-server-entryway.json")]
SEEDS = [(VECTORS / name).read_bytes() for name in sorted(p.name for p in VECTORS.iterdir())]


def _refused(err: OAuthRefused) -> None:
    assert err.rule.startswith("O-") and str(err).endswith(f"[{err.rule}]")


def documents(pair: tuple[bytes, bytes]) -> None:
    """Any two bodies, read as a PDS's and its server's documents, under either resource
    and in development or not: the issuer found, or refused naming a rule."""
    resource_body, server_body = pair
    for pds, dev in (("https://live.test", True), ("https://pds.entryway.test", False)):
        try:
            resource = read_document(resource_body, "application/json", pds)
            issuer = check_protected_resource(resource, pds, dev=dev)
            assert issuer.startswith(("https://", "http://"))
            server = read_document(server_body, "application/json; charset=utf-8", issuer)
            check_server_metadata(server, issuer, pds, dev=dev)
        except OAuthRefused as err:
            _refused(err)


def flow(pair: tuple[Any, Any]) -> None:
    """Any two JSON values served as an account's PDS's documents in a world (the second at
    the server the first names): the flow's verdict is ok exactly when the pure rules pass
    them, else invalid naming the rule they name."""
    resource, server = pair
    issuer, expected = PDS, None
    try:
        issuer = check_protected_resource(_served(resource, "O-PRM-1"), PDS, dev=False)
        check_server_metadata(_served(server, "O-ASM-1"), issuer, PDS, dev=False)
    except OAuthRefused as err:
        expected = err.rule
    world = World()
    did = world.add("alice.example.org")
    world.oauth_documents = {
        f"{PDS}/.well-known/oauth-protected-resource": resource,
        f"{issuer}/.well-known/oauth-authorization-server": server,
    }
    found = asyncio.run(atwhois.aoauth_server(did, directory=world))
    json.dumps(found.to_json())
    assert (found.outcome, found.rule) == ("invalid" if expected else "ok", expected), found


def _served(value: Any, absent: str) -> dict[str, Any]:
    """What the flow reads of `value` served: None is no document (a 404, the document's
    own rule), anything but an object is refused as it is read."""
    if value is None:
        raise OAuthRefused("no document", absent)
    if not isinstance(value, dict):
        raise OAuthRefused("not an object", "O-FETCH-2")
    return value


def token(response: Any) -> None:
    """Any token response, as bytes or decoded: its sub and scope, or refused naming a rule."""
    try:
        sub, scope = read_token_response(response)
    except OAuthRefused as err:
        _refused(err)
        return
    assert sub.startswith(("did:plc:", "did:web:")) and "atproto" in scope.split(" ")


_mutated = st.one_of(mutated_json(_RESOURCES), json_values)
document_values = st.tuples(_mutated, st.one_of(mutated_json(_SERVERS), json_values))
_TOKENS = [vector("token-response.json")]
token_responses = st.one_of(
    mutated_json(_TOKENS),
    mutated_json(_TOKENS).map(json_bytes),
    json_values,
    st.binary(max_size=200),
)
