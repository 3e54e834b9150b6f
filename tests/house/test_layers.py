"""The house's shape, checked against the code: the architecture page's table says which
packages each package may import; every import in the code (at the top, under
TYPE_CHECKING or inside a function alike) must be one of them, the table itself must be
layered (each row imports only rows below it), no module imports itself round a circle,
the product never imports its tooling, and every error it defines is an `AtwhoisError`."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from atwhois.resolver.errors import AtwhoisError

ROOT = Path(__file__).resolve().parents[2]
TOOLING = ("devnet", "bench", "tests")
# Declarative tables, which may run longer than a module of code.
TABLES = {"atwhois/settings/table.py", "atwhois/cli/commands.py", "atwhois/server/openapi.py"}
MAX_LINES = 460


def layer_table() -> dict[str, set[str]]:
    """package -> the packages it may import, in the table's order (top to bottom)."""
    section = (ROOT / "docs" / "architecture.md").read_text()
    table: dict[str, set[str]] = {}
    for row in re.findall(r"^\| `(\w+)/` \|.*\|\s*([\w, ]*?)\s*\|$", section, re.MULTILINE):
        package, allowed = row
        table[package] = {name.strip() for name in allowed.split(",") if name.strip()}
    return table


PRODUCT = list(layer_table())


def modules(package: str) -> Iterator[tuple[str, Path]]:
    """The modules of a folder, by the names they are imported as (`atwhois.resolver.dns`
    for the product's, `devnet.world` for the tooling's)."""
    folder = ROOT / "atwhois" / package if package in PRODUCT else ROOT / package
    for path in sorted(folder.rglob("*.py")):
        if "node_modules" in path.parts:
            continue
        parts = list(path.relative_to(folder.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(["atwhois", *parts] if package in PRODUCT else parts), path


def part(module: str) -> str:
    """The folder a module is in: `atwhois.cache.keys` -> cache; `atwhois` itself, and the
    tooling's and third parties' modules, by their first name."""
    names = module.split(".")
    return names[1] if names[0] == "atwhois" and len(names) > 1 else names[0]


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """A module's syntax tree, walked once for every test that reads its imports."""
    return tuple(ast.walk(ast.parse(path.read_text())))


def imported(name: str, path: Path, known: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """The modules `name` imports, as dotted names. `from pkg import x` names `pkg.x` when
    that is one of the `known` modules, and `pkg` itself when a name it defines is taken."""
    is_package = path.name == "__init__.py"
    base = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _nodes(path):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                module = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            submodules = {f"{module}.{a.name}" for a in node.names} & known
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(module)
    return found


def test_the_table_names_every_package_and_is_layered() -> None:
    table = layer_table()
    assert set(table) == {
        "cli",
        "server",
        "audit",
        "auth",
        "stream",
        "cache",
        "mirror",
        "resolver",
        "settings",
        "foundation",
    }
    order = list(table)
    for package, allowed in table.items():
        assert allowed <= set(order), package
        below = set(order[order.index(package) + 1 :])
        assert allowed <= below, f"{package} may import a package above it: {allowed - below}"
    assert table["mirror"] == {"resolver", "foundation"}  # the mirror rests on the rules alone
    assert table["foundation"] == set()


@pytest.mark.parametrize("package", PRODUCT)
def test_every_import_is_one_the_table_allows(package: str) -> None:
    allowed = layer_table()[package] | {package}
    # the public face (`atwhois` itself) is above every part: none imports it
    first_party = {"atwhois", *PRODUCT, *TOOLING}
    wrong = {}
    for name, path in modules(package):
        if outside := ({part(module) for module in imported(name, path)} & first_party) - allowed:
            wrong[str(path.relative_to(ROOT))] = sorted(outside)
    assert wrong == {}


def test_the_product_imports_itself_by_one_name() -> None:
    """Every import of a part, in the product, its tooling and its tests, is `atwhois.…`:
    a bare `resolver` or `cache` is a stranger's package of that name (issue 56)."""
    bare = {}
    for folder in [*PRODUCT, *TOOLING]:
        for name, path in modules(folder):
            if found := {m for m in imported(name, path) if m.split(".")[0] in PRODUCT}:
                bare[str(path.relative_to(ROOT))] = sorted(found)
    assert bare == {}


def test_no_module_imports_itself_round_a_circle() -> None:
    """In the product and in its tooling (the test network, the benchmarks) alike."""
    known = {name: path for package in [*PRODUCT, *TOOLING] for name, path in modules(package)}
    edges = {
        name: {m for m in imported(name, path, set(known)) if m in known and m != name}
        for name, path in known.items()
    }
    state: dict[str, str] = {}  # "open" while on the current path, then "done"
    circles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                circles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "done"

    for start in sorted(known):
        if start not in state:
            visit(start, [start])
    assert circles == []


def test_the_tooling_stays_beside_the_product() -> None:
    """devnet/ and bench/ never import tests/; neither the product imports them."""
    for package in ("devnet", "bench"):
        for name, path in modules(package):
            assert not {m for m in imported(name, path) if m.split(".")[0] == "tests"}, path


@pytest.mark.parametrize("package", PRODUCT)
def test_every_error_defined_is_an_atwhois_error(package: str) -> None:
    outside = []
    for name, _ in modules(package):
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
                and not issubclass(value, AtwhoisError)
            ):
                outside.append(f"{name}.{value.__name__}")
    assert outside == []


@pytest.mark.parametrize("package", PRODUCT)
def test_no_module_of_code_runs_past_the_bound(package: str) -> None:
    long = {}
    for _, path in modules(package):
        where = str(path.relative_to(ROOT))
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES and where not in TABLES:
            long[where] = lines
    assert long == {}


def test_the_faces_go_through_the_front_door() -> None:
    """Issue 56: no module of server/ reaches through a cache to its resolver (the page's
    history, parsing, closing): it asks the `CachedResolver` itself."""
    reaching = [
        str(path.relative_to(ROOT))
        for _, path in modules("server")
        if re.search(r"cached\.resolver\b", path.read_text())
    ]
    assert reaching == []
