"""A repository's Merkle Search Tree as a proof shows it (R-MST-*): the nodes on the path
from the commit's `data` to one key, each read strictly, and what they say of that key:
its record's CID, or that it is not in the tree.

The walk checks what the reference's own reading does not (@atproto/repo reads a node's
entries and follows links, and checks neither depth nor order): every key of a node at the
node's layer, every child one layer down, keys in strict order and inside the range of the
link that led to them, prefixes compressed exactly. Without these a tree its owner signed
could "prove" a key absent from the path while it sits elsewhere in the tree. Pure
functions over blocks; reading the CAR file and the commit is `resolver.record_proof`.
"""

from __future__ import annotations

import hashlib
import re
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass

from atwhois.resolver import drisl
from atwhois.resolver.commit import InvalidCommit

MAX_KEY = 1024  # R-MST-3: bytes of a key, the reference's bound
MAX_ENTRIES = 256  # R-MST-7: entries of one node; past 64 is already a 1-in-10^8 node
MAX_PATH = 32  # R-MST-7: nodes from the root; a 33rd needs a key hashing to 64 zero bits
_KEY = re.compile(rb"[a-zA-Z0-9_~:.-]+/[a-zA-Z0-9_~:.-]+")  # R-MST-3


class InvalidProof(InvalidCommit):
    """A tree, or a record in it, that is not what a proof must show; `rule` names why."""


def key_layer(key: bytes) -> int:
    """R-MST-5: the layer of a key: the leading zero bits of its SHA-256, halved (fan-out 4)."""
    zeros = 0
    for byte in hashlib.sha256(key).digest():
        if byte:
            zeros += 8 - byte.bit_length()
            break
        zeros += 8
    return zeros // 2


@dataclass(frozen=True, slots=True)
class Entry:
    key: bytes  # rebuilt from the prefix the entry shares with the one before it
    value: drisl.Link  # the record's CID
    right: bytes | None  # the subtree after this key (a binary CID)


@dataclass(frozen=True, slots=True)
class Node:
    left: bytes | None  # the subtree before the first key (a binary CID)
    entries: tuple[Entry, ...]


def read_node(block: bytes) -> Node:
    """A node's block read: its schema (R-MST-1), its keys rebuilt and checked (R-MST-2,
    R-MST-3), in order (R-MST-4), not too many (R-MST-7). Raises `InvalidProof`."""
    try:
        fields = drisl.decode(block)
    except drisl.NotDrisl as err:
        raise InvalidProof(f"an MST node that is not DRISL: {err}", "R-MST-1") from None
    if not isinstance(fields, dict) or fields.keys() != {"e", "l"}:
        raise InvalidProof("an MST node that is not a map of `e` and `l`", "R-MST-1")
    raw = fields["e"]
    if not isinstance(raw, list):
        raise InvalidProof("an MST node whose `e` is not an array", "R-MST-1")
    if len(raw) > MAX_ENTRIES:
        raise InvalidProof(f"an MST node of {len(raw)} entries, over {MAX_ENTRIES}", "R-MST-7")
    entries: list[Entry] = []
    previous = b""
    for entry in raw:
        if not isinstance(entry, dict) or entry.keys() != {"k", "p", "t", "v"}:
            raise InvalidProof("an MST entry that is not a map of `k`, `p`, `t`, `v`", "R-MST-1")
        prefix, suffix, value = entry["p"], entry["k"], entry["v"]
        if not isinstance(prefix, int) or not isinstance(suffix, bytes):
            raise InvalidProof("an MST entry whose `p` or `k` is of another type", "R-MST-1")
        if not isinstance(value, drisl.Link):
            raise InvalidProof("an MST entry whose `v` is not a link", "R-MST-1")
        key = _rebuilt(previous, prefix, suffix)
        if entries and key <= previous:
            raise InvalidProof(f"MST key {_shown(key)} after {_shown(previous)}", "R-MST-4")
        entries.append(Entry(key, value, _subtree(entry["t"])))
        previous = key
    return Node(_subtree(fields["l"]), tuple(entries))


def _subtree(link: object) -> bytes | None:
    """A link to a subtree: null, or a blessed CID (R-MST-1: an MST linking its nodes by any
    other CID is invalid as a whole)."""
    if link is None:
        return None
    if not isinstance(link, drisl.Link) or not link.blessed:
        raise InvalidProof("a subtree link that is not a CIDv1 DAG-CBOR SHA-256", "R-MST-1")
    return link.cid


def _rebuilt(previous: bytes, prefix: int, suffix: bytes) -> bytes:
    """R-MST-2: the key the entry stands for; `prefix` is the whole prefix it shares with
    the key before it (compression is mandatory, so one tree has one encoding)."""
    if not 0 <= prefix <= len(previous):
        raise InvalidProof(f"an MST prefix of {prefix} after a key of {len(previous)}", "R-MST-2")
    if suffix and prefix < len(previous) and suffix[0] == previous[prefix]:
        raise InvalidProof(f"an MST prefix of {prefix}, not the whole one shared", "R-MST-2")
    key = previous[:prefix] + suffix
    if len(key) > MAX_KEY or _KEY.fullmatch(key) is None:
        raise InvalidProof(f"{_shown(key)} is not an MST key (collection/rkey)", "R-MST-3")
    return key


def _shown(key: bytes) -> str:
    return repr(key[:80].decode("ascii", "replace"))


def find(blocks: Mapping[bytes, bytes], root: bytes, key: bytes) -> drisl.Link | None:
    """The CID of `key`'s record in the tree whose root node is `root` (a binary CID), or
    None when the path shows the key is not there. `blocks` are the answer's, by binary CID,
    each already known to hash to its CID. Raises `InvalidProof`."""
    wanted = key_layer(key)
    cid: bytes | None = root
    layer: int | None = None  # the root's is that of its keys
    low: bytes | None = None  # the keys of a subtree are between the two around its link
    high: bytes | None = None
    for _ in range(MAX_PATH):
        if cid is None:
            return None
        block = blocks.get(cid)
        if block is None:  # R-MST-6: the path stops short; nothing is shown absent
            raise InvalidProof(f"MST node {drisl.Link(cid).text} is not in the answer", "R-MST-6")
        node = read_node(block)
        if layer is None:
            if not node.entries:
                if node.left is not None:
                    raise InvalidProof("the MST's root is an empty node over a subtree", "R-MST-5")
                return None  # an empty repository
            layer = key_layer(node.entries[0].key)
        elif not node.entries and node.left is None:
            raise InvalidProof("an empty MST node below the root", "R-MST-5")
        _check_placed(node, layer, low, high)
        keys = [entry.key for entry in node.entries]
        index = bisect_left(keys, key)
        if index < len(keys) and keys[index] == key:
            return node.entries[index].value
        if wanted >= layer:  # its layer is this node's or above: it would be here
            return None
        cid = node.left if index == 0 else node.entries[index - 1].right
        low = keys[index - 1] if index else low
        high = keys[index] if index < len(keys) else high
        layer -= 1
    raise InvalidProof(f"an MST path of more than {MAX_PATH} nodes", "R-MST-7")


def _check_placed(node: Node, layer: int, low: bytes | None, high: bytes | None) -> None:
    """R-MST-5: every key at the node's layer, none of its links below layer 0; R-MST-4:
    every key inside the range of the link that led here."""
    for entry in node.entries:
        found = key_layer(entry.key)
        if found != layer:
            where = f"{_shown(entry.key)} of layer {found} in a node of layer {layer}"
            raise InvalidProof(f"MST key {where}", "R-MST-5")
    if layer == 0 and (node.left is not None or any(e.right for e in node.entries)):
        raise InvalidProof("an MST node of layer 0 with a subtree", "R-MST-5")
    if not node.entries:
        return
    first, last = node.entries[0].key, node.entries[-1].key
    if low is not None and first <= low:
        raise InvalidProof(f"MST key {_shown(first)} left of its subtree's range", "R-MST-4")
    if high is not None and last >= high:
        raise InvalidProof(f"MST key {_shown(last)} right of its subtree's range", "R-MST-4")
