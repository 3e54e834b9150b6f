"""`atwhois`: who is behind a handle or a DID, and is the binding verified both ways?

Exit codes: 0 verified, 1 resolved but not verified, 2 invalid input, 3 transient failure.

The commands are argparse subparsers: the standard library's parser costs nothing to import
(a whois-style tool answers `--help` and a typo in ~100 ms), gives every command its own help
with only the flags that apply, and its errors name the command. What argparse does not do is
done by `route`: a command line that names no command is a lookup (`atwhois alice.test`),
settings flags may come before the command (`atwhois --dev history alice.test`), and a
mistyped command gets a suggestion.

Only the standard library, the command table (`commands`) and the pure configuration code
are imported here: each command's module (`lookup`, `plc`, `cache`, `config`, `audit`,
`serve`) is imported when it runs, and imports what it uses.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import io
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import atwhois.settings as settings
from atwhois.foundation import version
from atwhois.settings import SettingError

from . import configuration
from .commands import COMMANDS, DEFAULT_SUBCOMMAND, EXAMPLES, GROUPS, TREE
from .running import UsageError

VERSION = f"atwhois {version.VERSION}"


class Parser(argparse.ArgumentParser):
    """argparse without prefix abbreviations (`--plc` must not quietly mean `--plc-url`,
    nor stop meaning it when a flag is added) and with a suggestion for a mistyped
    subcommand."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        wrong = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if wrong:
            choices = re.findall(r"'([^']*)'", wrong.group(2))
            near = difflib.get_close_matches(wrong.group(1), choices, n=1)
            if near:
                message += f"; did you mean {near[0]!r}?"
        super().error(message)


def build_parser(running: Sequence[str] | None = None) -> Parser:
    """The command tree. Given the path of the command that runs (`route` found it), only
    that command gets its flags and arguments, and only its group's commands are named
    (argparse builds a parser for each name: with all of them, a lookup of bad input spends
    a sixth of its time on parsers it never uses); `--help` names them all."""
    top = Parser(
        prog="atwhois",
        description="Resolve an ATProto handle, DID or at:// URI and verify the binding both "
        "ways; cache, serve and audit what was verified.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--version", action="version", version=VERSION)
    commands = _subcommands(top, "commands (lookup is the default: atwhois IDENTIFIER)")
    groups: dict[str, Any] = {}
    group_running = running[0] if running and running[0] in TREE else None
    for command in COMMANDS:
        if group_running is not None and command.path[0] != group_running:
            continue
        where = commands
        if len(command.path) > 1:
            group = command.path[0]
            if group not in groups:
                parent = commands.add_parser(group, help=GROUPS[group], description=GROUPS[group])
                groups[group] = _subcommands(parent, f"{group} commands")
            where = groups[group]
        parser: Parser = where.add_parser(
            command.path[-1],
            help=command.help,
            description=command.description or command.help,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.set_defaults(
            handler=command.handler, settings=list(command.settings), prog=parser.prog
        )
        if running is None or tuple(running) == command.path:
            if command.settings:
                configuration.add_flags(parser, command.settings)
            if command.arguments is not None:
                command.arguments(parser)
    return top


def _subcommands(parser: argparse.ArgumentParser, title: str) -> Any:
    return parser.add_subparsers(title=title, metavar="COMMAND", required=True)


def _takes_value(option: str) -> bool | None:
    """Whether a settings flag (or --config) takes a value; None: not a settings flag."""
    if option == "--config":
        return True
    if option == "--json":
        return False
    name = option.removeprefix("--").removeprefix("no-").replace("-", "_")
    setting = settings.SETTINGS.get(name)
    if setting is None or (option.startswith("--no-") and setting.kind is not bool):
        return None
    return setting.kind is not bool


def route(argv: list[str]) -> list[str]:
    """The argument list argparse should see: settings flags given before the command move
    behind it, where its own parser checks them; a list that names no command is a
    lookup. A bare word that is no identifier but is close to a command is refused with
    the suggestion (`UsageError`)."""
    lead: list[str] = []
    at = 0
    while at < len(argv) and argv[at].startswith("--"):
        option, has_value = argv[at].split("=", 1)[0], "=" in argv[at]
        takes = _takes_value(option)
        if takes is None:  # --help, --version, or a lookup's flag (`atwhois --json x`)
            return argv if option in ("--help", "--version") else ["lookup", *argv]
        width = 2 if takes and not has_value else 1
        lead += argv[at : at + width]
        at += width
    if at < len(argv) and argv[at] == "-h":
        return argv
    if at >= len(argv) or argv[at] not in TREE:
        word = argv[at] if at < len(argv) else ""
        if word and not re.search(r"[.:/@]", word):
            near = difflib.get_close_matches(word, TREE, n=1)
            if near:
                raise UsageError("atwhois", f"unknown command {word!r}; did you mean {near[0]!r}?")
        return ["lookup", *argv]
    path = [argv[at]]
    at += 1
    children = TREE[path[0]]
    if children:
        if at < len(argv) and argv[at] in children:
            path.append(argv[at])
            at += 1
        elif path[0] in DEFAULT_SUBCOMMAND:
            path.append(DEFAULT_SUBCOMMAND[path[0]])
        elif lead:  # settings flags before a command group with no default: argparse asks
            return [*path, *argv[at:], *lead]
    return [*path, *lead, *argv[at:]]


_SIGPIPE_EXIT = 128 + 13  # what a shell reports for a process ended by SIGPIPE
# The packages a plain install leaves out, by the extra that brings each (pyproject.toml):
# a command that needs one says which extra to install
EXTRAS = {
    "uvloop": "server",
    "jinja2": "server",
    "prometheus_client": "server",
    "websockets": "server",
    "zstandard": "server",
    "redis": "redis",
    "psycopg": "postgres",
}


def main(argv: Sequence[str] | None = None) -> int:
    # What atwhois prints holds strangers' strings (aliases, endpoints, a log's fields), and
    # JSON lets them carry lone surrogates that no encoding can write: show them escaped.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    try:
        return _dispatch(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        # `atwhois … | head`: the reader left, which is no error of ours. Stop, and point
        # stdout at /dev/null so that the interpreter's last flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _SIGPIPE_EXIT


def _dispatch(argv: list[str]) -> int:
    if not argv:  # a newcomer's first try: what atwhois does and how to ask it
        print(build_parser().format_help(), end="", file=sys.stderr)
        return 2
    try:
        routed = route(argv)
        path = routed[:1] + [w for w in routed[1:2] if w in TREE.get(routed[0], ())]
        args, extra = build_parser(path).parse_known_args(routed)
        if extra:  # named by the command that refused them, not by `atwhois`
            raise UsageError(args.prog, f"unrecognized arguments: {' '.join(extra)}")
        module, function = args.handler.split(":")
        handler: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(module), function
        )
        return handler(args)
    except UsageError as err:
        print(f"{err.prog}: error: {err}", file=sys.stderr)
        return 2
    except SettingError as err:
        print(f"atwhois: bad configuration: {err}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:
        wanted = EXTRAS.get((err.name or "").partition(".")[0])
        if wanted is None:
            raise
        print(
            f"atwhois {argv[0]}: needs the {wanted} extra, which is not installed "
            f"(no module {err.name}): pip install 'atwhois[{wanted}]'",
            file=sys.stderr,
        )
        return 2
