"""DID document extraction (spec checklist section 7) against indigo's fixtures and edge cases."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from atwhois.resolver import document, errors
from atwhois.resolver.identity import Evidence
from atwhois.resolver.outcome import Outcome
from tests.vectors import did_documents

DOCS = did_documents()
K256_MULTIKEY = "did:key:zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF"


def test_all_fixtures_are_here() -> None:
    assert len(DOCS) == 7  # tests/vectors/README.md lists seven documents
    assert "did_plc_doc.json" in DOCS and "fakermaker.didDoc.json" in DOCS


@pytest.mark.parametrize("name", sorted(DOCS))
def test_every_fixture_parses(name: str) -> None:
    doc = DOCS[name]
    data = document.extract(doc["id"], doc, dev=True)
    assert data.did == doc["id"]
    if name == "did_web_doc.json":  # DOC-MISC-1: a feed generator, no key, no handle, no PDS
        assert (data.declared_handle, data.signing_key, data.pds) == (None, None, None)
        assert set(data.warnings) == {"no_signing_key", "no_pds"}
        assert [s.id for s in data.services] == ["#bsky_fg"]
    else:
        assert data.declared_handle == doc["alsoKnownAs"][0].removeprefix("at://")
        assert data.signing_key is not None and data.pds is not None


def test_current_and_legacy_forms_give_the_same_key() -> None:
    # DOC-KEY-1..3: fully-qualified Multikey id vs relative legacy id, same K-256 key.
    current = document.extract(DOCS["did_plc_doc.json"]["id"], DOCS["did_plc_doc.json"])
    legacy_doc = DOCS["did_plc_doc_legacy.json"]
    legacy = document.extract(legacy_doc["id"], legacy_doc)
    assert current.signing_key == legacy.signing_key
    assert current.signing_key is not None and current.signing_key.curve == "k256"
    assert "legacy_key_format" in legacy.warnings and "legacy_key_format" not in current.warnings
    assert current.pds == "https://bsky.social"


def test_legacy_p256_document() -> None:
    doc = DOCS["fakermaker.didDoc.json"]
    data = document.extract(doc["id"], doc, dev=True)
    assert data.signing_key is not None and data.signing_key.did_key.startswith("did:key:zDna")
    assert data.pds == "http://localhost:2583"  # http allowed in development only
    strict = document.extract(doc["id"], doc)
    assert strict.pds is None and "invalid_pds_endpoint" in strict.warnings


def _doc(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(DOCS["did_plc_doc.json"])
    doc.update(changes)
    return doc


DID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"


def test_first_valid_at_alias_wins() -> None:
    # DOC-AKA-1 (and atproto.dart #2570: not "any alias matches").
    aliases = [
        "https://x.example",
        "at://under_example_com",
        "at://correct.EXAMPLE.com",
        "at://second.example.com",
    ]
    assert document.extract(DID, _doc(alsoKnownAs=aliases)).declared_handle == "correct.example.com"
    trailing = ["at://alice.example.com/app.bsky.actor.profile", "at://bob.example.com"]
    assert document.extract(DID, _doc(alsoKnownAs=trailing)).declared_handle == "bob.example.com"
    assert document.extract(DID, _doc(alsoKnownAs=[])).declared_handle is None


def test_id_must_equal_the_did() -> None:
    with pytest.raises(errors.InvalidData, match="DOC-ID-1"):
        document.extract("did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", _doc())


@pytest.mark.parametrize(
    "body",
    [
        b"<html>",
        b"[]",
        b'"did"',
        b"\xff\xfe",
        b"[" * 30000 + b"]" * 30000,  # past the recursion limit
        b'{"id": "did:plc:ewvi7nxzyoun6zhxrhs64oiz", "alsoKnownAs": "at://a.com"}',
        b'{"id": "did:plc:ewvi7nxzyoun6zhxrhs64oiz", "verificationMethod": {}}',
    ],
)
def test_malformed_documents_are_invalid_data(body: bytes) -> None:
    with pytest.raises(errors.InvalidData):
        document.parse_json_document(DID, body)


def test_key_rules() -> None:
    method = DOCS["did_plc_doc.json"]["verificationMethod"][0]
    other_controller = {**method, "controller": "did:plc:someoneelseaaaaaaaaaaaaa"}
    wrong_type = {**method, "type": "Ed25519VerificationKey2020"}
    garbage = {**method, "publicKeyMultibase": "zNotAKey"}
    relative = {**method, "id": "#atproto"}
    for methods, expect_key in [
        ([other_controller], False),
        ([wrong_type], False),
        ([garbage], False),
        ([garbage, relative], True),  # the first *valid* entry
        (
            [
                {
                    "id": "#atproto_label",
                    **{k: method[k] for k in ("type", "controller", "publicKeyMultibase")},
                }
            ],
            False,
        ),
    ]:
        data = document.extract(DID, _doc(verificationMethod=methods))
        assert (data.signing_key is not None) is expect_key, methods


@pytest.mark.parametrize(
    ("endpoint", "ok"),
    [
        ("https://pds.example.com", True),
        ("https://pds.example.com:8443", True),
        ("https://pds.example.com/", True),
        ("https://pds.example.com/xrpc", False),
        ("https://user@pds.example.com", False),
        ("ftp://pds.example.com", False),
        ("https://pds.example.com?x=1", False),
        ("https://", False),
        ("https://h:99999", False),
    ],
)
def test_pds_endpoint_is_origin_only(endpoint: str, ok: bool) -> None:
    """DOC-PDS-2: an https origin, nothing more."""
    service = [
        {"id": "#atproto_pds", "type": "AtprotoPersonalDataServer", "serviceEndpoint": endpoint}
    ]
    assert (document.extract(DID, _doc(service=service)).pds == endpoint) is ok


def test_pds_type_is_checked_and_unknown_entries_tolerated() -> None:
    """DOC-PDS-1: `#atproto_pds` of type AtprotoPersonalDataServer only; DOC-PDS-3: none
    found is the warning `no_pds`, not an error; DOC-MISC-1: other entries tolerated."""
    services = [
        {"id": "#atproto_pds", "type": "SomethingElse", "serviceEndpoint": "https://a.com"},
        {
            "id": "#atproto_labeler",
            "type": "AtprotoLabeler",
            "serviceEndpoint": "https://labeler.example.com",
        },
        {"id": "#odd", "serviceEndpoint": {"nested": True}},
    ]
    data = document.extract(DID, _doc(service=services, authentication=None))
    assert data.pds is None and "no_pds" in data.warnings
    assert [s.id for s in data.services] == ["#atproto_pds", "#atproto_labeler"]


def test_document_round_trips_through_json() -> None:
    served = json.dumps(_doc(), indent=1).encode()
    body, data = document.parse_json_document(DID, served)
    assert body is served and data.declared_handle == "atproto.com"  # kept as served


def test_a_document_in_another_encoding_is_kept_as_utf8() -> None:
    """JSON may come as UTF-16 or with a byte-order mark; what is kept (and spliced into
    answers) is always UTF-8, saying the same thing."""
    for served in (
        json.dumps(_doc()).encode("utf-16"),
        b"\xef\xbb\xbf" + json.dumps(_doc()).encode(),
    ):
        body, data = document.parse_json_document(DID, served)
        body.decode("utf-8")
        assert not body.startswith(b"\xef\xbb\xbf") and json.loads(body) == _doc()
        assert data.declared_handle == "atproto.com"


@pytest.mark.parametrize(
    "body",
    [b"<!doctype html><h1>Request blocked</h1>", b'{"id": "did:plc:ewvi7nxzyo', b"[" * 5000],
)
def test_a_body_that_is_not_json_is_a_malformed_answer_which_confirms_nothing(
    body: bytes,
) -> None:
    """An HTML page, half a document, nesting past the recursion limit: the other side's
    trouble, reported as invalid data but never confirming anything about the DID."""
    with pytest.raises(errors.MalformedAnswer) as info:
        document.parse_json_document(DID, body)
    evidence = Evidence.failure(info.value, 1.0, "https://example.com")
    assert evidence.outcome is Outcome.INVALID and not evidence.confirmed


def test_a_well_formed_but_unacceptable_document_is_confirmed_invalid_data() -> None:
    """What the other side really serves (a JSON array, a document for another DID) says
    something about the DID: it may replace a cached answer."""
    for body in (b"[1, 2]", json.dumps(_doc(id="did:plc:someoneelseaaaaaaaaaaaaa")).encode()):
        with pytest.raises(errors.InvalidData) as info:
            document.parse_json_document(DID, body)
        assert not isinstance(info.value, errors.MalformedAnswer)
        assert Evidence.failure(info.value, 1.0, None).confirmed


def test_a_report_keeps_the_first_entries_of_long_lists_and_reads_them_all() -> None:
    """Thousands of services or aliases are a stranger's way to make every cached report
    heavy: the report lists the first few and says so, while the handle and the PDS are
    still taken from every entry (the PDS here is the last service)."""
    pds = {
        "id": "#atproto_pds",
        "type": "AtprotoPersonalDataServer",
        "serviceEndpoint": "https://p.com",
    }
    padding = [
        {"id": f"#s{i}", "type": "X", "serviceEndpoint": f"https://s{i}.com"} for i in range(500)
    ]
    aliases = [f"https://a{i}.example" for i in range(500)] + ["at://late.example.com"]
    data = document.extract(DID, _doc(service=[*padding, pds], alsoKnownAs=aliases))
    assert data.pds == "https://p.com" and data.declared_handle == "late.example.com"
    assert len(data.services) == len(data.also_known_as) == document.KEPT_ENTRIES
    assert "long_document_lists" in data.warnings
    assert "long_document_lists" not in document.extract(DID, _doc()).warnings
