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
