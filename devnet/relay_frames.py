"""subscribeRepos frames as a relay sends them, made with libipld's DAG-CBOR encoder: for
the decoder's tests, its fuzz target and `bench/stream_decode.py`."""

from __future__ import annotations

import base64
import random
from typing import Any

import libipld

DID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
TIME = "2026-12-01T02:00:00.000Z"
# A CID link: libipld encodes a CID given as its binary form as a DAG-CBOR link (tag 42).
CID = base64.b32decode("AFYREICLP443LAVOGVHJ3D2OB2CXBFUSCNI2K5JK7BEBJZG7KHL3ESABWQ======")


def frame(header: dict[str, Any], body: dict[str, Any]) -> bytes:
    return bytes(libipld.encode_dag_cbor(header)) + bytes(libipld.encode_dag_cbor(body))


def identity(seq: int, did: str = DID, handle: str | None = "alice.example.com") -> bytes:
    body: dict[str, Any] = {"seq": seq, "did": did, "time": TIME}
    if handle is not None:
        body["handle"] = handle
    return frame({"op": 1, "t": "#identity"}, body)


def account(seq: int, active: bool, status: str | None = None, did: str = DID) -> bytes:
    body: dict[str, Any] = {"seq": seq, "did": did, "time": TIME, "active": active}
    if status is not None:
        body["status"] = status
    return frame({"op": 1, "t": "#account"}, body)


def commit(seq: int, blocks: int = 3000, rng: random.Random | None = None) -> bytes:
    """A #commit as a relay sends it: a CAR slice of `blocks` bytes, one op or a few."""
    rng = rng or random.Random(seq)
    ops = [
        {"action": "create", "path": f"app.bsky.feed.post/3k{seq:010d}{i}", "cid": CID}
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
        "blocks": rng.randbytes(blocks),
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


def info(name: str = "OutdatedCursor") -> bytes:
    return frame({"op": 1, "t": "#info"}, {"name": name, "message": "cursor too old"})


def error(name: str = "FutureCursor") -> bytes:
    return frame({"op": -1}, {"error": name, "message": "cursor in the future"})


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
