"""DRISL read and written exactly (`resolver.drisl`, R-DATA-*): the data model's vectors,
links told apart from bytes where libipld cannot, every other encoding of a value refused,
and any value the data model holds back to its own bytes."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import libipld
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atwhois.resolver import drisl
from atwhois.resolver.plc.encoding import cid_of

VECTORS = Path(__file__).parents[1] / "vectors" / "atproto-interop-tests" / "data-model"
CID = bytes.fromhex("01711220") + bytes(range(32))


def _vectors(name: str) -> list[dict[str, Any]]:
    return list(json.loads((VECTORS / name).read_text()))


@pytest.mark.parametrize("vector", _vectors("data-model-fixtures.json"), ids=lambda v: v["cid"])
def test_the_data_model_vectors_decode_to_their_json_and_encode_to_their_bytes(
    vector: dict[str, Any],
) -> None:
    """R-DATA-4: the interop vectors' DRISL bytes give their JSON (links as `$link`, bytes
    as `$bytes`), and their JSON gives the same bytes, whose CID is theirs."""
    encoded = base64.b64decode(vector["cbor_base64"] + "==")
    value = drisl.decode(encoded)
    assert drisl.to_json(value) == vector["json"]
    assert drisl.encode(value) == encoded
    assert drisl.encode(drisl.from_json(vector["json"])) == encoded
    assert cid_of(encoded) == vector["cid"]


# The invalid vectors that break the data model itself; the others break lexicon rules
# ($type a non-empty string, a blob's fields), which a record's bytes are not checked for.
DATA_MODEL_BREAKS = {
    "float",
    "bytes with wrong field type",
    "bytes with extra fields",
    "link with wrong field type",
    "link with bogus CID",
    "link with extra fields",
}


def test_the_data_model_refuses_what_its_invalid_vectors_break() -> None:
    """R-DATA-4: floats, `$bytes` and `$link` objects of the wrong shape are refused; the
    valid vectors (an integral float among them) are read."""
    for vector in _vectors("data-model-valid.json"):
        drisl.encode(drisl.from_json(vector["json"]))
    breaking = [v for v in _vectors("data-model-invalid.json") if v["note"] in DATA_MODEL_BREAKS]
    assert len(breaking) == len(DATA_MODEL_BREAKS)
    for vector in breaking:
        with pytest.raises(drisl.NotDrisl):
            drisl.from_json(vector["json"])


def test_a_link_and_bytes_that_look_like_a_cid_are_kept_apart() -> None:
    """R-DATA-4: a byte string holding a CID's bytes is bytes, a tag-42 link is a link, both
    ways (libipld decodes both to the same bytes, and encodes the bytes as a link)."""
    as_bytes = bytes([0xA1, 0x61, 0x62, 0x58, 36]) + CID
    as_link = bytes([0xA1, 0x61, 0x62, 0xD8, 0x2A, 0x58, 37, 0]) + CID
    assert drisl.decode(as_bytes) == {"b": CID}
    assert drisl.decode(as_link) == {"b": drisl.Link(CID)}
    assert drisl.encode({"b": CID}) == as_bytes
    assert drisl.encode({"b": drisl.Link(CID)}) == as_link
    assert libipld.decode_dag_cbor(as_bytes) == libipld.decode_dag_cbor(as_link)  # why
    assert drisl.to_json(drisl.decode(as_link)) == {"b": {"$link": drisl.Link(CID).text}}
    assert drisl.Link(CID).blessed and not drisl.Link(b"\x01\x55" + CID[2:]).blessed


def test_a_link_is_written_as_text_whatever_its_multihash() -> None:
    """R-DATA-4: a link's CID text is libipld's for the CIDs it knows (v1 of any codec, v0),
    and is written for one whose multihash it cannot read, never an error (the fuzzer's
    find: a record's link read from a stranger's block)."""
    for cid in (CID, b"\x01\x55" + CID[2:], b"\x12\x20" + CID[4:]):
        assert drisl.Link(cid).text == libipld.encode_cid(cid)
    unknown = b"\x01\x71\x13\x41" + bytes(65)  # a multihash of 65 bytes: libipld stops at 64
    with pytest.raises(ValueError):
        libipld.encode_cid(unknown)
    assert drisl.decode(drisl.encode(drisl.Link(unknown))) == drisl.Link(unknown)
    assert drisl.Link(unknown).text.startswith("baf")


@pytest.mark.parametrize(
    ("encoded", "why"),
    [
        ("1801", "a head longer"),  # 1 in two bytes
        ("190017", "a head longer"),  # 23 in three
        ("5a00000001ff", "a head longer"),
        ("a2616201616101", "out of order"),  # "b" before "a"
        ("a2626161016162 02", "out of order"),  # "aa" before "b": shorter keys first
        ("a2616101616102", "out of order"),  # "a" twice
        ("bf616101ff", "indefinite"),
        ("0000", "after the value"),
    ],
)
def test_every_other_encoding_of_a_value_is_refused(encoded: str, why: str) -> None:
    """R-DATA-1: one value, one encoding: the shortest head, map keys sorted length first
    and never repeated, definite lengths, nothing after the value."""
    with pytest.raises(drisl.NotDrisl, match=why):
        drisl.decode(bytes.fromhex(encoded.replace(" ", "")))


@pytest.mark.parametrize(
    ("encoded", "why"),
    [
        ("fb3ff0000000000000", "float"),
        ("f93c00", "float"),
        ("f7", "simple value"),
        ("1bffffffffffffffff", "64 bits"),
        ("3b8000000000000000", "64 bits"),
        ("c24101", "tag 2"),
        ("d82a4101", "0x00 and a binary CID"),
        ("d82a4100", "0x00 and a binary CID"),
        ("d82a582600" + CID.hex() + "00", "bytes after its CID"),
        ("a10101", "not text"),
        ("62c328", "UTF-8"),
    ],
)
def test_what_the_data_model_does_not_hold_is_refused(encoded: str, why: str) -> None:
    """R-DATA-2: no floats, no undefined, integers of 64 bits signed, tag 42 only (0x00
    and a whole CID), text keys, UTF-8 text."""
    with pytest.raises(drisl.NotDrisl, match=why):
        drisl.decode(bytes.fromhex(encoded))
    assert drisl.decode(bytes.fromhex("1b7fffffffffffffff")) == 2**63 - 1
    assert drisl.decode(bytes.fromhex("3b7fffffffffffffff")) == -(2**63)


def test_nesting_past_the_depth_is_refused_both_ways() -> None:
    """R-DATA-3: 128 levels of arrays are read and written; one more is refused, never a
    RecursionError."""
    deep: Any = 0
    for _ in range(drisl.MAX_DEPTH):
        deep = [deep]
    assert drisl.decode(drisl.encode(deep)) == deep
    with pytest.raises(drisl.NotDrisl, match="nested"):
        drisl.encode([deep])
    with pytest.raises(drisl.NotDrisl, match="nested"):
        drisl.decode(b"\x81" * (drisl.MAX_DEPTH + 1) + b"\x00")
    with pytest.raises(drisl.NotDrisl, match="nested"):
        drisl.decode(b"\x81" * 100_000)
    with pytest.raises(drisl.NotDrisl, match="nested"):
        drisl.from_json(json.loads("[" * 200 + "]" * 200))


_keys = st.text(max_size=8).filter(lambda key: not key.startswith("$"))  # `$` keys are the model's
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.binary(max_size=40)
    | st.text(max_size=20)
    | st.binary(min_size=32, max_size=32).map(lambda d: drisl.Link(b"\x01\x71\x12\x20" + d)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_any_value_of_the_data_model_has_one_encoding_both_ways(value: Any) -> None:
    """R-DATA-1, R-DATA-4: encoded and decoded, a value is itself; its JSON form gives it
    back; libipld reads the same bytes."""
    encoded = drisl.encode(value)
    assert drisl.decode(encoded) == value
    assert drisl.from_json(json.loads(json.dumps(drisl.to_json(value)))) == value
    libipld.decode_dag_cbor(encoded)
