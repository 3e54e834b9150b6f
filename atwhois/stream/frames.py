"""Frames of `com.atproto.sync.subscribeRepos`, sans I/O: bytes in, typed events out.

A frame is two DAG-CBOR objects back to back, a header (`op` 1 and the message type `t`, or
`op` -1 for an error) and a body. They are decoded with libipld (Rust) rather than the
atproto SDK's frame and model classes: `bench/stream_decode.py` measures both on the same
synthetic stream, and the model layer costs many times the decoding. Only what an identity
resolver acts on becomes an event (`#identity`, `#account`, `#info`, error frames); every
other message (`#commit`, `#sync`, types this code does not know) is a `Skipped` that keeps
only its sequence number, for the cursor.

Jetstream (`decode_jetstream`) re-encodes the same stream as JSON, one object a message:
its `identity` and `account` messages become the same events, their cursor the message's
`time_us` (Jetstream replays from a time, in microseconds), and every other kind is skipped.
The current reference server also writes its v2 `seq` in v1 messages (`cursor`); it is not
read: a v1 cursor is a time.

Jetstream v2 (`decode_jetstream_v2`, `network.bsky.jetstream.subscribeEvents` in the
`xrpc.v1.json` framing) sends one JSON object a frame, as the reference server
(bluesky-social/jetstream) writes it: a message, `{"$type": "message", "payload": {...}}`
(`"event"`, the envelope of proposal 0015's draft, is read the same way), whose payload is
the lexicon's message (`#identity` and `#account` wrap the firehose's bodies; their cursor
is the instance's own `seq`; `#info` carries no seq), or an error, `{"$type": "error",
"error": ..., "message": ...}`. As the reference's own client does, a frame of an envelope
type or a payload type not known yet is skipped (a newer revision of the protocol), never
refused, and moves no cursor; a frame without an envelope `$type` (v1's JSON, say) is not
one of these.

`com.atproto.label.subscribeLabels` frames (`decode_labels`, L-FRAME-1) are framed the same,
but read with the strict DRISL reader (`resolver.drisl`): a label's signature covers its
fields as received, so they are taken as the bytes say, a byte string kept apart from a
link. Its `#labels` message becomes a `LabelsEvent` of the labels as decoded, each still to
be read and verified by itself (`resolver.label`, `auth.labels`).

A relay is a stranger: a frame that is not what the lexicon says is a `MalformedFrame`
(invalid data), never a crash and never a half-read event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import libipld

from atwhois.resolver import drisl
from atwhois.resolver.errors import InvalidData
from atwhois.resolver.syntax import is_valid_did, is_valid_handle
from atwhois.resolver.untrusted import parse_json

MAX_FRAME_BYTES = 5 * 1024 * 1024  # the reference relay's own bound on a message


class MalformedFrame(InvalidData):
    """A frame that is not a subscribeRepos frame."""


@dataclass(frozen=True, slots=True)
class IdentityEvent:
    """The DID's document or handle may have changed: re-verify it."""

    seq: int
    did: str
    time: str
    handle: str | None  # what the PDS says, unverified: a hint, never an answer


@dataclass(frozen=True, slots=True)
class AccountEvent:
    seq: int
    did: str
    time: str
    active: bool
    status: str | None  # takendown, suspended, deleted, deactivated, ... when not active


@dataclass(frozen=True, slots=True)
class InfoEvent:
    name: str  # e.g. OutdatedCursor
    message: str | None


@dataclass(frozen=True, slots=True)
class ErrorFrame:
    error: str  # e.g. FutureCursor, ConsumerTooSlow
    message: str | None


@dataclass(frozen=True, slots=True)
class LabelsEvent:
    """subscribeLabels' `#labels`: its seq, and its labels as DRISL decodes them."""

    seq: int
    labels: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Skipped:
    kind: str  # "#commit", "#sync", or a type this code does not know
    seq: int | None


Event = IdentityEvent | AccountEvent | InfoEvent | ErrorFrame | Skipped


def decode(frame: bytes) -> Event:
    """One frame from the websocket. Raises `MalformedFrame`."""
    if len(frame) > MAX_FRAME_BYTES:
        raise MalformedFrame(f"a frame of {len(frame)} bytes (at most {MAX_FRAME_BYTES})")
    try:
        parts = libipld.decode_dag_cbor_multi(frame)
    except (ValueError, TypeError) as err:  # libipld's errors for bytes that are no DAG-CBOR
        raise MalformedFrame(f"not DAG-CBOR: {err}") from None
    if len(parts) != 2 or not isinstance(parts[0], dict) or not isinstance(parts[1], dict):
        raise MalformedFrame(f"a frame is a header map and a body map, not {len(parts)} items")
    header, body = parts
    op = header.get("op")
    if op == -1:
        return ErrorFrame(_text(body, "error"), _optional_text(body, "message"))
    if op != 1:
        raise MalformedFrame(f"header op {op!r} is neither 1 (message) nor -1 (error)")
    kind = header.get("t")
    if not isinstance(kind, str):
        raise MalformedFrame("a message header without its type `t`")
    if kind == "#identity":
        handle = _optional_text(body, "handle")
        return IdentityEvent(
            _seq(body),
            _did(body),
            _text(body, "time"),
            handle if handle is not None and is_valid_handle(handle) else None,
        )
    if kind == "#account":
        active = body.get("active")
        if not isinstance(active, bool):
            raise MalformedFrame("#account without a boolean `active`")
        return AccountEvent(
            _seq(body), _did(body), _text(body, "time"), active, _optional_text(body, "status")
        )
    if kind == "#info":
        return InfoEvent(_text(body, "name"), _optional_text(body, "message"))
    seq = body.get("seq")
    return Skipped(kind, seq if _is_seq(seq) else None)


def decode_labels(frame: bytes) -> LabelsEvent | InfoEvent | ErrorFrame | Skipped:
    """One frame of a labeler's `subscribeLabels` (L-FRAME-1). Raises `MalformedFrame`."""
    if len(frame) > MAX_FRAME_BYTES:
        raise MalformedFrame(f"a frame of {len(frame)} bytes (at most {MAX_FRAME_BYTES})")
    try:
        header, end = drisl.decode_prefix(frame)
        body = drisl.decode(frame[end:])
    except drisl.NotDrisl as err:
        raise MalformedFrame(f"not two DRISL values: {err} [L-FRAME-1]") from None
    if not isinstance(header, dict) or not isinstance(body, dict):
        raise MalformedFrame("a frame is a header map and a body map [L-FRAME-1]")
    op, kind = header.get("op"), header.get("t")
    if op == -1:
        return ErrorFrame(_text(body, "error"), _optional_text(body, "message"))
    if op != 1 or not isinstance(kind, str):
        raise MalformedFrame(f"a header of op {op!r:.20}, t {kind!r:.40} [L-FRAME-1]")
    if kind == "#labels":
        labels = body.get("labels")
        if not isinstance(labels, list):
            raise MalformedFrame("#labels without its list of labels [L-FRAME-1]")
        return LabelsEvent(_seq(body), tuple(labels))
    if kind == "#info":
        return InfoEvent(_text(body, "name"), _optional_text(body, "message"))
    seq = body.get("seq")
    return Skipped(kind, seq if _is_seq(seq) else None)


def _json_object(message: bytes, what: str) -> dict[str, Any]:
    """A JSON message of a stream, within the frame bound (`what` names it in the error)."""
    if len(message) > MAX_FRAME_BYTES:
        raise MalformedFrame(f"a message of {len(message)} bytes (at most {MAX_FRAME_BYTES})")
    try:
        data = parse_json(message)
    except ValueError as err:
        raise MalformedFrame(f"not JSON: {err}") from None
    if not isinstance(data, dict):
        raise MalformedFrame(f"{what} is a JSON object")
    return data


def decode_jetstream(message: bytes) -> Event:
    """One Jetstream message. Raises `MalformedFrame`."""
    data = _json_object(message, "a Jetstream message")
    cursor = data.get("time_us")
    if not isinstance(cursor, int) or not _is_seq(cursor):
        raise MalformedFrame(f"`time_us` is not a time in microseconds: {cursor!r:.40}")
    kind = data.get("kind")
    if not isinstance(kind, str):
        raise MalformedFrame("a Jetstream message without its `kind`")
    if kind not in ("identity", "account"):
        return Skipped(kind, cursor)
    return _carried(kind, cursor, data, timed=False)


def _carried(kind: str, cursor: int, message: dict[str, Any], *, timed: bool) -> Event:
    """The firehose's `#identity` or `#account` body a Jetstream message carries under
    `kind`, the message's `did` its own; its time is the body's (v1), or the message's
    (v2: `timed`, when the instance witnessed it)."""
    body = message.get(kind)
    if not isinstance(body, dict):
        raise MalformedFrame(f"a Jetstream {kind} message without its `{kind}` object")
    did = _did(body)
    if message.get("did") != did:
        raise MalformedFrame(f"the message's `did` is not its {kind}'s")
    when = _text(message if timed else body, "time")
    if kind == "identity":
        handle = _optional_text(body, "handle")
        valid = handle if handle is not None and is_valid_handle(handle) else None
        return IdentityEvent(cursor, did, when, valid)
    active = body.get("active")
    if not isinstance(active, bool):
        raise MalformedFrame("account without a boolean `active`")
    return AccountEvent(cursor, did, when, active, _optional_text(body, "status"))


V2 = "network.bsky.jetstream.subscribeEvents#"
ENVELOPES = ("message", "event")  # the reference server's; the draft's
# Bounds on what an error or #info frame says, before it reaches logs and /_health (the
# reference client's own bounds on these strings)
NAME_CHARS, MESSAGE_CHARS = 128, 1024


def decode_jetstream_v2(message: bytes) -> Event:
    """One Jetstream v2 frame (`xrpc.v1.json`). Raises `MalformedFrame`."""
    frame = _json_object(message, "an xrpc.v1.json frame")
    kind = frame.get("$type")
    if kind == "error":
        error = frame.get("error")
        if not isinstance(error, str) or not error:
            raise MalformedFrame("an error frame without its `error`")
        said = _optional_text(frame, "message")
        return ErrorFrame(error[:NAME_CHARS], None if said is None else said[:MESSAGE_CHARS])
    if not isinstance(kind, str) or not kind:
        raise MalformedFrame("a frame without its envelope `$type`: not xrpc.v1.json")
    if kind not in ENVELOPES:
        return Skipped("unknown envelope", None)
    payload = frame.get("payload")
    if not isinstance(payload, dict):
        raise MalformedFrame("a message frame without its `payload` object")
    name = payload.get("$type")
    if not isinstance(name, str) or not name:
        raise MalformedFrame("a payload without its `$type`")
    name = name.removeprefix(V2) if name.startswith(V2) else ""
    if name == "info":
        said = _optional_text(payload, "message")
        text = None if said is None else said[:MESSAGE_CHARS]
        return InfoEvent(_text(payload, "name")[:NAME_CHARS], text)
    if name in ("identity", "account"):
        return _carried(name, _seq(payload), payload, timed=True)
    if name in ("commit", "sync"):
        return Skipped(f"#{name}", _seq(payload))
    return Skipped("unknown payload", None)  # its seq, if any, is no cursor we know


def _is_seq(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _seq(body: dict[str, Any]) -> int:
    seq = body.get("seq")
    if not isinstance(seq, int) or not _is_seq(seq):
        raise MalformedFrame(f"`seq` is not a sequence number: {seq!r:.40}")
    return seq


def _did(body: dict[str, Any]) -> str:
    did = body.get("did")
    if not isinstance(did, str) or not is_valid_did(did):
        raise MalformedFrame(f"`did` is not a DID: {did!r:.80}")
    return did


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str):
        raise MalformedFrame(f"`{key}` is not a string: {value!r:.40}")
    return value


def _optional_text(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise MalformedFrame(f"`{key}` is not a string: {value!r:.40}")
    return value
