"""The OAuth documents and token responses the tests break, one rule at a time: the
reference's own (tests/vectors/oauth/, written by its encoders) and, for each MUST of the
atproto profile, a change that breaks it alone with the rule it breaks (the pure rules'
tests, the test network's hostile servers and the fuzz target share them)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

VECTORS = Path(__file__).parents[1] / "vectors" / "oauth"
LIVE = "https://live.test"
Change = Callable[[dict[str, Any]], None]


def vector(name: str) -> Any:
    return json.loads((VECTORS / name).read_text())


def _without(field: str) -> Change:
    def change(document: dict[str, Any]) -> None:
        del document[field]

    return change


def _set(field: str, value: Any) -> Change:
    def change(document: dict[str, Any]) -> None:
        document[field] = value

    return change


# Each MUST of the profile, broken alone in the reference's own document.
BROKEN: dict[str, tuple[Change, str]] = {
    "issuer differs": (_set("issuer", "https://evil.test"), "O-ASM-1"),
    "issuer with a slash": (_set("issuer", LIVE + "/"), "O-ASM-1"),
    "no issuer": (_without("issuer"), "O-ASM-1"),
    "PAR not required": (_set("require_pushed_authorization_requests", False), "O-ASM-2"),
    "PAR not said": (_without("require_pushed_authorization_requests"), "O-ASM-2"),
    "no PAR endpoint": (_without("pushed_authorization_request_endpoint"), "O-ASM-2"),
    "a PAR endpoint in http": (
        _set("pushed_authorization_request_endpoint", "http://live.test/oauth/par"),
        "O-ASM-2",
    ),
    "no authorization endpoint": (_without("authorization_endpoint"), "O-ASM-2"),
    "no token endpoint": (_without("token_endpoint"), "O-ASM-2"),
    "a token endpoint that is no URL": (_set("token_endpoint", "/oauth/token"), "O-ASM-2"),
    "no DPoP algorithms": (_without("dpop_signing_alg_values_supported"), "O-ASM-3"),
    "DPoP without ES256": (_set("dpop_signing_alg_values_supported", ["ES256K"]), "O-ASM-3"),
    "no client metadata documents": (
        _set("client_id_metadata_document_supported", False),
        "O-ASM-4",
    ),
    "client metadata documents not said": (
        _without("client_id_metadata_document_supported"),
        "O-ASM-4",
    ),
    "no iss parameter": (_set("authorization_response_iss_parameter_supported", False), "O-ASM-5"),
    "iss parameter as a string": (
        _set("authorization_response_iss_parameter_supported", "true"),
        "O-ASM-5",
    ),
    "no atproto scope": (_set("scopes_supported", ["transition:generic"]), "O-ASM-6"),
    "no scopes": (_without("scopes_supported"), "O-ASM-6"),
    "no code": (_set("response_types_supported", ["token"]), "O-ASM-7"),
    "no refresh tokens": (_set("grant_types_supported", ["authorization_code"]), "O-ASM-8"),
    "no grants": (_without("grant_types_supported"), "O-ASM-8"),
    "plain PKCE only": (_set("code_challenge_methods_supported", ["plain"]), "O-ASM-9"),
    "no public clients": (
        _set("token_endpoint_auth_methods_supported", ["private_key_jwt"]),
        "O-ASM-10",
    ),
    "no confidential clients": (
        _set("token_endpoint_auth_methods_supported", ["none"]),
        "O-ASM-10",
    ),
    "none among the signing algorithms": (
        _set("token_endpoint_auth_signing_alg_values_supported", ["ES256", "none"]),
        "O-ASM-11",
    ),
    "signing without ES256": (
        _set("token_endpoint_auth_signing_alg_values_supported", ["RS256"]),
        "O-ASM-11",
    ),
    "request URIs unregistered": (_set("require_request_uri_registration", False), "O-ASM-12"),
    "another resource protected": (_set("protected_resources", ["https://other.test"]), "O-ASM-13"),
    "protected resources not a list": (_set("protected_resources", LIVE), "O-ASM-13"),
    "a list of numbers": (_set("scopes_supported", [1, 2]), "O-ASM-6"),
}


# Each part of a token response the profile requires, wrong or (None) left out.
TOKEN_BROKEN: dict[str, tuple[dict[str, Any], str]] = {
    "Bearer": ({"token_type": "Bearer"}, "O-TOK-1"),
    "dpop in lower case": ({"token_type": "dpop"}, "O-TOK-1"),
    "no token type": ({"token_type": None}, "O-TOK-1"),
    "no access token": ({"access_token": ""}, "O-TOK-1"),
    "an id token": ({"id_token": "a.b.c"}, "O-TOK-1"),
    "no sub": ({"sub": None}, "O-TOK-2"),
    "a handle for sub": ({"sub": "alice.test"}, "O-TOK-2"),
    "a did:key for sub": (
        {"sub": "did:key:zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF"},
        "O-TOK-2",
    ),
    "a short did:plc": ({"sub": "did:plc:abc"}, "O-TOK-2"),
    "no scope": ({"scope": None}, "O-TOK-3"),
    "scope without atproto": ({"scope": "transition:generic"}, "O-TOK-3"),
    "atproto as a prefix only": ({"scope": "atproto:x transition:generic"}, "O-TOK-3"),
}
