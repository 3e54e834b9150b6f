"""What every command's handler uses: its settings resolved (`configure`), an event loop
(`run`), a resolver or a cache to work with, and printing that notices a reader who left."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from atwhois.foundation.version import announce_contact
from atwhois.resolver.config import Config
from atwhois.resolver.errors import AtwhoisError

from .configuration import Resolved, load, resolve

if TYPE_CHECKING:
    from atwhois.cache import Tier
    from atwhois.resolver import Resolver
    from atwhois.settings.table import Values

T = TypeVar("T")


class UsageError(AtwhoisError):
    """A command line that cannot be run: exit 2, with the command's name."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog


def configure(args: argparse.Namespace) -> Resolved:
    """The command's settings (flags, variables, file), read once, and the resolver
    configuration they make; a setting that cannot be used is a `SettingError`."""
    resolved = resolve(load(args, args.settings))
    announce_contact(resolved.values.contact_url)
    return resolved


def run(work: Coroutine[Any, Any, T], *, many: bool = False) -> T:
    """Run `work` on an event loop. `many` lookups run on uvloop's where it is installed
    (the server extra), as `serve` and `audit` resolve: its TLS and sockets cost less CPU
    per lookup than asyncio's (python -m bench cold). One lookup does not earn back its
    import (python -m bench startup)."""
    # here, not at the top: `--help` and bad input never need an event loop
    import asyncio

    loop_factory = None
    if many:
        try:
            import uvloop
        except ModuleNotFoundError:  # a plain install: asyncio's loop, slower, the same
            pass
        else:
            loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(work)


def with_resolver(config: Config, work: Callable[[Resolver], Any]) -> Any:
    from atwhois.resolver import Resolver

    async def work_now() -> Any:
        async with Resolver(config) as resolver:
            return await work(resolver)

    return run(work_now())


def cache_store(values: Values, **tier: Any) -> Tier:
    """The cache store the settings name (`open_store`'s `tier` settings as given)."""
    from atwhois.cache import open_store

    return open_store(values.cache, redis_buckets=values.redis_buckets, **tier)


async def with_cache(resolved: Resolved, work: Callable[[Any], Any]) -> Any:
    from atwhois.cache import CachedResolver
    from atwhois.resolver import Resolver

    store = cache_store(resolved.values)
    async with CachedResolver(Resolver(resolved.config), store) as cached:
        return await work(cached)


def say(text: str) -> None:
    print(text, flush=True)  # flushed now: a reader that left is noticed inside `main`
