"""DRISL, atproto's strict DAG-CBOR, read and written exactly (R-DATA-*): a CID link (tag 42)
comes back as a `Link`, never as the bytes libipld hands back for both, so a node's `v` link
and its `k` bytes are told apart, a record's blob links are written as `$link` and its byte
strings as `$bytes`, and the JSON form of a record encodes back to its own bytes. libipld
cannot do this: it decodes links and byte strings alike, and encodes any byte string that
starts like a CID as a link.

Decoding refuses every way the bytes could have another encoding of the same value (a
longer head than needed, map keys out of order or repeated, indefinite lengths), what the
data model does not hold (floats, tags other than 42, integers beyond 64 bits signed,
undefined), and nesting past a depth, so that a value decoded here has one encoding and
its CID says which value it is.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import libipld

from atwhois.resolver.errors import AtwhoisError

MAX_DEPTH = 128  # R-DATA-3: nesting of maps and arrays (a post's facets nest 5 deep)
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1  # R-DATA-2: the data model's integers
_SIMPLE = {20: False, 21: True, 22: None}


class NotDrisl(AtwhoisError, ValueError):
    """Bytes that are not one DRISL value, or a value that has no DRISL form."""


class Link:
    """A CID link: the binary CID (without the 0x00 DAG-CBOR puts before it)."""

    __slots__ = ("cid",)

    def __init__(self, cid: bytes) -> None:
        self.cid = cid

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Link) and other.cid == self.cid

    def __hash__(self) -> int:
        return hash(self.cid)

    def __repr__(self) -> str:
        return f"Link({self.text})"

    @property
    def text(self) -> str:
        """The CID as text: base32 `b…` for a CIDv1, base58 `Qm…` for a CIDv0. Written
        from the bytes, as libipld's `encode_cid` writes them, without its parse: that
        refuses a multihash it does not know, which a stranger's link may name."""
        if self.cid.startswith(b"\x12\x20"):
            return str(libipld.encode_multibase("z", self.cid))[1:]
        return str(libipld.encode_multibase("b", self.cid))

    @property
    def blessed(self) -> bool:
        """CIDv1, DAG-CBOR, SHA-256: what commits and MST nodes link with (R-CAR-2)."""
        return len(self.cid) == 36 and self.cid[:4] == b"\x01\x71\x12\x20"


def cid_end(data: bytes, at: int = 0) -> int:
    """Where the binary CID at `at` ends: a CIDv0 (a SHA-256 multihash) or a CIDv1 (version,
    codec, multihash code and length, digest). Raises `NotDrisl`."""
    if data[at : at + 2] == b"\x12\x20":
        end = at + 34
    else:
        version, at = _varint(data, at)
        if version != 1:
            raise NotDrisl(f"a CID of version {version}")
        _, at = _varint(data, at)  # the codec
        _, at = _varint(data, at)  # the multihash's code
        size, at = _varint(data, at)
        end = at + size
    if end > len(data):
        raise NotDrisl("a CID cut short")
    return end


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    for index in range(at, min(at + 9, len(data))):
        value |= (data[index] & 0x7F) << shift
        if data[index] < 0x80:
            return value, index + 1
        shift += 7
    raise NotDrisl("a varint that does not end")


def decode(data: bytes) -> Any:
    """The one value `data` encodes: None, bool, int, bytes, str, list, dict with str keys,
    `Link`. Raises `NotDrisl` (R-DATA-1..3)."""
    value, end = _item(data, 0, 0)
    if end != len(data):
        raise NotDrisl(f"{len(data) - end} bytes after the value")
    return value


def decode_prefix(data: bytes, at: int = 0) -> tuple[Any, int]:
    """The one value that starts at `at`, and where it ends: an event stream's frame holds
    two back to back, a header and a body. Raises `NotDrisl`."""
    return _item(data, at, 0)


def _head(data: bytes, at: int) -> tuple[int, int, int]:
    """The major type, the argument in its shortest form (R-DATA-1), and where it ends."""
    if at >= len(data):
        raise NotDrisl("the value is cut short")
    major, info = data[at] >> 5, data[at] & 0x1F
    at += 1
    if info < 24:
        return major, info, at
    if info > 27:
        raise NotDrisl("an indefinite length or a reserved head")
    size = 1 << (info - 24)
    if at + size > len(data):
        raise NotDrisl("the value is cut short")
    argument = int.from_bytes(data[at : at + size], "big")
    if major == 7:
        raise NotDrisl("a float: the data model has none" if size > 1 else "a simple value")
    if argument < (24 if size == 1 else 1 << (4 * size)):
        raise NotDrisl("a head longer than its value needs")
    return major, argument, at + size


def _item(data: bytes, at: int, depth: int) -> tuple[Any, int]:
    if at < len(data) and data[at] & 0x1F < 24:  # a head of one byte: most of them
        major, argument, at = data[at] >> 5, data[at] & 0x1F, at + 1
    else:
        major, argument, at = _head(data, at)
    if major == 0:
        if argument > _INT_MAX:
            raise NotDrisl("an integer beyond 64 bits signed")
        return argument, at
    if major == 1:
        if -1 - argument < _INT_MIN:
            raise NotDrisl("an integer beyond 64 bits signed")
        return -1 - argument, at
    if major in (2, 3):
        end = at + argument
        if end > len(data):
            raise NotDrisl("a string cut short")
        return (data[at:end] if major == 2 else _text(data, at, end)), end
    if major == 6:
        return _link(data, at, argument)
    if major == 7:
        if argument not in _SIMPLE:
            raise NotDrisl(f"the simple value {argument}")
        return _SIMPLE[argument], at
    if depth >= MAX_DEPTH:
        raise NotDrisl(f"nested more than {MAX_DEPTH} deep")
    if major == 4:
        items = []
        for _ in range(argument):
            item, at = _item(data, at, depth + 1)
            items.append(item)
        return items, at
    return _map(data, at, argument, depth)


def _text(data: bytes, at: int, end: int) -> str:
    if end > len(data):
        raise NotDrisl("a string cut short")
    try:
        return data[at:end].decode("utf-8")
    except UnicodeDecodeError:
        raise NotDrisl("a text string that is not UTF-8") from None


def _map(data: bytes, at: int, count: int, depth: int) -> tuple[dict[str, Any], int]:
    fields: dict[str, Any] = {}
    last = b""
    for index in range(count):
        start = at
        if at < len(data) and 0x60 <= data[at] < 0x78:  # text of a one-byte head: most keys
            at += 1 + data[at] - 0x60
            key = _text(data, start + 1, at)
        else:
            key, at = _item(data, at, depth + 1)
            if not isinstance(key, str):
                raise NotDrisl("a map key that is not text")
        encoded = data[start:at]  # keys sort as their encodings do: length first
        if index and (len(encoded), encoded) <= (len(last), last):
            raise NotDrisl(f"map key {key[:40]!r} out of order or repeated")
        last = encoded
        fields[key], at = _item(data, at, depth + 1)
    return fields, at


_BLESSED_LINK = b"\x58\x25\x00\x01\x71\x12\x20"  # 37 bytes: 0x00, a CIDv1 DAG-CBOR SHA-256


def _link(data: bytes, at: int, tag: int) -> tuple[Link, int]:
    if tag != 42:
        raise NotDrisl(f"tag {tag}: only 42 (a CID link) is allowed")
    if data.startswith(_BLESSED_LINK, at) and at + 39 <= len(data):  # what repositories link by
        return Link(data[at + 3 : at + 39]), at + 39
    major, size, at = _head(data, at)
    end = at + size
    if major != 2 or size < 2 or end > len(data) or data[at] != 0:
        raise NotDrisl("a link that is not 0x00 and a binary CID")
    if cid_end(data[at + 1 : end]) != size - 1:
        raise NotDrisl("a link with bytes after its CID")
    return Link(data[at + 1 : end]), end


def encode(value: Any) -> bytes:
    """The DRISL encoding of a value `decode` gives. Raises `NotDrisl`."""
    out = bytearray()
    _write(value, out, 0)
    return bytes(out)


def _write_head(major: int, argument: int, out: bytearray) -> None:
    if argument < 24:
        out.append(major << 5 | argument)
        return
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if argument < 1 << (8 * size):
            out.append(major << 5 | info)
            out += argument.to_bytes(size, "big")
            return
    raise NotDrisl("an integer beyond 64 bits")


def _write(value: Any, out: bytearray, depth: int) -> None:
    if value is None or isinstance(value, bool):
        out.append({False: 0xF4, True: 0xF5, None: 0xF6}[value])
    elif isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise NotDrisl("an integer beyond 64 bits signed")
        _write_head(0, value, out) if value >= 0 else _write_head(1, -1 - value, out)
    elif isinstance(value, bytes):
        _write_head(2, len(value), out)
        out += value
    elif isinstance(value, str):
        try:
            encoded = value.encode("utf-8")
        except UnicodeEncodeError:
            raise NotDrisl("a text string with a lone surrogate") from None
        _write_head(3, len(encoded), out)
        out += encoded
    elif isinstance(value, Link):
        out += b"\xd8\x2a"
        _write_head(2, len(value.cid) + 1, out)
        out += b"\x00" + value.cid
    elif depth >= MAX_DEPTH:
        raise NotDrisl(f"nested more than {MAX_DEPTH} deep")
    elif isinstance(value, list):
        _write_head(4, len(value), out)
        for item in value:
            _write(item, out, depth + 1)
    elif isinstance(value, dict) and all(isinstance(key, str) for key in value):
        keys = sorted((encode(key), key) for key in value)
        keys.sort(key=lambda pair: len(pair[0]))  # stable: length first, then the bytes
        _write_head(5, len(keys), out)
        for encoded, key in keys:
            out += encoded
            _write(value[key], out, depth + 1)
    else:
        raise NotDrisl(f"a {type(value).__name__}: the data model has none")


# --- the JSON form (R-DATA-4) -------------------------------------------------------------


def to_json(value: Any) -> Any:
    """A decoded value in atproto's JSON form: links as `{"$link": CID}`, bytes as
    `{"$bytes": base64}` (the standard alphabet, unpadded)."""
    if isinstance(value, Link):
        return {"$link": value.text}
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode().rstrip("=")}
    if isinstance(value, list):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    return value


def from_json(value: Any, depth: int = 0) -> Any:
    """A value of atproto's JSON form (as `json.loads` gives it) as `encode` takes it: an
    object of `$link` alone a link, of `$bytes` alone bytes (`=` padding optional), a
    number without a fraction an integer. Raises `NotDrisl` (R-DATA-4)."""
    if isinstance(value, float):
        if not value.is_integer():
            raise NotDrisl(f"the number {value}: the data model has no floats")
        return int(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if depth >= MAX_DEPTH:
        raise NotDrisl(f"nested more than {MAX_DEPTH} deep")
    if isinstance(value, list):
        return [from_json(item, depth + 1) for item in value]
    if not isinstance(value, dict):
        raise NotDrisl(f"a {type(value).__name__}: the data model has none")
    if "$link" in value:
        return _link_of(value)
    if "$bytes" in value:
        encoded = value["$bytes"]
        if len(value) != 1 or not isinstance(encoded, str):
            raise NotDrisl('a "$bytes" object that is not {"$bytes": base64}')
        try:
            return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise NotDrisl(f"{encoded[:40]!r} is not base64") from None
    return {key: from_json(item, depth + 1) for key, item in value.items()}


def _link_of(value: dict[str, Any]) -> Link:
    text = value["$link"]
    if len(value) != 1 or not isinstance(text, str):
        raise NotDrisl('a "$link" object that is not {"$link": CID}')
    try:
        cid = bytes(libipld.decode_multibase(text)[1]) if text[:1] == "b" else b""
    except ValueError:
        cid = b""
    if not cid or cid_end(cid) != len(cid):
        raise NotDrisl(f"{text[:80]!r} is not a CIDv1 in base32")
    return Link(cid)
