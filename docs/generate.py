"""The documentation's references, made from the code when the site is built (an MkDocs hook,
`mkdocs.yml`), never written by hand: every setting (the settings table), every finding
kind and its severity (the audits' table), every status (the verdicts and the account
states), the HTTP API (the route tables that `/openapi.json` is made from), the Python API
(the docstrings of `atwhois.__all__`), the command line (the command table's own help);
the benchmark results (`bench/results/`, one dated file per run); and a link from every
rule tag a page cites to its rule in the specification.

`references()` is what the hook adds, as (path, Markdown): the tests read it too."""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import typing
from pathlib import Path
from typing import Any

from atwhois.resolver.rules import TAG

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
_TAG = TAG.pattern.removeprefix(r"\b").removesuffix(r"\b")  # the code's own idea of a tag
BARE_TAG = re.compile(rf"(?<![\w#/*\[-])({_TAG})(?![\w-])")
CODE_SPAN = re.compile(r"(`[^`\n]+`)")
FENCE = re.compile(r"(^```.*?^```)", re.M | re.S)
RULE = re.compile(rf"^- \*\*({_TAG})\*\*", re.M)


def references() -> dict[str, str]:
    """Every generated page, by its path under the site."""
    pages = {
        "reference/settings.md": settings_page(),
        "reference/findings.md": findings_page(),
        "reference/statuses.md": statuses_page(),
        "reference/http-api.md": http_page(),
        "reference/python-api.md": python_page(),
        "reference/exceptions.md": exceptions_page(),
        "reference/cli.md": cli_page(),
    }
    for result in sorted(RESULTS.glob("*.md")):
        pages[f"performance/{result.name}"] = result.read_text()
    return pages


def settings_page() -> str:
    from atwhois import settings

    kinds = {bool: "bool", int: "int", float: "number", str: "string", Path: "path", list: "list"}
    out = [
        "# Settings",
        "",
        "Every setting has one name: a flag (`--plc-url`), an environment variable",
        "(`ATWHOIS_PLC_URL`) and a TOML key (`plc_url`, in `--config FILE`); flags win over",
        "variables, variables over the file. `atwhois config show` prints the value in force",
        "and where it came from. Made from the settings table (`atwhois/settings/table.py`).",
    ]
    for group, title in settings.GROUP_TITLES.items():
        out += ["", f"## {title[0].upper()}{title[1:]}", ""]
        out += ["| setting: key, flag, variable | type | default | what it does |"]
        out += ["|---|---|---|---|"]
        for s in (s for s in settings.SETTINGS.values() if s.group == group):
            flag = f"`{s.flag}`" + (f" / `--no-{s.flag[2:]}`" if s.kind is bool else "")
            choices = f" (one of: {', '.join(s.choices)})" if s.choices else ""
            out.append(
                f"| `{s.name}`<br>{flag}<br>`{s.env}` | {kinds[s.kind]} | "
                f"{_cell(s.default_text)} | {_cell(s.help)}{choices} |"
            )
    return "\n".join(out) + "\n"


def findings_page() -> str:
    from atwhois.audit import KINDS

    out = [
        "# Audit findings",
        "",
        "What an audit run may find about an identity, by kind, with its severity: a run's",
        "report is ordered worst first, and `atwhois audit --fail-on` exits 1 at a severity",
        "or worse. Made from the audits' table (`audit/findings.py`).",
        "",
        "| finding | severity | meaning |",
        "|---|---|---|",
    ]
    out += [
        f"| `{kind}` | {severity} | {_cell(meaning)} |"
        for kind, (severity, meaning) in KINDS.items()
    ]
    return "\n".join(out) + "\n"


def statuses_page() -> str:
    from atwhois.cache.accounts import STATUSES
    from atwhois.resolver.outcome import VERDICTS

    out = [
        "# Statuses",
        "",
        "## A lookup's verdict",
        "",
        "The `status` of every report, in its words, and the command line's exit code.",
        "",
        "| status | in words | exit code |",
        "|---|---|---|",
    ]
    out += [
        f"| `{status}` | {_cell(words)} | {status.exit_code} |"
        for status, words in VERDICTS.items()
    ]
    out += [
        "",
        "## An account's status at its host",
        "",
        "What a PDS or relay says of an account (`#account` events, `getRepoStatus`), and",
        "whether an account in it serves. Made from `cache/accounts.py`.",
        "",
        "| status | serves | meaning |",
        "|---|---|---|",
    ]
    out += [
        f"| `{name}` | {'yes' if meaning.serves else 'no'} | {_cell(meaning.means)} |"
        for name, meaning in STATUSES.items()
    ]
    return "\n".join(out) + "\n"


def routes() -> tuple[Any, ...]:
    """Every route the daemon describes (`atwhois serve --plc-mirror` answers them all)."""
    from atwhois.server import audits_api, labels, oauth, operations, records
    from atwhois.server.routes import MIRROR, SERVICE, SERVICE_AUTH

    own = (*SERVICE, *SERVICE_AUTH, *records.ROUTES, *labels.ROUTES, *oauth.ROUTES)
    return (*own, *operations.ROUTES, *audits_api.ROUTES, *MIRROR)


def http_page() -> str:
    from atwhois.server.routes import described

    out = [
        "# HTTP API",
        "",
        "What `atwhois serve` answers (the PLC mirror's read API with `--plc-mirror`, and alone",
        "from `atwhois plc mirror`), made from the route tables the router and `/openapi.json`",
        "are made from. A running daemon serves the same as OpenAPI at `/openapi.json`.",
    ]
    for path, verbs in described(routes()).items():
        for verb, operation in verbs.items():
            out += ["", f"## `{verb.upper()} {path}`", "", operation.get("summary", ""), ""]
            for parameter in operation.get("parameters", []):
                needed = "required" if parameter.get("required") else "optional"
                out.append(f"- `{parameter['name']}` ({parameter['in']}, {needed})")
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                schema = body["schema"]
                required = set(schema.get("required", []))
                for name in schema.get("properties", {}):
                    out.append(
                        f"- `{name}` (JSON body, {'required' if name in required else 'optional'})"
                    )
            out += ["", "| status | answer |", "|---|---|"]
            out += [
                f"| {code} | {_cell(answer.get('description', ''))} |"
                for code, answer in operation.get("responses", {}).items()
            ]
    return "\n".join(out) + "\n"


def python_page() -> str:
    import atwhois
    import atwhois.testing

    out = [
        "# Python API",
        "",
        "What `import atwhois` offers: the names of `atwhois.__all__`, with their",
        "documentation as the code has it; then `atwhois.testing`, the network in memory for",
        "your tests. Everything else is internal.",
    ]
    out += _module_names(atwhois, "")
    out += ["", "# `atwhois.testing`", "", inspect.getdoc(atwhois.testing) or ""]
    out += _module_names(atwhois.testing, "atwhois.testing.")
    return "\n".join(out) + "\n"


def _module_names(module: Any, prefix: str) -> list[str]:
    """A section for each name of `module.__all__`: its signature and documentation, and a
    class's public methods."""
    out: list[str] = []
    for name in sorted(module.__all__, key=str.lower):
        value = getattr(module, name)
        if name == "__version__":
            out += ["", "## `__version__`", "", "The installed distribution's version."]
            continue
        kind = (
            "type"  # a Literal alias: the values it admits
            if typing.get_origin(value) is typing.Literal
            else "exception"
            if _is_error(value)
            else "class"
            if inspect.isclass(value)
            else "function"
        )
        out += ["", f"## `{prefix}{name}` ({kind})", ""]
        if kind == "type":
            admitted = ", ".join(repr(admits) for admits in typing.get_args(value))
            out += [f"```python\n{name} = Literal[{admitted}]\n```"]
            continue
        out += [f"```python\n{_signature(name, value)}\n```", "", inspect.getdoc(value) or ""]
        if inspect.isclass(value) and not _is_error(value):
            for method, member in _methods(value):
                out += ["", f"### `{prefix}{name}.{method}`", ""]
                out += [f"```python\n{_signature(method, member)}\n```", ""]
                out.append(inspect.getdoc(member) or "")
    return out


def exceptions_page() -> str:
    """Every error atwhois raises on purpose, as a tree under `AtwhoisError`, each with
    the outcome it stands for (what a step that raised it reports) and its documentation.
    Made from the classes themselves: every module of the package is imported to find
    them."""
    import importlib
    import pkgutil

    import atwhois
    from atwhois.resolver.errors import AtwhoisError

    for module in pkgutil.walk_packages(atwhois.__path__, "atwhois."):
        importlib.import_module(module.name)
    out = [
        "# Exceptions",
        "",
        "Every error atwhois raises on purpose is an `AtwhoisError`: one `except` catches them",
        "all. Under `ResolutionError`, the class says which of the three outcomes a step",
        "ended in: `not_found` (confirmed absent), `failed` (transient: retry, never cache as",
        "absence) or `invalid` (the other side answered nonsense). Made from the classes.",
        "",
    ]

    def branch(cls: type[BaseException], depth: int) -> None:
        outcome = getattr(cls, "outcome", None)
        said = f" — outcome `{outcome}`" if outcome is not None else ""
        doc = " ".join((cls.__dict__.get("__doc__") or "").split())  # its own, not its base's
        out.append(f"{'  ' * depth}- **`{cls.__name__}`** (`{cls.__module__}`){said}: {doc}")
        for sub in sorted(cls.__subclasses__(), key=lambda c: c.__name__):
            # a private class is the code's own control flow, never raised to a caller
            if sub.__module__.startswith("atwhois.") and not sub.__name__.startswith("_"):
                branch(sub, depth + 1)

    branch(AtwhoisError, 0)
    return "\n".join(out) + "\n"


def cli_page() -> str:
    from atwhois.cli.commands import COMMANDS
    from atwhois.cli.main import build_parser

    out = [
        "# Command line",
        "",
        "Every command of `atwhois`, with the help it prints (`atwhois COMMAND --help`), made",
        "from the command table (`cli/commands.py`). Exit codes: 0 verified, 1 not verified,",
        "2 invalid input, 3 transient failure.",
    ]
    for command in COMMANDS:
        words = " ".join(command.path)
        out += ["", f"## `atwhois {words}`", "", command.help, "", "```text"]
        out += [_help(build_parser(command.path), [*command.path, "--help"]).rstrip(), "```"]
    return "\n".join(out) + "\n"


def link_tags(markdown: str, page: str, tags: set[str]) -> str:
    """Every rule tag a page cites (`S-SEC-4`, or S-SEC-4 in its prose), a link to the rule
    in the specification; in the specification, an anchor for each rule. Code blocks are
    left as they are."""
    target = "" if page == "spec.md" else "../" * page.count("/") + "spec.md"
    if page == "spec.md":
        markdown = RULE.sub(
            lambda m: f'- <a id="{m.group(1).lower()}"></a>**{m.group(1)}**', markdown
        )

    def link(tag: str, shown: str) -> str:
        return f"[{shown}]({target}#{tag.lower()})" if tag in tags else shown

    def prose(text: str) -> str:
        parts = CODE_SPAN.split(text)  # odd parts: inline code
        for i, part in enumerate(parts):
            if i % 2:
                bare = part.strip("`")
                parts[i] = link(bare, part) if bare in tags else part
            else:
                parts[i] = BARE_TAG.sub(lambda m: link(m.group(1), m.group(1)), part)
        return "".join(parts)

    blocks = FENCE.split(markdown)  # odd blocks: fenced code
    return "".join(block if i % 2 else prose(block) for i, block in enumerate(blocks))


def spec_tags() -> set[str]:
    return set(RULE.findall((ROOT / "docs" / "spec.md").read_text()))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _is_error(value: Any) -> bool:
    return inspect.isclass(value) and issubclass(value, BaseException)


def _signature(name: str, value: Any) -> str:
    try:
        return f"{name}{inspect.signature(value)}"
    except (TypeError, ValueError):
        return name


def _methods(cls: type) -> list[tuple[str, Any]]:
    """The class's own public methods (and its constructor), in the order written; those
    it names in `PUBLIC`, when it names them (the rest are other parts' of atwhois)."""
    public = getattr(cls, "PUBLIC", None)
    found = []
    for method, member in vars(cls).items():
        shown = method == "__init__" or (
            not method.startswith("_") and (public is None or method in public)
        )
        if shown and callable(member):
            found.append((method, member))
    return found


def _help(parser: Any, argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        parser.parse_args(argv)
    return out.getvalue()


# --- the MkDocs hook -----------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, markdown in references().items():
        files.append(File.generated(config, path, content=markdown))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    path = page.file.src_uri
    if path == "performance.md":
        markdown += _results_index()
    return link_tags(markdown, path, spec_tags())


def _results_index() -> str:
    """The newest run of each benchmark, whole, then every run by date (newest first)."""
    runs = sorted(RESULTS.glob("*.md"), reverse=True)
    newest: dict[str, Path] = {}
    for run in runs:  # 2026-12-05-verify.md: the benchmark is what follows the date
        newest.setdefault(run.stem[11:], run)
    out = ["", "## The latest figures", ""]
    for run in newest.values():
        body = run.read_text().replace("\n## ", "\n#### ").replace("\n# ", "\n### ", 1)
        body = re.sub(r"\]\(([\w.-]+\.md)\)", r"](performance/\1)", body)  # beside it there
        out += ["", "### " + body.lstrip("# ")]
    out += [
        "",
        "## Every run",
        "",
        "Each: its command, its machine, its table (`bench/results/`).",
        "",
    ]
    for run in runs:
        title = run.read_text().split("\n", 1)[0].lstrip("# ").strip()
        out.append(f"- [{title}](performance/{run.name})")
    return "\n".join(out) + "\n"
