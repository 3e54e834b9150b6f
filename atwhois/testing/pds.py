"""The repositories of `atwhois.testing.World`'s accounts, as their PDS holds them: records
written and deleted one at a time, each write a new commit (a later rev), the commit signed
with the account's key when a proof is asked for (so a rotated key signs from then on), and
`com.atproto.sync.getRecord` answered as the reference PDS answers it: a CAR of the signed
commit, the MST nodes of the key's path and the record when it is there (`mst.answer`), a
proof of absence when it is not. Built with `atwhois.testing.mst`, the tests' one builder."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import coincurve
import libipld

from atwhois.resolver import drisl

from . import mst

Query = dict[str, list[str]]  # a query string, parsed
Answer = tuple[int, bytes]  # an HTTP status and its body


def _now() -> int:
    """A rev's number now: microseconds since the epoch, shifted past a clock id of 10 bits."""
    return int(time.time() * 1_000_000) << 10


def record_block(value: Mapping[str, Any]) -> bytes:
    """A record given in atproto's JSON form, as its DRISL block. Raises `NotDrisl`."""
    record = drisl.from_json(value)
    if not isinstance(record, dict):
        raise drisl.NotDrisl(f"a record is a map, not a {type(record).__name__}")
    return drisl.encode(record)


@dataclass
class Repository:
    """One account's records (path -> its DRISL block), what its PDS serves in place of some
    of them (`tampered`), and its latest commit's rev (a TID's number)."""

    records: dict[str, bytes] = field(default_factory=dict)
    tampered: dict[str, bytes] = field(default_factory=dict)
    rev: int = field(default_factory=_now)
    _built: tuple[mst.Node, dict[bytes, bytes], bytes] | None = None  # the tree, until a write

    def commit(self) -> None:
        """A new commit of the repository: a rev after the last one."""
        self.rev = max(self.rev + 1, _now())
        self._built = None

    def put(self, path: str, value: Mapping[str, Any]) -> str:
        """`value` (atproto's JSON form) written at `path`; its CID. Raises `NotDrisl`."""
        block = record_block(value)
        self.records[path] = block
        self.tampered.pop(path, None)
        self.commit()
        return str(libipld.encode_cid(mst.cid(block)))

    def delete(self, path: str) -> None:
        self.records.pop(path, None)
        self.tampered.pop(path, None)
        self.commit()

    def _tree(self) -> tuple[mst.Node, dict[bytes, bytes], bytes]:
        """The MST of the records as they are (built again after a write), its blocks and
        its root's CID."""
        if self._built is None:
            tree = mst.build({p.encode(): mst.cid(block) for p, block in self.records.items()})
            blocks: dict[bytes, bytes] = {}
            self._built = tree, blocks, mst.encode(tree, blocks)
        return self._built

    def latest_commit(self, did: str, key: coincurve.PrivateKey) -> tuple[str, bytes, bytes]:
        """The latest commit, signed by `key` now (deterministic signatures: the same
        commit for the same key and rev): its CID as text, as bytes, and its block."""
        return mst.signed_commit(key, did, data=self._tree()[2], rev=mst.tid(self.rev))

    def answer(self, method: str, did: str, key: coincurve.PrivateKey, query: Query) -> Answer:
        """A `com.atproto.sync.*` method of the PDS hosting this repository, as the reference
        answers it: `getRecord` (a proof), and what the PDS check asks (`getRepoStatus`,
        `getLatestCommit`, `getBlocks` of the commit); another method is not served."""
        if method == "getRecord":
            collection, rkey = (query.get(name, [""])[0] for name in ("collection", "rkey"))
            return 200, self.get_record(did, key, f"{collection}/{rkey}")
        if method == "getRepoStatus":
            return 200, json.dumps({"did": did, "active": True, "rev": mst.tid(self.rev)}).encode()
        name, raw, block = self.latest_commit(did, key)
        if method == "getLatestCommit":
            return 200, json.dumps({"cid": name, "rev": mst.tid(self.rev)}).encode()
        if method == "getBlocks" and query.get("cids") == [name]:
            return 200, mst.car((raw, block))
        body = {"error": "InvalidRequest", "message": f"{method}: not served by this PDS"}
        return 400, json.dumps(body).encode()

    def get_record(self, did: str, key: coincurve.PrivateKey, path: str) -> bytes:
        """The answer to `getRecord` for `path`, its commit signed by `key` now."""
        tree, blocks, _ = self._tree()
        _, name, block = self.latest_commit(did, key)
        record = None
        if path in self.records:
            held = self.records[path]
            record = mst.cid(held), self.tampered.get(path, held)
        blocks_sent = mst.answer((name, block), tree, blocks, path.encode(), record)
        return mst.car(*blocks_sent, roots=[name])
