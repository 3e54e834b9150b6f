"""The command line run in this process (`atwhois.cli.main.main`), for the tests of what a
command says and does that do not test the process itself (its start-up, its signals, its
children dying with it: those run `devnet.atwhois.run`, a process each). The same result
as `run`: the exit code, what it wrote to stdout and to stderr, with `env` as its whole
environment and `stdin` as its input."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from atwhois.cli.main import main


def _stream(text: str = "") -> io.TextIOWrapper:
    """A text stream over bytes, as a process's own are (`.buffer` included)."""
    return io.TextIOWrapper(io.BytesIO(text.encode()), encoding="utf-8", newline="")


@contextlib.contextmanager
def _environment(env: dict[str, str] | None) -> Iterator[None]:
    if env is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_here(
    args: list[str],
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    cwd: Path | None = None,
) -> tuple[int, str, str]:
    """Exit code, stdout, stderr of `atwhois ARGS`, run in this process."""
    streams = (sys.stdin, sys.stdout, sys.stderr)
    out, err = _stream(), _stream()
    sys.stdin, sys.stdout, sys.stderr = _stream(stdin or ""), out, err
    here = Path.cwd()
    try:
        with _environment(env):
            if cwd is not None:
                os.chdir(cwd)
            try:
                code = main(args)
            except SystemExit as exit:  # argparse's --help and its usage errors
                code = exit.code if isinstance(exit.code, int) else 2
    finally:
        os.chdir(here)
        sys.stdin, sys.stdout, sys.stderr = streams
    return code, _text(out), _text(err)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("utf-8", "backslashreplace")
