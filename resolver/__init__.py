"""atwhois resolver: ATProto handle and DID resolution with bidirectional verification.

from resolver import Resolver, Config
async with Resolver(Config.from_env()) as resolver:
    identity = await resolver.lookup("alice.example.com")
"""

from .config import Config, Nameserver
from .identity import Evidence, Identity
from .outcome import Outcome, Status
from .resolver import Resolver

__all__ = ["Config", "Evidence", "Identity", "Nameserver", "Outcome", "Resolver", "Status"]
