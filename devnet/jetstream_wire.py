"""The reference Jetstream's wire, as its encoders write it, byte for byte, for the stand-in
(`devnet/jetstream.py`): one function a kind of frame, from the same inputs as the
reference's (the event's seq and witnessed time, its DID, the firehose body it carries).

The reference is github.com/bluesky-social/jetstream at
9a30defd224e9058814a7d6ce8d9e4fc48d5493c: `internal/subscribe/encoder.go` (`Encode`, v1;
`EncodeV2`, `EncodeV2Info`, `EncodeV2Error`, `wireTime`), `handler.go` (`httpError`), and
the generated `api/jetstream/jetstreamsubscribeevents.go`. Its JSON writer is atmos's,
read here at v0.2.14 (the reference's go.mod pins v0.3.6, not available to read):
`cbor.AppendJSONString` and the generated `AppendJSON` of `com.atproto.sync.subscribeRepos`'s
bodies (keys in sorted order, optional ones left out), and Go's `encoding/json` where the
reference calls `json.Marshal` (v1 messages, the 400 body, records), which also escapes
U+2028 and U+2029. `tests/vectors/jetstream/frames.json` holds frames spelled out from that
code, and `tests/stream/test_jetstream_wire.py` checks these functions give the same bytes.

A firehose frame becomes the reference's events (`events`): `#identity`, `#account` and
`#sync` one each, carrying the body; `#commit` one per operation, its record read from the
commit's blocks (an operation whose record is not among them is left out, as the reference,
which verifies commits, would not take it).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import libipld

from atwhois.resolver.commit import InvalidCommit, car_blocks

V2_TYPE = "network.bsky.jetstream.subscribeEvents#"
SUBPROTOCOL = "xrpc.v1.json"
_SHORT = {
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x22: '\\"',
    0x5C: "\\\\",
}


def string(value: str, *, marshal: bool = False) -> str:
    """A JSON string as atmos's `AppendJSONString` writes it: `"`, `\\` and control characters
    escaped (short forms where JSON has them), `<`, `>`, `&` as `\\u00XX`, each byte of invalid
    UTF-8 as `\\ufffd`, any other character as it is. `marshal`: as Go's `json.Marshal`,
    which also escapes U+2028 and U+2029."""
    raw = value.encode("utf-8", "surrogatepass")
    out = ['"']
    at = 0
    while at < len(raw):
        byte = raw[at]
        if byte < 0x80:
            short = _SHORT.get(byte)
            plain = byte >= 0x20 and byte not in b"<>&"
            out.append(short or (chr(byte) if plain else f"\\u{byte:04x}"))
            at += 1
            continue
        size = 2 if 0xC2 <= byte <= 0xDF else 3 if 0xE0 <= byte <= 0xEF else 4
        try:
            char = raw[at : at + size].decode("utf-8") if byte <= 0xF4 else ""
        except UnicodeDecodeError:
            char = ""
        if len(char) != 1:
            out.append("\\ufffd")
            at += 1
            continue
        out.append(f"\\u{ord(char):04x}" if marshal and char in "\u2028\u2029" else char)
        at += size
    out.append('"')
    return "".join(out)


def wire_time(time_us: int) -> str:
    """RFC 3339 in UTC with exactly six fractional digits (`wireTime`)."""
    moment = datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=time_us)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond:06d}Z"


def _object(fields: list[tuple[str, str | None]], marshal: bool) -> str:
    """`{"key":value,...}` of the fields whose value is not None, in the order given."""
    kept = [f"{string(key, marshal=marshal)}:{value}" for key, value in fields if value is not None]
    return "{" + ",".join(kept) + "}"


def _optional(body: dict[str, Any], key: str, marshal: bool) -> str | None:
    value = body.get(key)
    return string(value, marshal=marshal) if isinstance(value, str) else None


def _upstream(body: dict[str, Any], keys: list[tuple[str, str]], marshal: bool) -> str:
    """A `com.atproto.sync.subscribeRepos` body as atmos's generated `AppendJSON` writes it:
    its known keys sorted (`$type` only when the body had one), each by its kind."""
    kind_of = body.get("$type")  # written only when the body had one, and not empty
    typed = string(kind_of, marshal=marshal) if isinstance(kind_of, str) and kind_of else None
    written: list[tuple[str, str | None]] = [("$type", typed)]
    for key, kind in keys:
        value = body.get(key)
        if kind == "string?":
            written.append((key, _optional(body, key, marshal)))
        elif kind == "string":
            written.append((key, string(value if isinstance(value, str) else "", marshal=marshal)))
        elif kind == "bool":
            written.append((key, "true" if value is True else "false"))
        elif kind == "int":
            written.append((key, str(value if isinstance(value, int) else 0)))
        else:  # bytes
            data = value if isinstance(value, bytes) else b""
            written.append((key, '{"$bytes":"' + _base64(data) + '"}'))
    return _object(written, marshal)


IDENTITY = [("did", "string"), ("handle", "string?"), ("seq", "int"), ("time", "string")]
ACCOUNT = [
    ("active", "bool"),
    ("did", "string"),
    ("seq", "int"),
    ("status", "string?"),
    ("time", "string"),
]
SYNC = [
    ("blocks", "bytes"),
    ("did", "string"),
    ("rev", "string"),
    ("seq", "int"),
    ("time", "string"),
]


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


# --- v1: /subscribe, `Encode` (atmos `streaming.JetstreamEvent` through `json.Marshal`) ---


def _v1(did: str, time_us: int, cursor: int, kind: str, body: str) -> bytes:
    """did, time_us, cursor (the v2 seq; left out when 0), kind, then the kind's object."""
    fields = [
        ("did", string(did, marshal=True)),
        ("time_us", str(time_us)),
        ("cursor", str(cursor) if cursor else None),
        ("kind", string(kind, marshal=True)),
        (kind, body),
    ]
    return _object(fields, True).encode()


def v1_identity(did: str, time_us: int, cursor: int, identity: dict[str, Any]) -> bytes:
    return _v1(did, time_us, cursor, "identity", _upstream(identity, IDENTITY, True))


def v1_account(did: str, time_us: int, cursor: int, account: dict[str, Any]) -> bytes:
    return _v1(did, time_us, cursor, "account", _upstream(account, ACCOUNT, True))


def v1_commit(did: str, time_us: int, cursor: int, commit: dict[str, Any]) -> bytes:
    """`streaming.JetstreamCommit` (its fields in its own order, not sorted): rev, operation,
    collection, rkey, then the record and its CID unless it is a delete."""
    record = _record(commit)
    fields = [(key, string(commit[key], marshal=True)) for key in _COMMIT_KEYS]
    fields += [("record", record and record[0]), ("cid", record and string(record[1]))]
    return _v1(did, time_us, cursor, "commit", _object(fields, True))


_COMMIT_KEYS = ("rev", "operation", "collection", "rkey")


# --- v2: subscribeEvents, xrpc.v1.json (`EncodeV2`, `EncodeV2Info`, `EncodeV2Error`) ---


def _message(kind: str, fields: list[tuple[str, str | None]]) -> bytes:
    """`{"$type":"message","payload":...}`, the payload's keys sorted as its lexicon's
    generated `AppendJSON` writes them, `$type` first."""
    payload = _object([("$type", string(V2_TYPE + kind)), *sorted(fields)], False)
    return ('{"$type":"message","payload":' + payload + "}").encode()


def _carried(kind: str, keys: list[tuple[str, str]]) -> Callable[..., bytes]:
    def frame(seq: int, did: str, time_us: int, **carried: dict[str, Any]) -> bytes:
        body = _upstream(carried[kind], keys, False)
        stamp = [("did", string(did)), ("seq", str(seq)), ("time", string(wire_time(time_us)))]
        return _message(kind, [*stamp, (kind, body)])

    frame.__name__ = f"v2_{kind}"
    return frame


v2_identity = _carried("identity", IDENTITY)
v2_account = _carried("account", ACCOUNT)
v2_sync = _carried("sync", SYNC)


def v2_commit(seq: int, did: str, time_us: int, commit: dict[str, Any]) -> bytes:
    record = _record(commit)
    fields = [(key, string(commit[key])) for key in _COMMIT_KEYS]
    fields += [("did", string(did)), ("seq", str(seq)), ("time", string(wire_time(time_us)))]
    fields += [("record", record and record[0]), ("cid", record and string(record[1]))]
    return _message("commit", fields)


def v2_info(name: str, message: str) -> bytes:
    """An advisory: no seq, it moves no cursor. An empty message is left out."""
    fields = [("name", string(name)), ("message", string(message) if message else None)]
    return _message("info", fields)


def v2_error(code: str, message: str) -> bytes:
    """The last frame of a connection. An empty message is left out."""
    fields = [("$type", '"error"'), ("error", string(code))]
    fields.append(("message", string(message) if message else None))
    return _object(fields, False).encode()


def http_error(name: str, message: str) -> bytes:
    """The body of a refusal before the upgrade (`application/json`)."""
    fields = [("error", string(name, marshal=True))]
    fields.append(("message", string(message, marshal=True) if message else None))
    return _object(fields, True).encode()


# --- records: `cbor.ToJSON` (a DAG-CBOR value to JSON, through `json.Marshal`) ------------


def _record(commit: dict[str, Any]) -> tuple[str, str] | None:
    """The record of a create or update as JSON, and its CID; None for a delete. `record`:
    the record's block (bytes, or hex in the test vectors)."""
    block = commit.get("record")
    if block is None:
        return None
    raw = bytes.fromhex(block) if isinstance(block, str) else block
    name = b"\x01\x71\x12\x20" + hashlib.sha256(raw).digest()  # CIDv1, DAG-CBOR, SHA-256
    return record_json(raw), libipld.encode_cid(name)


class _Link(str):
    """A CID link (tag 42), as its text."""


def record_json(block: bytes) -> str:
    """A DAG-CBOR block as JSON: maps' keys sorted, bytes as `{"$bytes"}`, links as
    `{"$link"}`. Raises ValueError for what is not DAG-CBOR a record can hold."""
    value, end = _item(block, 0)
    if end != len(block):
        raise ValueError("bytes after the record")
    return _json(value)


def _item(data: bytes, at: int) -> tuple[Any, int]:
    if at >= len(data):
        raise ValueError("a record cut short")
    major, info = data[at] >> 5, data[at] & 0x1F
    at += 1
    if info < 24:
        argument = info
    elif info <= 27:
        size = 1 << (info - 24)
        if major == 7 and info > 24:
            raise ValueError("a float: the data model has none")
        if at + size > len(data):
            raise ValueError("a record cut short")
        argument, at = int.from_bytes(data[at : at + size], "big"), at + size
    else:
        raise ValueError("an indefinite length")
    if major == 0:
        return argument, at
    if major == 1:
        return -1 - argument, at
    if major in (2, 3):
        chunk, at = data[at : at + argument], at + argument
        if len(chunk) != argument:
            raise ValueError("a record cut short")
        return (bytes(chunk) if major == 2 else chunk.decode("utf-8")), at
    if major in (4, 5):
        items = []
        for _ in range(argument * (major - 3)):
            item, at = _item(data, at)
            items.append(item)
        if major == 4:
            return items, at
        if not all(isinstance(key, str) for key in items[::2]):
            raise ValueError("a map key that is not text")
        return dict(zip(items[::2], items[1::2], strict=True)), at
    if major == 6 and argument == 42:
        link, at = _item(data, at)
        if not isinstance(link, bytes) or link[:1] != b"\x00":
            raise ValueError("a link that is not a CID")
        return _Link(libipld.encode_cid(link[1:])), at
    if major == 7 and argument in (20, 21, 22):
        return {20: False, 21: True, 22: None}[argument], at
    raise ValueError(f"CBOR major type {major} ({argument}) in a record")


def _json(value: Any) -> str:
    if isinstance(value, _Link):
        return '{"$link":' + string(value, marshal=True) + "}"
    if isinstance(value, str):
        return string(value, marshal=True)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, bytes):
        return '{"$bytes":"' + _base64(value) + '"}'
    if isinstance(value, list):
        return "[" + ",".join(_json(item) for item in value) + "]"
    keys = sorted(value, key=lambda key: key.encode("utf-8", "surrogatepass"))
    return "{" + ",".join(f"{string(key, marshal=True)}:{_json(value[key])}" for key in keys) + "}"


# --- a firehose frame as the reference's events ------------------------------------------


@dataclass(frozen=True, slots=True)
class Upstream:
    """One event of the reference's archive: its kind (identity, account, commit, sync), its
    DID, and what it carries (the firehose body; for a commit, the operation)."""

    kind: str
    did: str
    carried: dict[str, Any]

    def v1(self, time_us: int, cursor: int) -> bytes | None:
        """The v1 message (None: v1 does not send #sync)."""
        encode = {"identity": v1_identity, "account": v1_account, "commit": v1_commit}
        if self.kind not in encode:
            return None
        return encode[self.kind](self.did, time_us, cursor, self.carried)

    def v2(self, seq: int, time_us: int) -> bytes:
        encode = {
            "identity": v2_identity,
            "account": v2_account,
            "sync": v2_sync,
            "commit": v2_commit,
        }
        return encode[self.kind](seq, self.did, time_us, **{self.kind: self.carried})


_TYPES = {"#identity": "identity", "#account": "account", "#sync": "sync", "#commit": "commit"}
_BODIES = {"identity": IDENTITY, "account": ACCOUNT, "sync": SYNC}


def events(frame: bytes) -> list[Upstream]:
    """The events the reference makes of one subscribeRepos frame."""
    header, body = libipld.decode_dag_cbor_multi(frame)
    kind = _TYPES.get(header.get("t", "")) if header.get("op") == 1 else None
    did = body.get("repo") if kind == "commit" else body.get("did")
    if kind is None or not isinstance(did, str):
        return []
    if kind != "commit":
        return [Upstream(kind, did, body)] if _typed(body, _BODIES[kind]) else []
    return [Upstream("commit", did, op) for op in _operations(body)]


def _typed(body: dict[str, Any], keys: list[tuple[str, str]]) -> bool:
    """Whether the body decodes as the lexicon's object (the reference drops one that not)."""
    types = {"string": str, "string?": (str, type(None)), "bool": bool, "int": int, "bytes": bytes}
    return all(isinstance(body.get(key), types[kind]) for key, kind in keys)


def _operations(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A commit's operations as the reference's commit events: rev, operation, collection,
    rkey and the record's block (None for a delete)."""
    try:
        blocks = dict(car_blocks(body.get("blocks") or b""))
    except InvalidCommit:
        return []
    made = []
    for op in body.get("ops") or []:
        path, action = str(op.get("path", "")), op.get("action")
        collection, _, rkey = path.partition("/")
        block = None if action == "delete" else blocks.get(op.get("cid") or b"")
        if action not in ("create", "update", "delete") or (action != "delete" and block is None):
            continue
        fields = {"rev": str(body.get("rev", "")), "operation": action}
        made.append({**fields, "collection": collection, "rkey": rkey, "record": block})
    return made
