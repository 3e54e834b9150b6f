"""atwhois: ATProto identity, resolved and verified both ways, with the evidence.

    import atwhois
    identity = atwhois.lookup("alice.example.com")        # in a script or a notebook
    identity = await atwhois.alookup("alice.example.com")  # in async code
    identity.status, identity.did, identity.handle, identity.to_json()

Without a `config`, the settings are read as the `atwhois` command reads them: the
`ATWHOIS_*` variables (`ATWHOIS_PLC_URL`, `ATWHOIS_DNS_SERVER`, …). The parts compose through
`Directory`: a `Resolver` resolves now, a `CachedResolver` answers from a cache of verified
bindings, a `Client` asks a running `atwhois serve`; `atwhois.testing` is a world in memory
that stands in for the network in tests.

The repository keeps its parts at its top level (`resolver/`, `cache/`, `cli/`, …); they are
installed, imported and type-checked as `atwhois.resolver`, `atwhois.cache`, … (this folder
holds a link to each). What this module exports is the public API; the parts' modules are
internal unless their own documentation says otherwise. Names are imported on first use, so
that `import atwhois` costs little.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from atwhois.foundation.version import VERSION as __version__
from atwhois.resolver.errors import (
    AtwhoisError,
    DidDeactivated,
    InvalidData,
    InvalidInput,
    NotFound,
    ResolutionError,
    UpstreamFailure,
)
from atwhois.resolver.outcome import Status

if TYPE_CHECKING:
    from atwhois.cache import CachedResolver
    from atwhois.resolver.config import Config
    from atwhois.resolver.directory import Directory
    from atwhois.resolver.identity import Identity
    from atwhois.resolver.remote import Client
    from atwhois.resolver.resolver import Resolver

__all__ = [
    "AtwhoisError",
    "CachedResolver",
    "Client",
    "Config",
    "DidDeactivated",
    "Directory",
    "Identity",
    "InvalidData",
    "InvalidInput",
    "NotFound",
    "ResolutionError",
    "Resolver",
    "Status",
    "UpstreamFailure",
    "__version__",
    "alookup",
    "lookup",
]

_ON_FIRST_USE = {
    "CachedResolver": "atwhois.cache",
    "Client": "atwhois.resolver.remote",
    "Config": "atwhois.resolver.config",
    "Directory": "atwhois.resolver.directory",
    "Identity": "atwhois.resolver.identity",
    "Resolver": "atwhois.resolver.resolver",
}


class SyncCallInEventLoop(AtwhoisError):
    """`lookup` was called where an event loop runs: `await alookup(...)` there."""


def __getattr__(name: str) -> Any:
    if name in _ON_FIRST_USE:
        return getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
    raise AttributeError(f"module 'atwhois' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


async def alookup(
    identifier: str, *, config: Config | None = None, directory: Directory | None = None
) -> Identity:
    """A handle, DID or at:// URI, resolved and verified both ways. `directory`: who
    answers (a `Resolver`, a `CachedResolver`, a `Client`, `atwhois.testing.World`); by
    default a `Resolver` of `config`, or of the settings in the environment, made for this
    lookup and closed after it."""
    if directory is not None:
        return await directory.lookup(identifier)
    from atwhois.resolver.resolver import Resolver

    async with Resolver(config or _config_from_environment()) as resolver:
        return await resolver.lookup(identifier)


def lookup(
    identifier: str, *, config: Config | None = None, directory: Directory | None = None
) -> Identity:
    """`alookup`, for code without an event loop (scripts, notebooks, a shell)."""
    import asyncio  # here: the command line's help and errors start without it

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(alookup(identifier, config=config, directory=directory))
    raise SyncCallInEventLoop("lookup() inside a running event loop: await alookup() instead")


def _config_from_environment() -> Config:
    """The resolution settings as the `atwhois` command reads them from the environment."""
    from atwhois.cli import configuration

    return configuration.resolver_config(configuration.from_environment())
