"""Verification for the services that call atwhois: inter-service auth tokens checked
against the issuer's identity (`verifier`), with the rules of `resolver.service_auth`; a
record checked against its repository's signed proof (`records`), with the rules of
`resolver.record`; the refresh-once rule both keep (`refresh`)."""

from __future__ import annotations

from .records import RecordVerifier, verify_record
from .verifier import Expected, ServiceAuthVerifier, Verification, verify_token

__all__ = [
    "Expected",
    "RecordVerifier",
    "ServiceAuthVerifier",
    "Verification",
    "verify_record",
    "verify_token",
]
