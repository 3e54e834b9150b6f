"""The errors atwhois raises, as a small hierarchy whose names say what happened.

Every error that describes a resolution step carries the step's outcome, so the three
outcomes the rest of the code keeps apart (confirmed absent, transient failure, invalid
data) can be read off the exception class alone.
"""

from __future__ import annotations

from atwhois.foundation.errors import AtwhoisError

from .outcome import Outcome

__all__ = ["AtwhoisError"]  # the root, at the bottom of the house: the rest is defined here


# --- input (never reaches the network) -------------------------------------------------


class InvalidInput(AtwhoisError):
    """The text given to atwhois is not something it can look up; `rule` names why."""

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(f"{message} [{rule}]")
        self.message, self.rule = message, rule  # the message without its tag, to reword


class InvalidHandle(InvalidInput):
    """Not a syntactically valid handle."""


class ReservedHandle(InvalidInput):
    """A valid handle that must never be resolved (reserved TLD, `handle.invalid`)."""


class InvalidDid(InvalidInput):
    """Not a syntactically valid DID, or not a valid identifier for its method."""


class UnsupportedDidMethod(InvalidInput):
    """A valid DID of a method atproto does not bless (D-SYN-8, D-SYN-9)."""


class InvalidIdentifier(InvalidInput):
    """Neither a handle, a DID, nor an at:// URI."""


class WrongEventLoop(AtwhoisError):
    """An object whose connections were opened on one event loop, used from another: an
    object opened with `async with` in the caller's loop is used with the async calls
    there, and one given to the sync calls with the sync calls only."""


# --- resolution steps ------------------------------------------------------------------


class ResolutionError(AtwhoisError):
    """A resolution step did not produce a usable answer."""

    outcome: Outcome = Outcome.FAILED


class NotFound(ResolutionError):
    """Confirmed absent: NXDOMAIN, NODATA, HTTP 404, a DID never registered."""

    outcome = Outcome.NOT_FOUND


class DidDeactivated(ResolutionError):
    """The DID existed and was deactivated (a PLC tombstone)."""

    outcome = Outcome.NOT_FOUND


class UpstreamFailure(ResolutionError):
    """Transient: refused, SERVFAIL, TLS error, 5xx. Worth retrying; never absence."""

    outcome = Outcome.FAILED


class UpstreamTimeout(UpstreamFailure):
    """The step ran out of time."""


class DnsAnswerTooLarge(UpstreamFailure):
    """A DNS answer over the size atwhois reads (H-DNS-8), refused unread: that server's
    answer failed, whatever it held (a zone padded to cost its readers, a broken server)."""


class DnsRefused(UpstreamFailure):
    """Every DNS server asked refused the question (REFUSED, NOTIMP): it will not answer it,
    now or later, as an authoritative-only server asked about a zone it does not serve."""


class UnconfirmedAbsence(UpstreamFailure):
    """A source that may be behind does not know the DID: absence as of its last read of
    the upstream, which cannot confirm a DID created since (a sign-up looked up at once).
    Transient, like any answer that confirms nothing: never cached as absence."""


class InvalidData(ResolutionError):
    """The other side answered, with something that is not acceptable."""

    outcome = Outcome.INVALID


class MalformedAnswer(InvalidData):
    """The answer is broken, not merely unacceptable: an HTML page or other non-JSON where a
    JSON document belongs, a body cut short. Reported as invalid data, but it confirms
    nothing about the identity (a firewall, a captive portal or a dropped connection says
    the same about every DID), so a cache never lets it replace a good answer."""


class AmbiguousHandle(InvalidData):
    """DNS holds `did=` records naming different DIDs (H-DNS-3)."""


class DnssecBogus(InvalidData):
    """DNSSEC validation failed: a signature that does not verify, a key no DS names, a
    denial that proves nothing. The DNS answer is no evidence (S-SEC-10)."""


class ForbiddenAddress(InvalidData):
    """A host resolved to an address outside what configuration allows (SSRF guard)."""


class ResponseTooLarge(InvalidData):
    """A body or a DNS answer exceeded its cap."""


# --- what atwhois keeps ----------------------------------------------------------------


class SchemaMismatch(AtwhoisError, ValueError):
    """A database (the audit history, the PLC mirror) of another schema than this atwhois
    reads: it is left untouched, and the configuration that names it is refused."""
