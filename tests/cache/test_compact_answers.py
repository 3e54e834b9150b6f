"""The compact store answers as the store before it did (issue 69): every answer about the
test network's identities, from a cache written the way it was written before the compact
form (each entry packed whole, with its timings) and from the same cache rewritten compact,
through the daemon: XRPC answers byte for byte, `/v1` reports with the same verdict, each
method's outcome and everything else but the timings a kept binding drops. And a store
written before migrates in place: its entries are hits as they are, nothing resolved again.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from atwhois.cache import compact
from atwhois.cache.entry import Entry
from atwhois.cache.stores import SqliteStore, Stored
from devnet import world
from devnet.atwhois import daemon_here
from devnet.network import DevnetState
from tests.support.http import XRPC

WEB = ["web.test", "legacyweb.test"]
# Time-bound parts of a report: how old the answer is, how long it stays fresh.
_MOVING = {"cache", "ms"}
FAR = Stored(b"", 2**40)


def identifiers(devnet: DevnetState) -> list[str]:
    handles = sorted(
        set(world.ATPROTO_TXT)
        | {host for host, path in world.STATIC_FILES if path == world.WELL_KNOWN}
    )
    dids = [devnet.did(identity.name) for identity in world.PLC_IDENTITIES]
    return [*handles, *dids, *WEB, *(f"did:web:{host}" for host in WEB)]


def answers(url: str, names: list[str]) -> dict[str, Any]:
    """Every answer the daemon gives about `names` from what it keeps (a name whose
    resolution failed for now is kept by no store: left out): the XRPC bodies as bytes, the
    reports."""
    found: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=30) as http:
        for name in names:
            report = http.get(f"/v1/identity/{name}")
            if not report.json()["cache"]["cached"]:
                continue
            found[f"/v1/identity/{name}"] = (report.status_code, report.json())
            kind = "did" if name.startswith("did:") else "handle"
            paths = [f"{XRPC}resolveIdentity?identifier={name}"]
            paths.append(f"{XRPC}resolveDid?did={name}" if kind == "did" else "")
            paths.append(f"{XRPC}resolveHandle?handle={name}" if kind == "handle" else "")
            for path in filter(None, paths):
                response = http.get(path)
                found[path] = (response.status_code, response.content)
    return found


def without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k not in _MOVING}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def rewrite(path: Path, encode: Any) -> tuple[int, int]:
    """Every entry of the SQLite cache at `path` written again by `encode(key, entry)`; how
    many, and how many of them are compact."""

    async def rewritten() -> list[bytes]:
        store = SqliteStore(path)
        written = []
        for prefix in ("h:", "d:"):
            for key, value in await store.scan(prefix, 10_000):
                written.append(encode(key, Entry.decode(value, key)))
                await store.put(key, written[-1], (await store.get(key) or FAR).expires_at)
        await store.close()
        return written

    written = asyncio.run(rewritten())
    return len(written), sum(value[0] in compact.KINDS for value in written)


def test_every_answer_from_the_compact_store_is_the_present_stores(
    devnet: DevnetState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = identifiers(devnet)
    # Entries written as they were before the compact form: whole, with their timings.
    monkeypatch.setattr(Entry, "encode", lambda entry, key: entry.encode_whole())
    env, old = devnet.env(), tmp_path / "old.db"
    serve = ("--no-request-log", "--ttl-unverified", "600:3600", "--ttl-absent", "600:3600")
    with daemon_here(env, tmp_path / "resolving.log", "--cache", f"sqlite://{old}", *serve) as d:
        answers(d.url, names)  # every identity resolved, its parts kept (the old way)
    with daemon_here(env, tmp_path / "old.log", "--cache", f"sqlite://{old}", *serve) as d:
        present = answers(d.url, names)  # composed from the kept parts
    assert sum(status == 200 for status, _ in present.values()) > len(names)  # most are kept
    monkeypatch.undo()
    shutil.copy(old, tmp_path / "compact.db")
    shutil.copy(old, tmp_path / "migrating.db")
    count, compacted = rewrite(tmp_path / "compact.db", lambda key, entry: entry.encode(key))
    assert count >= len(names) and compacted >= count // 2, (count, compacted)
    for store in ("compact.db", "migrating.db"):  # rewritten; as written before, read in place
        db_url = f"sqlite://{tmp_path / store}"
        with daemon_here(env, tmp_path / f"{store}.log", "--cache", db_url, *serve) as d:
            now = answers(d.url, names)
        assert now.keys() == present.keys()
        for path, (status, body) in present.items():
            if path.startswith(XRPC):
                assert now[path] == (status, body), path  # byte for byte
            else:
                report = now[path][1]
                assert now[path][0] == status and report["status"] == body["status"], path
                outcomes = {
                    m: e["outcome"] for m, e in body["evidence"].items() if isinstance(e, dict)
                }
                assert outcomes == {m: report["evidence"][m]["outcome"] for m in outcomes}, path
                assert without_timings(report) == without_timings(body), path
