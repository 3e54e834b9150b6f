"""Verification for the services that call atwhois: inter-service auth tokens checked
against the issuer's identity (`verifier`), with the rules of `resolver.service_auth`; a
record checked against its repository's signed proof (`records`), with the rules of
`resolver.record`; moderation labels checked against their labelers' identities (`labels`),
with the rules of `resolver.label`; the refresh-once rule all of them keep (`refresh`); an
account's OAuth authorization server found and checked, and a token response bound to its
account and issuer (`oauth`), with the rules of `resolver.oauth`."""

from __future__ import annotations

from .labels import LabelVerifier, verify_labels
from .oauth import check_token_response, oauth_server
from .records import RecordVerifier, verify_record
from .verifier import Expected, ServiceAuthVerifier, Verification, verify_token

__all__ = [
    "Expected",
    "LabelVerifier",
    "RecordVerifier",
    "ServiceAuthVerifier",
    "Verification",
    "check_token_response",
    "oauth_server",
    "verify_labels",
    "verify_record",
    "verify_token",
]
