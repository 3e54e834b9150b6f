"""The rules' tags hold the house together: every tag the code cites is explained in
`docs/spec.md` and named by a test (so a reader finds the rule and its test by the tag),
the README points at the rules, and a message that cites a tag says where to read it."""

from __future__ import annotations

import re
from pathlib import Path

from atwhois.cli.render import render_text
from atwhois.resolver.identity import invalid_input, now_iso
from atwhois.resolver.rules import SPEC, TAG, cited
from atwhois.resolver.syntax import parse_lookup

ROOT = Path(__file__).resolve().parents[2]
CODE = (".py", ".html")
PRODUCT = ("foundation", "resolver", "cache", "server", "cli", "audit", "stream", "auth", "mirror")


def _tags_in(paths: list[Path]) -> dict[str, set[str]]:
    """tag -> the files that cite it."""
    found: dict[str, set[str]] = {}
    for path in paths:
        for tag in TAG.findall(path.read_text()):
            found.setdefault(tag, set()).add(str(path.relative_to(ROOT)))
    return found


def _code_tags() -> dict[str, set[str]]:
    files = [
        p
        for part in PRODUCT
        for p in (ROOT / "atwhois" / part).rglob("*")
        if p.suffix in (".py", ".html")
    ]
    return _tags_in(files)


def test_every_tag_the_code_cites_is_explained_in_the_spec() -> None:
    spec = (ROOT / SPEC).read_text()
    explained = set(re.findall(r"^- \*\*([A-Z0-9-]+)\*\*", spec, re.MULTILINE))
    in_code = _code_tags()
    assert "F-CUR-1" in in_code  # the product's files are where this looks (else it checks nothing)
    unexplained = {tag: files for tag, files in in_code.items() if tag not in explained}
    assert unexplained == {}


def test_every_tag_the_code_cites_is_named_by_a_test() -> None:
    tests = [p for p in (ROOT / "tests").rglob("*.py") if p.name != Path(__file__).name]
    named = set(_tags_in(tests))
    untested = {tag: files for tag, files in _code_tags().items() if tag not in named}
    assert untested == {}


def test_the_tag_pattern_finds_tags_and_not_curve_names() -> None:
    text = "P-256 and K-256 keys; rules H-TLD-2, U-3, P-NULL-2, CRYPTO-ENC-1, DOC-KEY-3, C-SIG-4"
    assert TAG.findall(text) == [
        "H-TLD-2",
        "U-3",
        "P-NULL-2",
        "CRYPTO-ENC-1",
        "DOC-KEY-3",
        "C-SIG-4",
    ]
    assert cited("a [H-DNS-3] b", None, "[H-DNS-3] [P-SIG-4]", "H-WK-7 uncited") == [
        "H-DNS-3",
        "P-SIG-4",
    ]


def test_the_readme_and_a_message_that_cites_a_tag_point_at_the_rules() -> None:
    assert f"]({SPEC})" in (ROOT / "README.md").read_text()
    try:
        parse_lookup("alice.test", dev=False)
    except Exception as err:
        identity = invalid_input("alice.test", err, now_iso())  # type: ignore[arg-type]
    text = render_text(identity.to_json())
    assert "[H-TLD-2]" in text and f"H-TLD-2: see {SPEC}" in text
