"""Repositories made for tests, as the repository spec describes them: a correct MST built
from keys and record CIDs (checked against indigo's interop vectors and the reference PDS's
own trees), whose nodes a test may then change one at a time before they are encoded; a
commit signed for real; a `getRecord` answer for a key (the signed commit, the nodes the
reference's walk visits, the record when it is there). The one builder of them: the PDS of
`atwhois.testing.World`, the record proofs' tests and fuzz targets, and the benchmark
(`python -m bench records`) all build with it.

Written apart from the product's `resolver.mst` and `resolver.drisl`: the layer is counted
another way, nodes are encoded by libipld, so that the two agreeing means something.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import coincurve
import libipld

Fields = dict[str, Any]
REV = "3n3qpjq7vrk2v"  # a TID: the rev of a commit that does not say another
_S32 = "234567abcdefghijklmnopqrstuvwxyz"  # base32-sortable, as TIDs are written


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def cid(block: bytes, codec: int = 0x71) -> bytes:
    """A CIDv1 of `block` (DAG-CBOR unless `codec` says otherwise), SHA-256, as bytes."""
    return bytes([1]) + varint(codec) + bytes([0x12, 32]) + hashlib.sha256(block).digest()


def car(*blocks: tuple[bytes, bytes], roots: Sequence[bytes] = ()) -> bytes:
    """A CAR v1 file of these (CID, block) pairs, with no roots (as `getBlocks` sends) unless
    given (binary CIDs: libipld writes them as links)."""
    header = libipld.encode_dag_cbor({"roots": list(roots), "version": 1})
    sections = b"".join(varint(len(name) + len(b)) + name + b for name, b in blocks)
    return varint(len(header)) + header + sections


def tid(number: int) -> str:
    """A TID (a commit's rev, a record key): a 63-bit number in 13 base32-sortable
    characters, so that TIDs sort as their numbers do (microseconds << 10, a clock id)."""
    return "".join(_S32[(number >> (60 - 5 * i)) & 31] for i in range(13))


def layer(key: bytes) -> int:
    """The leading zero bits of the key's SHA-256, halved: counted on the whole number."""
    return (256 - int.from_bytes(hashlib.sha256(key).digest(), "big").bit_length()) // 2


def keyed(prefix: str, wanted: int, start: int = 0) -> str:
    """The first `prefix` + number from `start` whose key has the layer `wanted` (layer 3
    takes some 64 tries, layer 4 some 256)."""
    number = start
    while layer(f"{prefix}{number}".encode()) != wanted:
        number += 1
    return f"{prefix}{number}"


@dataclass(eq=False)
class Entry:
    key: bytes
    value: bytes  # a binary CID
    right: Node | None = None


@dataclass(eq=False)
class Node:
    """One node; `change` is a test's edit of its fields (`e`, `l`) before it is encoded."""

    left: Node | None = None
    entries: list[Entry] = field(default_factory=list)
    change: Callable[[Fields], Fields] | None = None
    cid: bytes = b""  # set by each `encode`

    def child(self, index: int) -> Node | None:
        """The subtree left of entry `index` (`l` for 0, the previous entry's `t` after)."""
        return self.left if index == 0 else self.entries[index - 1].right


def build(items: Mapping[bytes, bytes]) -> Node:
    """The one MST of these keys and values: the root at the highest layer of any key, each
    node's keys those of its layer between two keys of the layers above, empty nodes kept
    only where a link would skip a layer."""
    ordered = sorted(items.items())
    if not ordered:
        return Node()
    top = max(layer(key) for key, _ in ordered)
    root = _build(ordered, top)
    assert root is not None
    return root


def _build(items: list[tuple[bytes, bytes]], at: int) -> Node | None:
    if not items:
        return None
    node = Node()
    run: list[tuple[bytes, bytes]] = []
    for key, value in items:
        if layer(key) < at:
            run.append((key, value))
            continue
        _attach(node, _build(run, at - 1))
        node.entries.append(Entry(key, value))
        run = []
    _attach(node, _build(run, at - 1))
    return node


def _attach(node: Node, subtree: Node | None) -> None:
    if node.entries:
        node.entries[-1].right = subtree
    else:
        node.left = subtree


def signed_commit(
    key: coincurve.PrivateKey,
    did: str,
    /,
    *,
    data: bytes | None = None,
    rev: str = REV,
    **changes: Any,
) -> tuple[str, bytes, bytes]:
    """A commit of `did` at `rev` signed by `key`, its `data` the MST root `data` (a binary
    CID), then `changes` made to it: its CID as text, the CID's bytes, and the block."""
    fields: dict[str, Any] = {
        "did": did,
        "version": 3,
        "data": data or cid(b"mst root"),
        "rev": rev,
        "prev": None,
    }
    signature = key.sign_recoverable(libipld.encode_dag_cbor(fields))[:64]  # low-S r||s
    block = libipld.encode_dag_cbor({**fields, "sig": signature, **changes})
    name = cid(block)
    return libipld.encode_cid(name), name, block


def fields_of(node: Node, blocks: dict[bytes, bytes]) -> Fields:
    """The node's fields as the spec writes them (prefixes compressed), its subtrees
    encoded into `blocks` first."""
    entries, previous = [], b""
    for entry in node.entries:
        shared = 0
        while shared < min(len(previous), len(entry.key)) and (
            previous[shared] == entry.key[shared]
        ):
            shared += 1
        right = encode(entry.right, blocks) if entry.right else None
        entries.append({"k": entry.key[shared:], "p": shared, "t": right, "v": entry.value})
        previous = entry.key
    fields: Fields = {"e": entries, "l": encode(node.left, blocks) if node.left else None}
    return node.change(fields) if node.change else fields


def encode(node: Node, blocks: dict[bytes, bytes]) -> bytes:
    """The node's binary CID, its block and its subtrees' added to `blocks`."""
    block = bytes(libipld.encode_dag_cbor(fields_of(node, blocks)))
    node.cid = cid(block)
    blocks[node.cid] = block
    return node.cid


def path(root: Node, key: bytes) -> list[Node]:
    """The nodes the reference's walk reads for `key` (`MST.cidsForPath`): down from the root
    to the node holding it, or to the first link that is null."""
    nodes: list[Node] = []
    node: Node | None = root
    while node is not None:
        nodes.append(node)
        index = next((i for i, e in enumerate(node.entries) if e.key >= key), len(node.entries))
        if index < len(node.entries) and node.entries[index].key == key:
            break
        node = node.child(index)
    return nodes


def record_block(value: Mapping[str, Any]) -> tuple[bytes, bytes]:
    block = bytes(libipld.encode_dag_cbor(dict(value)))
    return cid(block), block


def answer(
    commit: tuple[bytes, bytes],
    tree: Node,
    blocks: Mapping[bytes, bytes],
    key: bytes,
    record: tuple[bytes, bytes] | None,
) -> list[tuple[bytes, bytes]]:
    """The blocks of `getRecord`'s answer for `key`, in the reference PDS's order: the commit
    (CID, block), the nodes of the path (`tree` encoded into `blocks`), the record (CID,
    block) when the key is there."""
    chosen = [commit, *((node.cid, blocks[node.cid]) for node in path(tree, key))]
    return [*chosen, record] if record is not None else chosen


@dataclass
class Repo:
    """A repository of `records` (path -> value), its commits signed by `key`."""

    did: str
    key: coincurve.PrivateKey
    records: dict[str, Any] = field(default_factory=dict)

    def tree(self) -> Node:
        return build({path.encode(): record_block(v)[0] for path, v in self.records.items()})

    def proof(
        self,
        path_of: str,
        *,
        tree: Node | None = None,
        signer: coincurve.PrivateKey | None = None,
        commit: Mapping[str, Any] | None = None,
        leave_out: Iterable[bytes] = (),
        add: Iterable[tuple[bytes, bytes]] = (),
        roots: list[bytes] | None = None,
    ) -> bytes:
        """`getRecord`'s answer for `path_of`, as the reference PDS makes it: the commit of
        `tree` (by default the repository's own) signed by `signer` (by default `key`) with
        `commit`'s changes, the path's nodes, the record if there; `leave_out` drops blocks,
        `add` adds some, `roots` replaces the header's."""
        tree = tree or self.tree()
        blocks: dict[bytes, bytes] = {}
        root = encode(tree, blocks)
        signer = signer or self.key
        _, name, block = signed_commit(signer, self.did, data=root, **commit or {})
        record = record_block(self.records[path_of]) if path_of in self.records else None
        chosen = answer((name, block), tree, blocks, path_of.encode(), record)
        kept = [(n, b) for n, b in chosen if n not in set(leave_out)]
        return car(*kept, *add, roots=[name] if roots is None else roots)

    def commit_cid(self, tree: Node | None = None) -> str:
        """The CID the proofs' commit has (signed by `key`, unchanged)."""
        return signed_commit(self.key, self.did, data=encode(tree or self.tree(), {}))[0]


def post(text: str) -> dict[str, Any]:
    return {"$type": "app.bsky.feed.post", "createdAt": "2026-12-01T02:00:00.000Z", "text": text}


def collection_keys(count: int, collection: str = "app.bsky.feed.post") -> list[str]:
    """`count` record paths of a collection, record keys like TIDs (13 base32 characters)."""
    alphabet = "234567abcdefghijklmnopqrstuvwxyz"
    return [
        f"{collection}/3l" + "".join(alphabet[(n >> (5 * i)) % 32] for i in range(11))
        for n in range(1000, 1000 + count * 7919, 7919)
    ]


def blessed(text: str) -> bytes:
    """A CID text's binary form."""
    return bytes(libipld.decode_multibase(text)[1])
