"""Syntax rules against the interop vectors (all of them) and the edge cases of the checklist."""

from __future__ import annotations

import pytest

from atwhois.resolver import errors, syntax
from tests.vectors import syntax_cases

HANDLE_VALID = syntax_cases("handle_syntax_valid.txt")
HANDLE_INVALID = syntax_cases("handle_syntax_invalid.txt")
DID_VALID = syntax_cases("did_syntax_valid.txt")
DID_INVALID = syntax_cases("did_syntax_invalid.txt")
ATID_VALID = syntax_cases("atidentifier_syntax_valid.txt")
ATID_INVALID = syntax_cases("atidentifier_syntax_invalid.txt")
ATURI_VALID = syntax_cases("aturi_syntax_valid.txt")
ATURI_INVALID = syntax_cases("aturi_syntax_invalid.txt")


def test_vector_counts_match_the_inventory() -> None:
    # tests/vectors/README.md: if a file is misread, every test below would lie.
    assert (len(HANDLE_VALID), len(HANDLE_INVALID)) == (71, 48)
    assert (len(DID_VALID), len(DID_INVALID)) == (24, 18)
    assert (len(ATID_VALID), len(ATID_INVALID)) == (11, 22)
    assert (len(ATURI_VALID), len(ATURI_INVALID)) == (23, 72)


@pytest.mark.parametrize("handle", HANDLE_VALID)
def test_valid_handles(handle: str) -> None:
    assert syntax.parse_handle(handle) == handle.lower()  # H-SYN-6


@pytest.mark.parametrize("handle", HANDLE_INVALID)
def test_invalid_handles(handle: str) -> None:
    with pytest.raises(errors.InvalidHandle) as info:
        syntax.parse_handle(handle)
    assert info.value.rule.startswith("H-SYN-")


@pytest.mark.parametrize("did", DID_VALID)
def test_valid_dids(did: str) -> None:
    assert syntax.parse_did(did) == did  # D-SYN-7: never re-cased


@pytest.mark.parametrize("did", DID_INVALID)
def test_invalid_dids(did: str) -> None:
    with pytest.raises(errors.InvalidDid):
        syntax.parse_did(did)


@pytest.mark.parametrize("text", ATID_VALID)
def test_valid_at_identifiers(text: str) -> None:
    assert syntax.is_valid_at_identifier(text)


@pytest.mark.parametrize("text", ATID_INVALID)
def test_invalid_at_identifiers(text: str) -> None:
    assert not syntax.is_valid_at_identifier(text)


@pytest.mark.parametrize("uri", ATURI_VALID)
def test_valid_at_uris(uri: str) -> None:
    parsed = syntax.parse_at_uri(uri)
    assert syntax.is_valid_at_identifier(parsed.authority)
    assert uri.lower().startswith(f"at://{parsed.authority.lower()}")


@pytest.mark.parametrize("uri", ATURI_INVALID)
def test_invalid_at_uris(uri: str) -> None:
    with pytest.raises(errors.InvalidIdentifier):
        syntax.parse_at_uri(uri)


@pytest.mark.parametrize(
    ("typed", "kind", "value"),
    [
        ("JoHn.TeST", "handle", "john.test"),  # H-SYN-6
        ("@alice.test", "handle", "alice.test"),  # H-SYN-7: stripped from user input
        ("did:plc:ewvi7nxzyoun6zhxrhs64oiz", "did", "did:plc:ewvi7nxzyoun6zhxrhs64oiz"),
        ("at://Alice.Test/app.bsky.feed.post/3k", "handle", "alice.test"),  # U-4
        ("at://did:web:example.com", "did", "did:web:example.com"),
    ],
)
def test_parse_query_normalizes(typed: str, kind: str, value: str) -> None:
    query = syntax.parse_query(typed)
    assert (query.kind, query.value, query.text) == (kind, value, typed)


@pytest.mark.parametrize(
    ("typed", "rule"),
    [
        ("DID:plc:ewvi7nxzyoun6zhxrhs64oiz", "D-SYN-1"),  # D-SYN-7: not silently lowercased
        ("@@alice.test", "H-SYN-3"),
        ("john..test", "H-SYN-2"),
        ("192.168.0.1", "H-SYN-4"),
        ("", "H-SYN-2"),
        (".", "H-SYN-2"),
        ("alice.test.", "H-SYN-2"),
        ("did:plc:", "D-SYN-5"),
        ("at://alice.test/", "U-1"),
        ("x" * 300 + ".com", "H-SYN-1"),
        ("bücher.de", "H-SYN-1"),
    ],
)
def test_parse_query_names_the_broken_rule(typed: str, rule: str) -> None:
    with pytest.raises(errors.InvalidInput) as info:
        syntax.parse_query(typed)
    assert info.value.rule == rule


@pytest.mark.parametrize("tld", sorted(syntax.RESERVED_TLDS))
def test_reserved_tlds_are_refused(tld: str) -> None:
    with pytest.raises(errors.ReservedHandle) as info:
        syntax.check_resolvable_handle(f"laptop.{tld}", allow_test_tld=True)
    assert info.value.rule == "H-TLD-1"


def test_handle_invalid_marker_and_test_tld() -> None:
    with pytest.raises(errors.ReservedHandle, match="H-INV-1"):
        syntax.check_resolvable_handle("handle.invalid", allow_test_tld=True)
    with pytest.raises(errors.ReservedHandle, match="H-TLD-2"):
        syntax.check_resolvable_handle("alice.test", allow_test_tld=False)
    syntax.check_resolvable_handle("alice.test", allow_test_tld=True)
    syntax.check_resolvable_handle("alice.example.com", allow_test_tld=False)


@pytest.mark.parametrize(
    ("did", "dev", "expected"),
    [
        ("did:web:example.com", False, syntax.WebHost("example.com")),
        ("did:web:Example.COM", False, syntax.WebHost("example.com")),
        ("did:web:localhost%3A8080", True, syntax.WebHost("localhost", 8080)),
        ("did:web:localhost", True, syntax.WebHost("localhost")),
    ],
)
def test_did_web_hosts(did: str, dev: bool, expected: syntax.WebHost) -> None:
    assert syntax.parse_did_web(did, dev=dev, allow_test_tld=dev) == expected


@pytest.mark.parametrize(
    ("did", "rule"),
    [
        ("did:web:example.com:user:alice", "D-WEB-1"),  # path-based
        ("did:web:localhost%3A8080", "D-WEB-3"),  # not in dev mode
        ("did:web:example.com%3A8080", "D-WEB-3"),  # port only for localhost
        ("did:web:printer.local", "H-TLD-1"),  # D-WEB-2
        ("did:web:127.0.0.1", "D-WEB-2"),  # an IP literal is not a hostname
    ],
)
def test_did_web_refusals(did: str, rule: str) -> None:
    with pytest.raises(errors.InvalidDid) as info:
        syntax.parse_did_web(did, dev=False, allow_test_tld=False)
    assert info.value.rule == rule


def test_plc_identifier() -> None:
    syntax.check_plc_did("did:plc:ewvi7nxzyoun6zhxrhs64oiz")
    for bad in (
        "did:plc:ewvi7nxzyoun6zhxrhs64oi",
        "did:plc:EWVI7NXZYOUN6ZHXRHS64OIZ",
        "did:plc:ewvi7nxzyoun6zhxrhs64oi1",
    ):
        with pytest.raises(errors.InvalidDid, match="D-PLC-1"):
            syntax.check_plc_did(bad)


@pytest.mark.parametrize(
    ("typed", "kind", "value"),
    [
        ("https://bsky.app/profile/Alice.Test", "handle", "alice.test"),
        ("https://bsky.app/profile/alice.test/post/3k2a7", "handle", "alice.test"),
        (
            "https://deer.social/profile/did:plc:ewvi7nxzyoun6zhxrhs64oiz",
            "did",
            "did:plc:ewvi7nxzyoun6zhxrhs64oiz",
        ),
        (
            "https://bsky.app/profile/did%3Aplc%3Aewvi7nxzyoun6zhxrhs64oiz",
            "did",
            "did:plc:ewvi7nxzyoun6zhxrhs64oiz",
        ),
    ],
)
def test_profile_urls_and_pasted_text(typed: str, kind: str, value: str) -> None:
    query = syntax.parse_query(typed)
    assert (query.kind, query.value) == (kind, value)


@pytest.mark.parametrize(
    "typed",
    [
        "https://bsky.app/",
        "https://example.com/alice",
        "https://bsky.app/profile/",
        "https://bsky.app/profile/not_a_handle",
    ],
)
def test_other_urls_are_refused(typed: str) -> None:
    with pytest.raises(errors.InvalidInput):
        syntax.parse_query(typed)


@pytest.mark.parametrize(
    ("did", "rule"),
    [("did:web:a.onion", "H-TLD-1"), ("did:web:x.local", "H-TLD-1"), ("did:web:x.test", "H-TLD-2")],
)
def test_a_did_web_on_a_reserved_tld_names_its_rule_once(did: str, rule: str) -> None:
    with pytest.raises(errors.InvalidDid) as refused:
        syntax.parse_did_web(did, dev=False, allow_test_tld=False)
    assert refused.value.rule == rule and str(refused.value).count(f"[{rule}]") == 1
