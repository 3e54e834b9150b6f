"""atwhois resolver: ATProto handle and DID resolution with bidirectional verification.

from resolver import Resolver, Config
async with Resolver(Config(plc_url="https://plc.directory")) as resolver:
    identity = await resolver.lookup("alice.example.com")

`Resolver` (and with it the network stack: aiohttp, dnspython) is imported on first use, so
that what needs only the pure parts (syntax, configuration, the report) starts quickly.
"""

from typing import TYPE_CHECKING, Any

from .config import Config, Nameserver
from .identity import Evidence, Identity
from .outcome import Outcome, Status

if TYPE_CHECKING:
    from .resolver import Resolver

__all__ = ["Config", "Evidence", "Identity", "Nameserver", "Outcome", "Resolver", "Status"]


def __getattr__(name: str) -> Any:
    if name == "Resolver":
        from .resolver import Resolver

        return Resolver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
