"""What the product imports is what it declares (issue 56): every third-party module a
product module imports (at the top, under TYPE_CHECKING or inside a function) belongs to a
distribution named in `[project.dependencies]`, and nothing declared there goes unused — a
package that arrives only because another one pulls it in breaks the day that one drops it."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from tests.house.test_layers import PRODUCT, ROOT, TOOLING, imported, modules


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def declared() -> set[str]:
    """What a plain install brings, and the product's extras (not the tests')."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = [*project["dependencies"], *extras["server"], *extras["redis"], *extras["postgres"]]
    return {_name(r) for r in wanted}


def third_party_imports() -> dict[str, set[str]]:
    """top-level module name -> the product files that import it."""
    own = {"atwhois", *PRODUCT, *TOOLING}
    found: dict[str, set[str]] = {}
    for package in PRODUCT:
        for name, path in modules(package):
            for module in imported(name, path):
                top = module.split(".")[0]
                if top and top not in own and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_third_party_import_of_the_product_is_declared() -> None:
    distributions = packages_distributions()
    undeclared = {}
    for top, files in third_party_imports().items():
        names = {d.lower().replace("_", "-") for d in distributions.get(top, [top])}
        if not names & declared():
            undeclared[top] = sorted(files)
    assert undeclared == {}


def test_every_declared_dependency_is_imported_by_the_product() -> None:
    distributions = packages_distributions()
    used = {
        d.lower().replace("_", "-")
        for top in third_party_imports()
        for d in distributions.get(top, [top])
    }
    # psycopg[binary] is imported as psycopg; its binary build is found by psycopg itself
    assert declared() - used == set()


# The daemon's stack, Redis and PostgreSQL: extras, never in a plain install (issue 67)
DAEMONS_STACK = {"uvloop", "jinja2", "prometheus-client", "websockets", "zstandard"}


def test_a_plain_install_names_none_of_the_daemons_stack() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    plain = {_name(r) for r in project["dependencies"]}
    assert plain & (DAEMONS_STACK | {"redis", "psycopg"}) == set()
    extras = project["optional-dependencies"]
    assert {_name(r) for r in extras["server"]} == DAEMONS_STACK
    assert extras["all"] == ["atwhois[server,redis,postgres]"]
    assert "atwhois[all]" in extras["test"]  # the tests, make and the image: everything
    from atwhois.cli.main import EXTRAS  # what a command without its extra says

    distributions = packages_distributions()
    for module, extra in EXTRAS.items():
        names = {_name(d) for d in distributions.get(module, [module])}
        assert names <= {_name(r) for r in extras[extra]}, (module, extra)
