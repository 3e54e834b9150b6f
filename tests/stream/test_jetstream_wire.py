"""Jetstream's wire as the reference server (bluesky-social/jetstream) writes it, against our
decoders: the golden v1 messages it captured from a real v1 server (copied verbatim), and the
v1 and v2 frames rebuilt field for field from its encoders, handler and tests
(`tests/vectors/jetstream/frames.json`, each frame naming where it comes from). Each decodes
to the event it says; what the reference's client skips is skipped, never refused."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest

from atwhois.stream.frames import (
    AccountEvent,
    ErrorFrame,
    Event,
    IdentityEvent,
    InfoEvent,
    MalformedFrame,
    Skipped,
    decode_jetstream,
    decode_jetstream_v2,
)
from devnet import jetstream_wire

VECTORS = Path(__file__).parents[1] / "vectors" / "jetstream"
GOLDEN_V1 = VECTORS / "internal" / "subscribe" / "testdata" / "golden_v1.jsonl"
FRAMES: list[dict[str, Any]] = json.loads((VECTORS / "frames.json").read_text())["frames"]
V2 = "network.bsky.jetstream.subscribeEvents#"
T17 = "2023-11-14T22:13:20.000000Z"
T1 = "1970-01-01T00:00:00.000001Z"

# What each frame is to atwhois (the data file says only what the reference sends).
READ: dict[str, Event] = {
    "v2 identity, no handle": IdentityEvent(123, "did:plc:test", T17, None),
    "v2 identity, with handle": IdentityEvent(6, "did:plc:a", T1, "alice.test"),
    "v2 account, active": AccountEvent(123, "did:plc:test", T17, True, None),
    "v2 account, not active, with its status": AccountEvent(5, "did:plc:a", T1, False, "deleted"),
    "v2 info OutdatedCursor": InfoEvent(  # no seq: it moves no cursor
        "OutdatedCursor", "requested timestamp cursor below retention floor; starting at seq 200"
    ),
    "v2 error ConsumerTooSlow": ErrorFrame(
        "ConsumerTooSlow",
        "reading below the floor rate 2100000 events behind the tip; reconnect with cursor=42",
    ),
    "v2 error ConsumerTooSlow, no message": ErrorFrame("ConsumerTooSlow", None),
    "v2 error InternalError, read failed": ErrorFrame(
        "InternalError", "stream read failed; reconnect"
    ),
    "v2 error InternalError, archive unavailable": ErrorFrame(
        "InternalError", "archive replay unavailable; reconnect"
    ),
    "v2 sync": Skipped("#sync", 77),
    "v2 commit, create": Skipped("#commit", 12345),
    "v2 commit, delete": Skipped("#commit", 9),
    "v2 payload of a kind not known yet": Skipped("unknown payload", None),
    "v2 payload of another lexicon": Skipped("unknown payload", None),
    "v2 envelope of a type not known yet": Skipped("unknown envelope", None),
    # v1: the cursor is the time, never the seq the current reference adds
    "v1 identity, with the v2 seq as its cursor": IdentityEvent(
        1700000000000000, "did:plc:test", "", None
    ),
    "v1 account, with the v2 seq as its cursor": AccountEvent(
        1700000000000000, "did:plc:test", "", True, None
    ),
    "v1 commit, with the v2 seq as its cursor": Skipped("commit", 1700000000000000),
    "v1 commit, seq 0: no cursor": Skipped("commit", 1700000000000000),
}


def _stream_frames() -> list[dict[str, Any]]:
    return [frame for frame in FRAMES if "status" not in frame]


@pytest.mark.parametrize("vector", _stream_frames(), ids=lambda vector: vector["name"])
def test_each_frame_the_reference_sends_is_read_as_what_it_says(vector: dict[str, Any]) -> None:
    decoder = decode_jetstream if vector["name"].startswith("v1") else decode_jetstream_v2
    assert decoder(vector["frame"].encode()) == READ[vector["name"]]


def test_every_frame_of_the_data_names_its_source_and_is_read() -> None:
    streamed = {vector["name"] for vector in _stream_frames()}
    assert streamed == set(READ)
    for vector in FRAMES:
        source = vector["source"]
        assert source["repo"] == "github.com/bluesky-social/jetstream", vector["name"]
        assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]) and source["file"]


def test_the_golden_v1_messages_are_read_with_time_us_as_their_cursor() -> None:
    """Ten messages captured from a real v1 server: eight commits skipped with their time as
    the cursor, the identity (no handle) and the account (active) read as events."""
    read = [decode_jetstream(line) for line in GOLDEN_V1.read_bytes().splitlines()]
    did, time = "did:plc:g4ut2w5755qxi3fe7mfs72p4", "2026-05-25T14:23:29.950Z"
    assert read[7] == IdentityEvent(1779719010267528, did, time, None)
    assert read[8] == AccountEvent(1779719010272410, did, time, True, None)
    commits = [event for index, event in enumerate(read) if index not in (7, 8)]
    assert [event.kind for event in commits if isinstance(event, Skipped)] == ["commit"] * 8
    assert [event.seq for event in commits] == [
        json.loads(line)["time_us"]
        for index, line in enumerate(GOLDEN_V1.read_bytes().splitlines())
        if index not in (7, 8)
    ]


def test_the_drafts_event_envelope_is_read_as_the_references_message() -> None:
    """Proposal 0015's draft named the envelope "event"; instances built on it are read."""
    for vector in _stream_frames():
        if vector["frame"].startswith('{"$type":"message",'):
            draft = vector["frame"].replace('{"$type":"message",', '{"$type":"event",', 1)
            assert decode_jetstream_v2(draft.encode()) == READ[vector["name"]]


def v2(payload: dict[str, Any]) -> bytes:
    return json.dumps({"$type": "message", "payload": payload}).encode()


DID = "did:plc:" + "a" * 24


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"{", "not JSON"),
        (b"[]", "a JSON object"),
        (b'{"$type":"message"}', "without its `payload` object"),
        (b'{"$type":"message","payload":{"seq":1,"did":"did:plc:a"}}', "without its `$type`"),
        # no envelope $type: v1's JSON on the v2 path is refused, not skipped (a wrong
        # endpoint must not look healthy while it delivers nothing)
        (b'{"did":"did:plc:a","time_us":1,"cursor":1,"kind":"commit"}', "envelope `$type`"),
        (b'{"$type":"error","message":"?"}', "without its `error`"),
        (b'{"$type":"error","error":""}', "without its `error`"),
        (v2({"$type": V2 + "identity", "seq": -1, "did": DID, "time": "t"}), "`seq`"),
        (v2({"$type": V2 + "commit", "did": DID, "time": "t"}), "`seq`"),
        (v2({"$type": V2 + "identity", "seq": 1, "did": DID, "time": "t"}), "`identity` object"),
        (v2({"$type": V2 + "account", "seq": 1, "did": DID, "time": "t"}), "`account` object"),
        (v2({"$type": V2 + "identity", "seq": 1, "did": "did:plc:" + "b" * 24, "time": "t",
             "identity": {"did": DID}}), "not its identity"),
        (v2({"$type": V2 + "account", "seq": 1, "did": DID, "time": "t",
             "account": {"did": DID, "active": "yes"}}), "boolean `active`"),
        (v2({"$type": V2 + "info", "message": "no name"}), "`name`"),
    ],
)  # fmt: skip
def test_a_malformed_v2_frame_is_refused_with_its_reason(raw: bytes, why: str) -> None:
    with pytest.raises(MalformedFrame, match=re.escape(why)):
        decode_jetstream_v2(raw)


def test_what_an_error_or_info_frame_says_is_bounded() -> None:
    """A stranger's diagnostic strings reach logs and /_health cut to the reference client's
    own bounds (128 characters for a name, 1,024 for a message)."""
    huge = "é" * 4096
    error = decode_jetstream_v2(
        json.dumps({"$type": "error", "error": huge, "message": huge}).encode()
    )
    assert error == ErrorFrame("é" * 128, "é" * 1024)
    info = decode_jetstream_v2(v2({"$type": V2 + "info", "name": huge, "message": huge}))
    assert info == InfoEvent("é" * 128, "é" * 1024)


# --- the stand-in's encoders give the same bytes ---------------------------------------


def _encoded(vector: dict[str, Any]) -> bytes:
    encoder = getattr(jetstream_wire, vector["encoder"])
    inputs = dict(vector["inputs"])
    if vector["encoder"] == "v2_sync":
        inputs["sync"] = {**inputs["sync"], "blocks": bytes.fromhex(inputs["sync"]["blocks"])}
    result: bytes = encoder(**inputs)
    return result


@pytest.mark.parametrize(
    "vector", [v for v in FRAMES if "encoder" in v], ids=lambda vector: vector["name"]
)
def test_the_stand_ins_encoder_gives_the_references_bytes(vector: dict[str, Any]) -> None:
    """Given a vector's inputs, the stand-in's encoder for that kind of frame writes exactly
    the frame: the stand-in cannot drift from what the reference sends."""
    assert _encoded(vector) == vector["frame"].encode()


def test_the_stand_ins_v1_encoder_gives_the_golden_identity_and_account() -> None:
    """The messages captured from a v1 server, rebuilt from their own fields (no v2 seq:
    no `cursor`), byte for byte."""
    lines = GOLDEN_V1.read_bytes().splitlines()
    for line, encoder in (
        (lines[7], jetstream_wire.v1_identity),
        (lines[8], jetstream_wire.v1_account),
    ):
        message = json.loads(line)
        body = message[message["kind"]]
        assert encoder(message["did"], message["time_us"], 0, body) == line


def test_the_stand_ins_v1_encoder_gives_the_golden_commits_envelope() -> None:
    """A commit's record comes from its block; given the captured record's JSON as the
    record (its block cannot be rebuilt here), the message around it is byte for byte the
    captured one: the fields of the commit in their own order, then the record and CID."""
    for line in GOLDEN_V1.read_bytes().splitlines():
        message = json.loads(line)
        if message["kind"] != "commit":
            continue
        commit = message["commit"]
        record = re.search(rb'"record":(.*),"cid":"', line)
        fields = {key: commit[key] for key in ("rev", "operation", "collection", "rkey")}
        with_record = jetstream_wire.v1_commit(
            message["did"], message["time_us"], 0, {**fields, "record": None}
        )
        if record is None:  # a delete: no record, no CID
            assert with_record == line
            continue
        around = with_record[:-2] + b',"record":' + record.group(1) + b',"cid":'
        assert line == around + jetstream_wire.string(commit["cid"]).encode() + b"}}"


@pytest.mark.parametrize(
    ("text", "atmos", "marshal"),
    [
        ('a"b\\c', '"a\\"b\\\\c"', '"a\\"b\\\\c"'),
        ("<a&b>", '"\\u003ca\\u0026b\\u003e"', '"\\u003ca\\u0026b\\u003e"'),
        (
            "\b\f\n\r\t\x01\x1f",
            '"\\b\\f\\n\\r\\t\\u0001\\u001f"',
            '"\\b\\f\\n\\r\\t\\u0001\\u001f"',
        ),
        ("é🔞\u2028\u2029", '"é🔞\u2028\u2029"', '"é🔞\\u2028\\u2029"'),
        ("a\udc80b\ud800", '"a\\ufffd\\ufffd\\ufffdb\\ufffd\\ufffd\\ufffd"', None),
        ("\ufffd", '"\ufffd"', '"\ufffd"'),
    ],
)
def test_strings_are_escaped_as_atmos_and_go_write_them(
    text: str, atmos: str, marshal: str | None
) -> None:
    """atmos's AppendJSONString: `<>&` and control characters escaped, each byte of invalid
    UTF-8 (a lone surrogate here) as U+FFFD, the rest as it is; Go's json.Marshal also
    escapes U+2028 and U+2029."""
    assert jetstream_wire.string(text) == atmos
    assert jetstream_wire.string(text, marshal=True) == (marshal or atmos)


def test_a_record_is_written_as_go_writes_its_json() -> None:
    """The interop data-model fixtures: each record's DAG-CBOR written as JSON is the
    fixture's JSON (same value; keys sorted, links and bytes as `$link` and `$bytes`)."""
    fixtures = Path(__file__).parents[1] / "vectors" / "atproto-interop-tests" / "data-model"
    for fixture in json.loads((fixtures / "data-model-fixtures.json").read_text()):
        encoded = fixture["cbor_base64"]
        block = base64.b64decode(encoded + "=" * (-len(encoded) % 4))
        written = jetstream_wire.record_json(block)
        assert json.loads(written) == fixture["json"]
        assert list(json.loads(written)) == sorted(fixture["json"])
    with pytest.raises(ValueError, match="float"):
        jetstream_wire.record_json(bytes.fromhex("a16166fb3ff8000000000000"))
