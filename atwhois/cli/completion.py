"""`atwhois completion bash`: a bash completion script made from the command table, so it
names every command and each command's own flags, and cannot drift from them.

    source <(atwhois completion bash)       # or save it in bash-completion's folder
"""

from __future__ import annotations

import argparse
import shlex

from . import configuration
from .commands import COMMANDS, DEFAULT_SUBCOMMAND, TREE

_SCRIPT = """# bash completion for atwhois (made by `atwhois completion bash`)
_atwhois() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" path="" first="${{COMP_WORDS[1]}}"
  local second="${{COMP_WORDS[2]}}"
  if [[ $COMP_CWORD -eq 1 && $cur != -* ]]; then
    COMPREPLY=($(compgen -W {commands} -- "$cur")); return
  fi
  case "$first" in
{groups}
    *) path="lookup" ;;
  esac
  if [[ $cur == -* ]]; then
    case "$path" in
{flags}
    esac
    return
  fi
  compopt -o default 2>/dev/null; COMPREPLY=()
}}
complete -F _atwhois atwhois
"""


def _flags(command_index: int) -> list[str]:
    """The flags the command at `COMMANDS[command_index]` takes, as its parser has them."""
    command = COMMANDS[command_index]
    parser = argparse.ArgumentParser(add_help=False)
    if command.settings:
        configuration.add_flags(parser, command.settings)
    if command.arguments is not None:
        command.arguments(parser)
    options = [o for action in parser._actions for o in action.option_strings]
    return sorted({*options, "--help"})


def script() -> str:
    """The completion script for bash."""
    groups = []
    for first, children in TREE.items():
        if not children:
            groups.append(f'    {first}) path="{first}" ;;')
            continue
        words = shlex.quote(" ".join(children))
        default = DEFAULT_SUBCOMMAND.get(first)
        fallback = (  # `atwhois audit --format …` is `audit run`
            f'\n      [[ " {" ".join(children)} " == *" $second "* ]] || path="{first} {default}"'
            if default
            else ""
        )
        groups.append(
            f"    {first}) if [[ $COMP_CWORD -eq 2 && $cur != -* ]]; then\n"
            f'        COMPREPLY=($(compgen -W {words} -- "$cur")); return; fi\n'
            f'      path="{first} $second"{fallback} ;;'
        )
    flags = [
        f'      "{" ".join(command.path)}") '
        f'COMPREPLY=($(compgen -W {shlex.quote(" ".join(_flags(i)))} -- "$cur")) ;;'
        for i, command in enumerate(COMMANDS)
    ]
    return _SCRIPT.format(
        commands=shlex.quote(" ".join(TREE)), groups="\n".join(groups), flags="\n".join(flags)
    )


def completion(args: argparse.Namespace) -> int:
    print(script(), end="")
    return 0
