"""The manual (issue 59): the site builds strict (a broken link, a page missing from the
navigation, an anchor that is not there: each fails it), its references are made from the
code so that every setting, finding kind, status, route, command and public name has an
entry and nothing removed stays, every rule tag a page cites links to its rule, and the
README stays a short front page whose links all resolve."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import atwhois
import atwhois.testing
from atwhois import settings
from atwhois.audit import KINDS
from atwhois.cache.accounts import STATUSES
from atwhois.cli.commands import COMMANDS
from atwhois.resolver.outcome import Status
from atwhois.server.routes import described

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")
GUIDES = (
    "cli", "library", "daemon", "cache", "live-freshness", "mirror", "audits", "dnssec",
    "pds-check", "service-auth", "signed-data", "deployment", "monitoring",
)  # fmt: skip
REFERENCES = ("settings", "cli", "http-api", "python-api", "findings", "statuses")


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _generator()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    return out


def test_the_site_builds_strict_with_every_page(site: Path) -> None:
    pages = ["getting-started", "architecture", "performance", "spec", "test-network"]
    pages += [f"guides/{name}" for name in GUIDES] + [f"reference/{name}" for name in REFERENCES]
    for page in pages:
        assert (site / f"{page}.html").is_file(), page
    for result in (ROOT / "bench" / "results").glob("*.md"):
        assert (site / "performance" / f"{result.stem}.html").is_file(), result.name


def test_the_site_works_from_its_files(site: Path) -> None:
    """Opened from site/index.html, as the README says: every link between pages names a
    file that is there (folder links landed on a directory listing), and the search has
    its index beside the pages (the offline plugin's), so it works without a server."""
    pages = [page for page in site.rglob("*.html") if page.name != "404.html"]  # a server's
    assert len(pages) > 25
    for page in pages:
        for target in re.findall(r'href="([^"#:]+\.html)(?:#[^"]*)?"', page.read_text()):
            assert (page.parent / target).resolve().is_file(), (page, target)
        assert not re.search(r'href="[^":]*/"', page.read_text()), page  # no folder link
    assert (site / "search" / "search_index.js").is_file()


def test_every_rule_tag_a_page_cites_links_to_its_rule(site: Path) -> None:
    spec = (site / "spec.html").read_text()
    anchors = set(re.findall(r'<a id="([a-z0-9-]+)"></a>', spec))
    assert {"h-wk-7", "s-sec-4", "sa-sig-2"} <= anchors
    linked = set()
    for page in site.glob("guides/*.html"):
        linked |= set(re.findall(r'href="\.\./spec\.html#([a-z0-9-]+)"', page.read_text()))
    assert linked and linked <= anchors
    assert {"h-wk-7", "h-res-2"} <= linked


def test_every_name_the_code_defines_has_an_entry() -> None:
    pages = generate.references()
    for name, setting in settings.SETTINGS.items():
        assert f"| `{name}`<br>`{setting.flag}`" in pages["reference/settings.md"], name
    for kind, (severity, _) in KINDS.items():
        assert f"| `{kind}` | {severity} |" in pages["reference/findings.md"], kind
    for status in Status:
        assert f"| `{status}` |" in pages["reference/statuses.md"], status
    for status in STATUSES:
        assert f"| `{status}` |" in pages["reference/statuses.md"], status
    for path, verbs in described(generate.routes()).items():
        for verb in verbs:
            assert f"## `{verb.upper()} {path}`" in pages["reference/http-api.md"], path
    python = pages["reference/python-api.md"]
    for name in atwhois.__all__:
        assert f"## `{name}`" in python, name
    for name in atwhois.testing.__all__:  # the kit a service's tests are written with
        assert f"## `atwhois.testing.{name}`" in python, name
    assert "### `atwhois.testing.World.service_token`" in python
    for cls in (atwhois.CachedResolver, atwhois.Resolver):  # their API, not the daemon's
        shown = set(re.findall(rf"^### `{cls.__name__}\.(\w+)`", python, re.M))
        assert shown == {"__init__", *cls.PUBLIC}, (cls, shown)
    for command in COMMANDS:
        assert f"## `atwhois {' '.join(command.path)}`" in pages["reference/cli.md"], command
    assert "/v1/verify/service-auth" in pages["reference/http-api.md"]
    assert "--lxm NSID" in pages["reference/cli.md"]  # a command's own flags, from its help


def test_the_exceptions_page_documents_every_error_under_one_root() -> None:
    page = generate.exceptions_page()
    entries = re.findall(r"^( *)- \*\*`(\w+)`\*\* \(`([\w.]+)`\)[^:]*: (.*)$", page, re.M)
    assert entries[0][1] == "AtwhoisError" and entries[0][0] == ""
    named = {name for _, name, _, _ in entries}
    assert {"NotFound", "UpstreamFailure", "InvalidData", "WrongEventLoop", "DnssecBogus"} <= named
    assert all(doc.strip() for _, _, _, doc in entries), [e for e in entries if not e[3].strip()]
    assert "- **`NotFound`** (`atwhois.resolver.errors`) — outcome `not_found`" in page


def test_a_setting_or_finding_added_or_removed_shows_without_touching_the_docs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = dict(settings.SETTINGS)
    gone = table.pop("dnssec_memory_mb")
    table["new_knob"] = dataclasses.replace(gone, name="new_knob", help="a knob added today")
    monkeypatch.setattr(settings, "SETTINGS", table)
    page = generate.settings_page()
    assert "| `new_knob`<br>`--new-knob`<br>`ATWHOIS_NEW_KNOB`" in page
    assert "a knob added today" in page
    assert "dnssec_memory_mb" not in page
    kinds = {k: v for k, v in KINDS.items() if k != "pds_changed"}
    kinds["quorum_lost"] = (KINDS["did_changed"][0], "a finding added today")
    monkeypatch.setattr("atwhois.audit.KINDS", kinds)
    findings = generate.findings_page()
    assert "| `quorum_lost` | critical | a finding added today |" in findings
    assert "pds_changed" not in findings


def test_the_readme_is_a_short_front_page_whose_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert text.splitlines()[3].startswith("make run ") and text.splitlines()[4].startswith(
        "make test "
    )
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert len(targets) >= 15
    for target in targets:
        assert (ROOT / target).exists(), target
    assert not re.search(r"^\|", text, re.M)  # no tables: the references are made from the code


def test_no_test_reads_the_readme_for_data() -> None:
    readers = []
    for path in (ROOT / "tests").rglob("*.py"):
        source = path.read_text()
        if re.search(r'"README\.md"\)\.read_text\(\)', source) and path.name not in (
            "test_docs.py",
            "test_rule_tags.py",  # that it links to the rules, not what they are
        ):
            readers.append(path.name)
    assert readers == []
