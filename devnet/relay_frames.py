"""subscribeRepos frames as a relay (indigo) and a PDS send them, made with libipld's
DAG-CBOR encoder, whose canonical key order is cbor-gen's (a commit's blocks a CAR file
holding its record, written by `atwhois.testing.mst`): for the decoder's tests, its fuzz
target, `bench/stream_decode.py`. What they make is held to the reference's own frames,
rebuilt in `tests/vectors/firehose/frames.json` (`tests/stream/test_stream_frames.py`)."""

from __future__ import annotations

import base64
import random
from typing import Any

import libipld

from atwhois.testing.mst import car, cid  # the one writer of CIDs and CAR files

DID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
TIME = "2026-12-01T02:00:00.000Z"
# A CID link: libipld encodes a CID given as its binary form as a DAG-CBOR link (tag 42).
CID = base64.b32decode("AFYREICLP443LAVOGVHJ3D2OB2CXBFUSCNI2K5JK7BEBJZG7KHL3ESABWQ======")


def frame(header: dict[str, Any], body: dict[str, Any]) -> bytes:
    return bytes(libipld.encode_dag_cbor(header)) + bytes(libipld.encode_dag_cbor(body))


def identity(
    seq: int, did: str = DID, handle: str | None = "alice.example.com", time: str = TIME
) -> bytes:
    """The relay's #identity: `handle` only when it verified it."""
    body: dict[str, Any] = {"seq": seq, "did": did, "time": time}
    if handle is not None:
        body["handle"] = handle
    return frame({"op": 1, "t": "#identity"}, body)


def account(
    seq: int, active: bool, status: str | None = None, did: str = DID, time: str = TIME
) -> bytes:
    body: dict[str, Any] = {"seq": seq, "did": did, "time": time, "active": active}
    if status is not None:
        body["status"] = status
    return frame({"op": 1, "t": "#account"}, body)


def commit(seq: int, blocks: int = 3000, rng: random.Random | None = None) -> bytes:
    """A #commit as a relay sends it: one op or a few, creating a post whose record is in
    the commit's CAR slice of about `blocks` bytes (the rest a block of tree-like bytes)."""
    rng = rng or random.Random(seq)
    record = libipld.encode_dag_cbor(
        {"$type": "app.bsky.feed.post", "createdAt": TIME, "text": f"post {seq}"}
    )
    filler = libipld.encode_dag_cbor({"e": rng.randbytes(max(0, blocks - len(record) - 90))})
    ops = [
        {"action": "create", "path": f"app.bsky.feed.post/3k{seq:010d}{i}", "cid": cid(record)}
        for i in range(rng.randint(1, 3))
    ]
    body = {
        "seq": seq,
        "rebase": False,
        "tooBig": False,
        "repo": DID,
        "commit": CID,
        "rev": f"3k{seq:011d}",
        "since": None,
        "blocks": car((cid(record), record), (cid(filler), filler)),
        "ops": ops,
        "blobs": [],
        "time": TIME,
    }
    return frame({"op": 1, "t": "#commit"}, body)


def sync(seq: int, rng: random.Random) -> bytes:
    body = {
        "seq": seq,
        "did": DID,
        "rev": f"3k{seq:011d}",
        "blocks": rng.randbytes(400),
        "time": TIME,
    }
    return frame({"op": 1, "t": "#sync"}, body)


# what the reference PDS says with each (packages/pds subscribeRepos.ts)
OUTDATED_MESSAGE = "Requested cursor exceeded limit. Possibly missing events"
FUTURE_MESSAGE = "Cursor in the future."


def info(name: str = "OutdatedCursor", message: str = OUTDATED_MESSAGE) -> bytes:
    return frame({"op": 1, "t": "#info"}, {"name": name, "message": message})


def error(name: str = "FutureCursor", message: str = FUTURE_MESSAGE) -> bytes:
    """An error frame: its header has no `t`; its `message` is always there, "" when the
    sender says nothing (the relay's ConsumerTooSlow)."""
    return frame({"op": -1}, {"error": name, "message": message})


def stream(count: int, seed: int = 7) -> list[bytes]:
    """A relay's mix: almost all commits, some identity and account events, a few syncs."""
    rng = random.Random(seed)
    frames = []
    for seq in range(1, count + 1):
        roll = rng.random()
        if roll < 0.02:
            frames.append(identity(seq))
        elif roll < 0.03:
            frames.append(account(seq, rng.random() < 0.5, "deactivated"))
        elif roll < 0.04:
            frames.append(sync(seq, rng))
        else:
            frames.append(commit(seq, blocks=rng.randint(500, 6000), rng=rng))
    return frames
