"""The one version of atwhois: the installed distribution's (pyproject.toml's), shown by
`atwhois --version`, exported as `atwhois.__version__` and sent in every outbound request's
User-Agent, so that an operator whose server atwhois asks knows what asked and which release."""

from __future__ import annotations

from importlib import metadata

try:
    VERSION = metadata.version("atwhois")
except metadata.PackageNotFoundError:  # a source tree run without being installed
    VERSION = "0+unknown"

USER_AGENT = f"atwhois/{VERSION} (+identity resolver)"


def user_agent(contact: str) -> str:
    """The User-Agent that tells a host's operators where to reach whoever runs atwhois."""
    return f"atwhois/{VERSION} (+{contact})"


_agent = USER_AGENT  # this process's: with the operator's contact once it is known


def announce_contact(contact: str | None) -> None:
    """From now on every client this process makes says where to reach its operator
    (`contact_url`); the lookups' own configuration carries it too (`Config.user_agent`)."""
    global _agent
    _agent = user_agent(contact) if contact else USER_AGENT


def agent() -> str:
    """The User-Agent a client made now sends."""
    return _agent
