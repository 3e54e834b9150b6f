"""atwhois resolver: ATProto handle and DID resolution with bidirectional verification.

from atwhois.resolver import Resolver, Config
async with Resolver(Config(plc_url="https://plc.directory")) as resolver:
    identity = await resolver.lookup("alice.example.com")

The report (`Identity`, `Evidence`) and `Resolver` (and with it, once it first goes to the
network, aiohttp and dnspython) are imported on first use, so that what needs only the
configuration (`atwhois --help`, a settings error) starts quickly.
"""

import importlib
from typing import TYPE_CHECKING, Any

from .config import Config, Nameserver
from .outcome import Outcome, Status

if TYPE_CHECKING:
    from .identity import Evidence, Identity
    from .resolver import Resolver

__all__ = ["Config", "Evidence", "Identity", "Nameserver", "Outcome", "Resolver", "Status"]

_ON_FIRST_USE = {"Evidence": ".identity", "Identity": ".identity", "Resolver": ".resolver"}


def __getattr__(name: str) -> Any:
    if name in _ON_FIRST_USE:
        return getattr(importlib.import_module(_ON_FIRST_USE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
