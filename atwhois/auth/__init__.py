"""Verification for the services that call atwhois: inter-service auth tokens checked
against the issuer's identity (`verifier`), with the rules of `resolver.service_auth`."""

from __future__ import annotations

from .verifier import Expected, ServiceAuthVerifier, Verification, verify_token

__all__ = ["Expected", "ServiceAuthVerifier", "Verification", "verify_token"]
