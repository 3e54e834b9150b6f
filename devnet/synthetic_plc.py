"""A synthetic PLC directory export, signed for real (K-256, libsecp256k1) from fixed keys:
many DIDs whose operations interleave in time, as in `/export`, with a recovery now and
then. For the export tests and the verification benchmark."""

from __future__ import annotations

import datetime
import heapq
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atwhois.resolver.plc.encoding import cid_of, dag_cbor, did_of_genesis
from devnet import world
from devnet.plc_ops import Key, plc_operation

EPOCH = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)


def export_lines(dids: int, ops_per_did: int, *, recover_every: int = 50) -> Iterator[str]:
    """Round r emits op r of every DID; a round lasts 60 hours, so recoveries land inside
    the 72-hour window and older ops fall out of it. Every `recover_every`-th DID has its
    op 1 signed by the hot key (index 1) and nullified by op 2, signed by key 0."""
    seconds_per_op = 60 * 3600 / dids
    keys = [[Key(f"{d}/0"), Key(f"{d}/1")] for d in range(dids)]
    heads: list[tuple[str, str]] = []  # (did, cid of head)
    history: list[list[str]] = [[] for _ in range(dids)]
    clock = 0.0
    for round_ in range(ops_per_did):
        for d in range(dids):
            clock += seconds_per_op
            stamp = EPOCH + datetime.timedelta(seconds=clock)
            created = stamp.isoformat(timespec="milliseconds")
            recovering = d % recover_every == 0 and ops_per_did >= 3
            if round_ == 0:
                op = keys[d][0].sign(plc_operation(None, keys[d], [f"at://user{d}.test"]))
                did = did_of_genesis(dag_cbor(op))
                heads.append((did, ""))
            else:
                did = heads[d][0]
                prev = history[d][0] if recovering and round_ == 2 else history[d][-1]
                signer = keys[d][1] if recovering and round_ == 1 else keys[d][0]
                op = signer.sign(plc_operation(prev, keys[d], [f"at://user{d}-v{round_}.test"]))
            cid = cid_of(dag_cbor(op))
            history[d].append(cid)
            nullified = recovering and round_ == 1
            yield json.dumps(
                {
                    "did": did,
                    "operation": op,
                    "cid": cid,
                    "nullified": nullified,
                    "createdAt": created.replace("+00:00", "Z"),
                },
                separators=(",", ":"),  # as the reference directory writes its export
            )


def write_export(path: Path, dids: int, ops_per_did: int) -> int:
    count = 0
    with path.open("w") as out:
        for line in export_lines(dids, ops_per_did):
            out.write(line + "\n")
            count += 1
    return count


def network_world(identities: int) -> Iterator[tuple[str, str, str | None]]:
    """The network-shaped world (`world.shaped_handle`): per identity its handle, its DID and
    the export line of its genesis operation (None for did:web), in `/export` order. A
    did:plc names its handle's PDS domain as its PDS, or for a domain of its own, one of the
    PDS domains in turn."""
    clock = 0.0
    for index in range(identities):
        handle = world.shaped_handle(index)
        if handle.endswith(world.BULK_SUFFIX):
            yield handle, f"did:web:{handle}", None
            continue
        pds = world.shaped_pds(handle) or world.PDS_DOMAINS[index % len(world.PDS_DOMAINS)][0]
        key = Key(f"network/{index}")
        op = key.sign(plc_operation(None, [key], [f"at://{handle}"], f"https://{pds}"))
        clock += 0.25  # a creation every quarter of a second: a million in about 3 days
        created = (EPOCH + datetime.timedelta(seconds=clock)).isoformat(timespec="milliseconds")
        encoded = dag_cbor(op)
        did = did_of_genesis(encoded)
        line = {
            "did": did,
            "operation": op,
            "cid": cid_of(encoded),
            "nullified": False,
            "createdAt": created.replace("+00:00", "Z"),
        }
        yield handle, did, json.dumps(line, separators=(",", ":"))


# --- a directory of the real one's shape (issue 33) ---------------------------------------

BOT_PDS = "https://bots.pds.test"  # where the bursts of creations come from
_PDS_HOSTS = [f"https://pds{n}.test" for n in range(40)]
_HOUR = 3600.0
_DAY = 24 * _HOUR


@dataclass
class _Account:
    """A DID being written: its keys' generation, what it is now, what is still to come."""

    index: int
    did: str = ""
    head: str | None = None  # the CID of its last operation in force
    generation: int = 0  # of its rotation key 0 (a key rotation makes the next one)
    handle_version: int = 0
    pds: str = _PDS_HOSTS[0]
    left: int = 0  # operations still to come
    recovering: bool = False  # its next update is a hijack by the hot key, then a recovery
    before_hijack: str | None = None  # the head the recovery goes back to
    tombstone: bool = False  # its last operation is a tombstone

    keyring: tuple[int, list[Key]] | None = None  # (generation, its keys): derived once

    def keys(self) -> list[Key]:
        if self.keyring is None or self.keyring[0] != self.generation:
            keys = [Key(f"dir/{self.index}/{self.generation}"), Key(f"dir/{self.index}/hot")]
            self.keyring = (self.generation, keys)
        return self.keyring[1]

    def operation(self) -> dict[str, Any]:
        handle = f"at://u{self.index}-{self.handle_version}.test"
        return plc_operation(self.head, self.keys(), [handle], self.pds)


def _operations_of(rng: random.Random) -> int:
    """How many operations a DID has: mostly one or two, a long tail up to 60."""
    draw = rng.random()
    if draw < 0.55:
        return 1
    if draw < 0.85:
        return 2
    if draw < 0.93:
        return 3
    return rng.randint(4, 10) if draw < 0.99 else rng.randint(11, 60)


def _later(rng: random.Random) -> float:
    """When a DID's next operation comes: hours, weeks or months after the last, and never
    within a second of it (P-NULL-1: an op's createdAt must be later than its prev's, to
    the millisecond; a draw of the exponential under a millisecond once made the 10M
    directory's op 4,323,078 one the rules refuse)."""
    draw = rng.random()
    mean = 2 * _HOUR if draw < 0.3 else (10 * _DAY if draw < 0.7 else 90 * _DAY)
    return max(rng.expovariate(1 / mean), 1.0)


def _next(account: _Account, rng: random.Random) -> dict[str, Any]:
    """The account's next operation, signed; its state moved on."""
    account.left -= 1
    if account.before_hijack is not None:  # the recovery: key 0 goes back past the hijack
        account.head, account.before_hijack = account.before_hijack, None
        account.handle_version += 1
        return account.keys()[0].sign(account.operation())
    if account.left == 0 and account.tombstone:
        return account.keys()[0].sign({"type": "plc_tombstone", "prev": account.head})
    if account.recovering:  # the hot key (index 1) takes the handle
        account.recovering, account.before_hijack = False, account.head
        account.handle_version += 1
        return account.keys()[1].sign(account.operation())
    signer = account.keys()[0]
    change = rng.random()
    if change < 0.5:
        account.handle_version += 1
    elif change < 0.75:
        account.pds = rng.choice(_PDS_HOSTS)
    else:
        account.generation += 1  # signed by the key it replaces
    return signer.sign(account.operation())


def directory_lines(
    total: int,
    *,
    seed: int = 1,
    recover: float = 0.001,
    tombstone: float = 0.0005,
    burst_every: int = 50_000,
) -> Iterator[str]:
    """`total` operations of a directory shaped as plc.directory is, in `/export`'s `seq`
    format (`sequenced_op` lines), signed for real: most DIDs have one or two operations, a
    long tail up to 60; DIDs interleave across the whole log (a DID's next operation comes
    hours, weeks or months later); now and then a burst of 5,000 creations at 3,000 a minute
    from one PDS; handle changes, PDS moves and rotation-key rotations; about 0.1 % of DIDs
    hijacked by their hot key and recovered within the 72-hour window (the hijack nullified,
    which the mirror works out itself); about 0.05 % tombstoned. `recover` and `tombstone`:
    those shares among the DIDs that have later operations; `burst_every`: one creation in
    that many starts a burst."""
    rng = random.Random(seed)
    pending: list[tuple[float, int, _Account]] = []  # (when, tiebreak, account)
    clock, created, burst = 0.0, 0, 0
    for seq in range(1, total + 1):
        gap = 0.02 if burst else rng.expovariate(1 / 10.0)
        if pending and pending[0][0] <= clock + gap:
            clock, _, account = heapq.heappop(pending)
            op = _next(account, rng)
        else:
            clock += gap
            burst = burst - 1 if burst else (5000 if rng.random() < 1 / burst_every else 0)
            account = _Account(created, pds=BOT_PDS if burst else rng.choice(_PDS_HOSTS))
            created += 1
            account.left = 0 if burst else _operations_of(rng) - 1
            account.recovering = account.left >= 2 and rng.random() < recover
            account.tombstone = account.left >= 1 and rng.random() < tombstone
            op = account.keys()[0].sign(account.operation())
            account.did = did_of_genesis(dag_cbor(op))
        cid = cid_of(dag_cbor(op))
        if op["type"] != "plc_tombstone":
            account.head = cid
        if account.left:
            soon = account.before_hijack is not None  # a recovery comes within the window
            wait = rng.uniform(_HOUR, 48 * _HOUR) if soon else _later(rng)
            heapq.heappush(pending, (clock + wait, seq, account))
        stamp = (EPOCH + datetime.timedelta(seconds=clock)).isoformat(timespec="milliseconds")
        yield json.dumps(
            {
                "type": "sequenced_op",
                "seq": seq,
                "did": account.did,
                "operation": op,
                "cid": cid,
                "createdAt": stamp.replace("+00:00", "Z"),
            },
            separators=(",", ":"),
        )
