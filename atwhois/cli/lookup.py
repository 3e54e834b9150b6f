"""`atwhois lookup` (the default command): one identifier, or many (`-`, `--file`), from a
resolver here, a cache, or a running daemon (`--server`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import TYPE_CHECKING

from atwhois.resolver.errors import InvalidInput

from .configuration import Resolved
from .running import UsageError, cache_store, configure, run, say

if TYPE_CHECKING:
    from atwhois.resolver import Identity
    from atwhois.resolver.directory import Directory


def numbered_lines(text: str) -> list[tuple[int, str]]:
    """A file of identifiers, each with its line number: one a line, blank lines and `#`
    comments skipped."""
    lines = ((number, line.strip()) for number, line in enumerate(text.splitlines(), 1))
    return [(number, line) for number, line in lines if line and not line.startswith("#")]


def identifier_lines(text: str) -> list[str]:
    return [line for _, line in numbered_lines(text)]


def lookup(args: argparse.Namespace) -> int:
    resolved = configure(args)
    config = resolved.config
    if args.file is not None or args.identifier == "-":
        try:
            text = args.file.read_text() if args.file is not None else sys.stdin.read()
        except (OSError, UnicodeDecodeError) as err:
            where = args.file or "standard input"
            print(f"atwhois: cannot read identifiers from {where}: {err}", file=sys.stderr)
            return 2
        lines = identifier_lines(text)
        batch = _batch(directory_for(args, resolved), lines, args, config.check_pds)
        return run(batch, many=len(lines) > 1)
    if not args.identifier:
        raise UsageError(args.prog, "give an identifier, - for standard input, or --file FILE")
    identifier = args.identifier.strip()
    if not args.server:  # invalid input is answered before the network stack is loaded
        from atwhois.resolver.identity import invalid_input, now_iso
        from atwhois.resolver.syntax import parse_lookup

        try:
            parse_lookup(identifier, dev=config.dev)
        except InvalidInput as err:
            return _show(invalid_input(identifier, err, now_iso()), args)
    return run(_single(directory_for(args, resolved), identifier, args, config.check_pds))


def directory_for(args: argparse.Namespace, resolved: Resolved) -> Directory:
    """Where the answers come from: a running daemon (`--server`), or a resolver here, in
    front of a cache when one is configured."""
    if args.server:
        from atwhois.resolver.remote import Client, NotADaemonUrl

        try:
            return Client(args.server)
        except NotADaemonUrl as err:
            raise UsageError(args.prog, f"--server: {err}") from None
    from atwhois.cache import CachedResolver
    from atwhois.resolver import Resolver

    if resolved.values.cache is None:
        return Resolver(resolved.config)
    return CachedResolver(Resolver(resolved.config), cache_store(resolved.values))


async def _look(
    directory: Directory, identifier: str, args: argparse.Namespace, check_pds: bool
) -> Identity:
    """`--refresh` resolves every part of a local cache afresh; `--server` asks the
    daemon's cache as it is; `check_pds` (the setting) asks the PDS too, now."""
    if args.refresh and not args.server:
        identity = await directory.refresh(identifier)
    else:
        identity = await directory.lookup(identifier)
    return await directory.check_pds(identity) if check_pds else identity


async def _single(
    directory: Directory, identifier: str, args: argparse.Namespace, check_pds: bool
) -> int:
    try:
        return _show(await _look(directory, identifier, args, check_pds), args)
    finally:
        await directory.aclose()


def _show(identity: Identity, args: argparse.Namespace) -> int:
    """One report, as JSON or as text (a view of the same JSON); its exit code."""
    report = identity.to_json(include_document=args.document)
    if args.short:
        from .render import short_answer

        answer = short_answer(report)
        if answer is not None:
            say(answer)
    elif args.json:
        say(json.dumps(report, indent=2))
    else:
        from .render import Style, render_text, wants_color

        style = Style(wants_color(sys.stdout, refused=args.no_color))
        say(render_text(report, style=style, server=args.server))
    return int(identity.status.exit_code)


async def _batch(
    directory: Directory, identifiers: list[str], args: argparse.Namespace, check_pds: bool
) -> int:
    """Many lookups, at most --concurrency at once; one line each, in the order given (a
    line is printed once it and those before it are done); a count by status at the end;
    the worst exit code."""
    import asyncio

    from .render import Style, short_answer, verdict_line, wants_color

    gate = asyncio.Semaphore(max(1, args.concurrency))
    style = Style(wants_color(sys.stdout, refused=args.no_color))
    progress = sys.stderr.isatty()
    statuses: Counter[str] = Counter()

    async def one(identifier: str) -> Identity:
        """A lookup that fails inside atwhois is that line's failure, on stderr: the batch
        goes on."""
        async with gate:
            try:
                return await _look(directory, identifier, args, check_pds)
            except Exception as err:
                import traceback

                from atwhois.resolver.identity import failed_inside, now_iso

                traceback.print_exc(file=sys.stderr)
                return failed_inside(identifier, err, now_iso())

    def counter(text: str) -> None:
        """The progress line on a terminal's stderr: redrawn in place, and erased before a
        result is printed, so the two never share a line."""
        if progress:
            print(f"\r\x1b[K{text}", end="", file=sys.stderr, flush=True)

    worst = 0
    lookups = [asyncio.ensure_future(one(i)) for i in identifiers]
    try:
        for done, lookup in enumerate(lookups, 1):
            identity = await lookup
            statuses[str(identity.status)] += 1
            worst = max(worst, identity.status.exit_code)
            counter("")
            report = identity.to_json(include_document=args.document)
            if args.short:  # one line each, in the order given: "-" where none verifies
                say(short_answer(report) or "-")
            else:
                say(json.dumps(report) if args.json else verdict_line(report, style))
            counter(f"  {done}/{len(identifiers)}")
    finally:
        counter("")
        for lookup in lookups:
            lookup.cancel()  # an interrupted batch leaves nothing running
        await directory.aclose()
    summary = ", ".join(f"{status} {n}" for status, n in statuses.most_common())
    print(
        f"summary: {len(identifiers)} identifiers: {summary or 'none'}",
        file=sys.stderr if args.json or args.short else sys.stdout,
    )
    return worst
