"""The subscribeRepos frame decoder: what each frame becomes, and every way a stranger's
frame can be wrong, refused as invalid data."""

from __future__ import annotations

from typing import Any

import pytest

from atwhois.stream import (
    AccountEvent,
    ErrorFrame,
    IdentityEvent,
    InfoEvent,
    MalformedFrame,
    Skipped,
    decode,
)
from atwhois.stream.frames import MAX_FRAME_BYTES
from devnet import relay_frames as f
from tests.vectors import VECTORS, load_json


def test_what_each_frame_becomes() -> None:
    assert decode(f.identity(7)) == IdentityEvent(7, f.DID, f.TIME, "alice.example.com")
    assert decode(f.identity(8, handle=None)).handle is None
    assert decode(f.identity(9, handle="not a handle!")).handle is None  # a hint, checked
    assert decode(f.account(10, False, "takendown")) == AccountEvent(
        10, f.DID, f.TIME, False, "takendown"
    )
    assert decode(f.account(11, True)) == AccountEvent(11, f.DID, f.TIME, True, None)
    assert decode(f.info()) == InfoEvent("OutdatedCursor", f.OUTDATED_MESSAGE)
    assert decode(f.error()) == ErrorFrame("FutureCursor", f.FUTURE_MESSAGE)
    assert decode(f.commit(12)) == Skipped("#commit", 12)  # only its seq, for the cursor
    sync = f.frame({"op": 1, "t": "#sync"}, {"seq": 13, "did": f.DID})
    assert decode(sync) == Skipped("#sync", 13)
    future = f.frame({"op": 1, "t": "#somethingNew"}, {"whatever": [1, 2]})
    assert decode(future) == Skipped("#somethingNew", None)


def test_a_synthetic_relay_stream_decodes_in_order() -> None:
    events = [decode(frame) for frame in f.stream(500)]
    seqs = [e.seq for e in events if isinstance(e, IdentityEvent | AccountEvent | Skipped)]
    assert seqs == list(range(1, 501))
    assert {type(e) for e in events} == {IdentityEvent, AccountEvent, Skipped}


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", "a header map and a body map"),
        (b"\xff\x00", "not DAG-CBOR"),
        (f.frame({"op": 1, "t": "#identity"}, {"seq": 1})[:20], "not DAG-CBOR"),  # cut short
        (f.identity(1) + f.identity(2), "not 4 items"),
        (f.frame({"op": 2, "t": "#identity"}, {}), "neither 1"),
        (f.frame({"op": 1}, {"seq": 1}), "without its type"),
        (f.frame({"op": 1, "t": 5}, {"seq": 1}), "without its type"),
        (f.frame({"op": 1, "t": "#identity"}, {"seq": -1, "did": f.DID, "time": f.TIME}), "seq"),
        (f.frame({"op": 1, "t": "#identity"}, {"seq": True, "did": f.DID, "time": f.TIME}), "seq"),
        (f.identity(1, did="did:plc:<script>"), "not a DID"),
        (f.frame({"op": 1, "t": "#identity"}, {"seq": 1, "did": f.DID}), "`time`"),
        (f.frame({"op": 1, "t": "#account"}, {"seq": 1, "did": f.DID, "time": f.TIME}), "active"),
        (
            f.frame(
                {"op": 1, "t": "#account"}, {"seq": 1, "did": f.DID, "time": f.TIME, "active": 1}
            ),
            "active",
        ),
        (
            f.frame(
                {"op": 1, "t": "#identity"}, {"seq": 1, "did": f.DID, "time": f.TIME, "handle": 5}
            ),
            "handle",
        ),
        (f.frame({"op": -1}, {"message": "no error name"}), "`error`"),
        (f.frame([1, 2], {"seq": 1}), "a header map"),  # type: ignore[arg-type]
        (b"\x00" * (MAX_FRAME_BYTES + 1), "at most"),
    ],
)
def test_a_malformed_frame_is_invalid_data(raw: bytes, says: str) -> None:
    with pytest.raises(MalformedFrame, match=says):
        decode(raw)


def test_malformed_frames_are_classified_as_invalid_data() -> None:
    from atwhois.resolver.errors import InvalidData
    from atwhois.resolver.outcome import Outcome

    with pytest.raises(InvalidData) as info:
        decode(b"\xff")
    assert info.value.outcome is Outcome.INVALID


# --- the reference relay's and PDS's own frames (tests/vectors/firehose) -----------------

FIREHOSE = load_json(VECTORS / "firehose" / "frames.json")["frames"]


def _vector(name: str) -> dict[str, Any]:
    return next(v for v in FIREHOSE if v["name"] == name)


@pytest.mark.parametrize("vector", FIREHOSE, ids=lambda v: v["name"])
def test_each_frame_of_the_references_decodes_as_what_it_says(vector: dict[str, Any]) -> None:
    event = decode(bytes.fromhex(vector["frame"]))
    header, body = vector["header"], vector["body"]
    if header["op"] == -1:
        assert event == ErrorFrame(body["error"], body["message"])
    elif header["t"] == "#identity":
        assert event == IdentityEvent(body["seq"], body["did"], body["time"], body.get("handle"))
    elif header["t"] == "#account":
        expected = AccountEvent(
            body["seq"], body["did"], body["time"], body["active"], body.get("status")
        )
        assert event == expected
    elif header["t"] == "#info":
        assert event == InfoEvent(body["name"], body.get("message"))
    else:
        assert event == Skipped(header["t"], body["seq"])


def test_the_stand_in_makes_the_references_bytes() -> None:
    """devnet.relay_frames, the relay of the decoder's tests, the fuzz targets and the
    benchmarks, sends byte for byte what the reference sends for the same values."""

    def same(name: str, made: bytes) -> None:
        assert made.hex() == _vector(name)["frame"], name

    def body(name: str) -> dict[str, Any]:
        return dict(_vector(name)["body"])

    verified = body("relay #identity with a handle it verified")
    same(
        "relay #identity with a handle it verified",
        f.identity(verified["seq"], verified["did"], verified["handle"], verified["time"]),
    )
    dropped = body("relay #identity whose handle it did not verify (dropped)")
    same(
        "relay #identity whose handle it did not verify (dropped)",
        f.identity(dropped["seq"], dropped["did"], None, dropped["time"]),
    )
    for name in ("relay #account active", "relay #account taken down"):
        account = body(name)
        made = f.account(
            account["seq"],
            account["active"],
            account.get("status"),
            account["did"],
            account["time"],
        )
        same(name, made)
    same("PDS #info OutdatedCursor", f.info())
    same("PDS error FutureCursor", f.error())
    same("relay error ConsumerTooSlow", f.error("ConsumerTooSlow", ""))
