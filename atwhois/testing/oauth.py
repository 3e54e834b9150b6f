"""The OAuth documents of the world's servers, as the reference's encoders write them:
a PDS's protected resource metadata and an authorization server's metadata (a PDS that is
its own server, or an entryway for other PDSes)."""

from __future__ import annotations

from typing import Any


def protected_resource_metadata(resource: str, issuer: str) -> dict[str, Any]:
    """What a reference PDS serves at `/.well-known/oauth-protected-resource` (`@atproto/pds`'s
    `auth-routes`; tests/vectors/oauth/ hold its bytes): itself, and its one server."""
    return {"resource": resource, "authorization_servers": [issuer], "scopes_supported": [],
            "bearer_methods_supported": ["header"],
            "resource_documentation": "https://atproto.com"}  # fmt: skip


def authorization_server_metadata(
    issuer: str, *, protected_resources: list[str] | None = None
) -> dict[str, Any]:
    """What a reference authorization server serves at its
    `/.well-known/oauth-authorization-server` (`@atproto/oauth-provider`'s `buildMetadata`,
    field for field and in its order; tests/vectors/oauth/ hold its bytes): a PDS names
    itself in `protected_resources`, an entryway names none."""
    algorithms = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES256K",
                  "ES384", "ES512"]  # fmt: skip
    metadata = {
        "issuer": issuer, "request_parameter_supported": True,
        "request_uri_parameter_supported": True, "require_request_uri_registration": True,
        "scopes_supported": ["atproto", "transition:email", "transition:generic",
                             "transition:chat.bsky"],
        "subject_types_supported": ["public"], "response_types_supported": ["code"],
        "response_modes_supported": ["query", "fragment", "form_post"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"], "ui_locales_supported": ["en-US"],
        "display_values_supported": ["page", "popup", "touch"],
        "request_object_signing_alg_values_supported": [*algorithms, "none"],
        "authorization_response_iss_parameter_supported": True,
        "request_object_encryption_alg_values_supported": [],
        "request_object_encryption_enc_values_supported": [],
        "jwks_uri": f"{issuer}/oauth/jwks", "authorization_endpoint": f"{issuer}/oauth/authorize",
        "token_endpoint": f"{issuer}/oauth/token",
        "token_endpoint_auth_methods_supported": ["none", "private_key_jwt"],
        "token_endpoint_auth_signing_alg_values_supported": algorithms,
        "revocation_endpoint": f"{issuer}/oauth/revoke",
        "pushed_authorization_request_endpoint": f"{issuer}/oauth/par",
        "require_pushed_authorization_requests": True,
        "dpop_signing_alg_values_supported": algorithms,
        "protected_resources": protected_resources,
        "client_id_metadata_document_supported": True,
        "prompt_values_supported": ["none", "login", "consent", "select_account", "create"],
    }  # fmt: skip
    return {name: value for name, value in metadata.items() if value is not None}
