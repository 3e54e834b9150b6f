"""The outcome of one resolution step and the status of a whole lookup."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """How one step (DNS, HTTPS, DID document) ended. Exactly one applies."""

    OK = "ok"
    NOT_FOUND = "not_found"  # confirmed absent
    FAILED = "failed"  # transient: timeout, SERVFAIL, refused, TLS, 5xx
    INVALID = "invalid"  # the other side answered nonsense
    SKIPPED = "skipped"


class Status(StrEnum):
    """The verdict on a lookup, as printed in the `status` field of the report."""

    VERIFIED = "verified"
    HANDLE_MISMATCH = "handle_mismatch"
    HANDLE_NOT_FOUND = "handle_not_found"
    DID_NOT_FOUND = "did_not_found"
    DID_DEACTIVATED = "did_deactivated"
    AMBIGUOUS = "ambiguous"
    INVALID_DOCUMENT = "invalid_document"
    PLC_LOG_INVALID = "plc_log_invalid"  # the directory serves what its owners did not sign
    INVALID_INPUT = "invalid_input"
    UNAVAILABLE = "unavailable"

    @property
    def exit_code(self) -> int:
        """The CLI contract: 0 verified, 1 not verified, 2 bad input, 3 transient."""
        if self is Status.VERIFIED:
            return 0
        if self is Status.INVALID_INPUT:
            return 2
        if self is Status.UNAVAILABLE:
            return 3
        return 1


# The verdict in words, for people (the CLI's text, the web page).
VERDICTS: dict[Status, str] = {
    Status.VERIFIED: "verified",
    Status.HANDLE_MISMATCH: "NOT verified: handle and DID do not point at each other",
    Status.HANDLE_NOT_FOUND: "NOT verified: the handle does not resolve",
    Status.DID_NOT_FOUND: "NOT verified: the DID does not exist",
    Status.DID_DEACTIVATED: "NOT verified: the DID is deactivated",
    Status.AMBIGUOUS: "NOT verified: the handle names several DIDs",
    Status.INVALID_DOCUMENT: "NOT verified: the DID document is invalid",
    Status.PLC_LOG_INVALID: "NOT verified: the directory serves what no signed op says",
    Status.INVALID_INPUT: "invalid input",
    Status.UNAVAILABLE: "could not be checked now (transient failure)",
}
