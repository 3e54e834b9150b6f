"""How the mirror keeps its operations (schema 2): packed with zstd against dictionaries it
trains on its own recent ops, read back by any process; and a mirror of schema 1 (each
export line and each DID's state kept whole) moved to it in place, in one transaction, on
SQLite and on a real PostgreSQL."""

from __future__ import annotations

import contextlib
import datetime
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from atwhois.mirror import MirrorApi, MirrorState, Replica
from atwhois.mirror.backends import SqliteMirrorStore, open_mirror_store
from atwhois.mirror.packing import UnreadableOperation
from atwhois.mirror.schema import SCHEMA_VERSION
from atwhois.mirror.store import SqlMirrorStore
from atwhois.resolver.errors import SchemaMismatch
from atwhois.resolver.plc.document import state_data
from devnet.plc_ops import AuditLog, Key
from devnet.postgres import scratch_database
from devnet.synthetic_plc import export_lines

T0 = datetime.datetime(2025, 3, 1, tzinfo=datetime.UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "mirror.db")
    else:
        with scratch_database("atwhois_packing") as url:
            yield url


def _open(where: str, *, writable: bool = True) -> SqlMirrorStore:
    return open_mirror_store(where, writable=writable)


def _execute(where: str, statements: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
    """Statements run straight on the database, in one transaction; the last one's rows."""
    rows: list[Any] = []
    if where.startswith("postgresql"):
        with psycopg.connect(where) as connection, connection.cursor() as cursor:
            for text, params in statements:
                cursor.execute(text.replace("?", "%s"), params)
                rows = cursor.fetchall() if cursor.description else []
        return rows
    with contextlib.closing(sqlite3.connect(where)) as connection, connection:
        for text, params in statements:
            rows = connection.execute(text, params).fetchall()
    return rows


def _tombstoned_log(name: str = "tomb") -> AuditLog:
    key = Key(f"packing/{name}")
    log = AuditLog.plain([key], T0)
    log.append(key.sign({"type": "plc_tombstone", "prev": log.head}), T0 + datetime.timedelta(1))
    return log


def _lines() -> list[str]:
    return [
        *export_lines(40, 3, recover_every=10),
        *(json.dumps(e) for e in _tombstoned_log().entries),
    ]


def _served(store: SqlMirrorStore) -> dict[str, Any]:
    """What the mirror answers about every DID it holds, and what it counts."""
    api = MirrorApi(store, MirrorState("https://upstream.example", caught_up_at=1.0))
    ops = store.export(after_seq=0, after_time=None, count=10_000)
    answers = {}
    for did in sorted({op.did for op in ops}):
        for rest in ("", "/data", "/log/audit", "/log/last"):
            reply = api.answer("GET", f"/{did}{rest}", {})
            answers[did + rest] = (reply.status, json.loads(reply.body))
    export = [(op.seq, op.did, op.cid, op.created_at, op.operation, op.signer) for op in ops]
    return {"answers": answers, "export": export, "counts": store.counts()}


def test_ops_are_packed_against_dictionaries_trained_as_the_mirror_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("atwhois.mirror.store.TRAIN_FIRST", 200)
    monkeypatch.setattr("atwhois.mirror.store.TRAIN_SAMPLE", 200)
    monkeypatch.setattr("atwhois.mirror.store.TRAIN_EVERY", 300)
    lines = list(export_lines(200, 3))
    path = tmp_path / "mirror.db"
    store = SqliteMirrorStore(path)
    try:
        replica = Replica(store)
        for start in range(0, len(lines), 100):
            assert replica.apply(lines[start : start + 100]).applied == 100
        rows = _execute(str(path), [("SELECT seq, operation FROM plc_ops ORDER BY seq", ())])
        numbers = [int.from_bytes(packed[:2], "big") for _, packed in rows]
        # trained at the write after 200 ops, and again 300 ops later, on the newest ops
        assert numbers == [0] * 200 + [1] * 300 + [2] * 100
        trained = _execute(str(path), [("SELECT number, trained_at FROM plc_dictionaries", ())])
        assert sorted(trained) == [(1, 200), (2, 500)]
        plain = sum(len(p) for _, p in rows[:200]) / 200
        packed = sum(len(p) for _, p in rows[200:]) / 400
        assert packed < 0.7 * plain, (plain, packed)
        # another process's reader learns the dictionaries from the store as it meets them
        reader = SqliteMirrorStore(path, writable=False)
        try:
            served = reader.export(after_seq=0, after_time=None, count=1000)
            assert [op.operation for op in served] == [json.loads(x)["operation"] for x in lines]
        finally:
            reader.close()
    finally:
        store.close()
    reopened = SqliteMirrorStore(path)  # packs on with its newest dictionary
    try:
        more = [json.dumps(e) for e in _tombstoned_log("later").entries]
        assert Replica(reopened).apply(more).applied == 2
        last = _execute(str(path), [("SELECT operation FROM plc_ops ORDER BY seq DESC", ())])
        assert int.from_bytes(last[0][0][:2], "big") == 2
    finally:
        reopened.close()


def test_a_packed_op_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    path = tmp_path / "mirror.db"
    store = SqliteMirrorStore(path)
    try:
        Replica(store).apply(list(export_lines(3, 1)))
        seqs = [row[0] for row in _execute(str(path), [("SELECT seq FROM plc_ops", ())])]
        _execute(
            str(path),
            [
                (
                    "UPDATE plc_ops SET operation = ? WHERE seq = ?",
                    (b"\x00\x09" + b"x" * 40, seqs[0]),
                ),
                ("UPDATE plc_ops SET operation = ? WHERE seq = ?", (b"\x00\x00garbage", seqs[1])),
            ],
        )
        with pytest.raises(UnreadableOperation, match="dictionary 9, unknown"):
            store.export(after_seq=0, after_time=None, count=1)
        with pytest.raises(UnreadableOperation, match="unreadable packed operation"):
            store.export(after_seq=seqs[0], after_time=None, count=1)
        assert len(store.export(after_seq=seqs[1], after_time=None, count=5)) == 1  # the rest
    finally:
        store.close()


# Schema 1, as mirrors were written before ops were packed: a fixture of the older format.
_SCHEMA_1 = [
    "CREATE TABLE plc_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE plc_ops (seq BIGINT PRIMARY KEY, did TEXT NOT NULL, cid TEXT NOT NULL, "
    "created_at TEXT NOT NULL, entry TEXT NOT NULL, signer SMALLINT NOT NULL, "
    "nullified SMALLINT NOT NULL DEFAULT 0)",
    "CREATE UNIQUE INDEX plc_ops_did ON plc_ops (did, cid)",
    "CREATE INDEX plc_ops_created ON plc_ops (created_at)",
    "CREATE TABLE plc_dids (did TEXT PRIMARY KEY, state TEXT, updated_at TEXT NOT NULL)",
]


def _schema_1_copy(source: SqlMirrorStore, where: str) -> None:
    """`source`'s mirror written in schema 1: each op as its export line, each DID's state."""
    statements: list[tuple[str, tuple[Any, ...]]] = [(text, ()) for text in _SCHEMA_1]
    statements.append(("INSERT INTO plc_meta VALUES ('schema_version', '1')", ()))
    statements.append(("INSERT INTO plc_meta VALUES ('cursor', '120')", ()))
    ops = source.export(after_seq=0, after_time=None, count=10_000)
    for op in ops:
        line = {"did": op.did, "operation": op.operation, "cid": op.cid, "nullified": False}
        line["createdAt"] = op.created_at
        row = (
            op.seq,
            op.did,
            op.cid,
            op.created_at,
            json.dumps(line),
            op.signer,
            int(op.nullified),
        )
        statements.append(("INSERT INTO plc_ops VALUES (?, ?, ?, ?, ?, ?, ?)", row))
    for did in {op.did for op in ops}:
        current = source.in_force(did)
        assert current is not None
        state = current.state(did)
        text = None if state is None else json.dumps(state_data(did, state))
        statements.append(("INSERT INTO plc_dids VALUES (?, ?, ?)", (did, text, "then")))
    _execute(where, statements)


def test_a_schema_1_mirror_is_moved_in_place_and_answers_as_before(
    where: str, tmp_path: Path
) -> None:
    reference = SqliteMirrorStore(tmp_path / "reference.db")
    try:
        assert Replica(reference).apply(_lines()).applied == 122
        expected = _served(reference)
        _schema_1_copy(reference, where)
    finally:
        reference.close()
    assert expected["counts"]["tombstoned"] == 1
    moved = _open(where)
    try:
        assert moved.meta()["schema_version"] == str(SCHEMA_VERSION)
        assert moved.meta()["cursor"] == "120"  # the cursor comes along: no op fetched again
        assert _served(moved) == expected
        assert _execute(where, [("SELECT COUNT(*) FROM plc_ops", ())])[0][0] == 122
        with pytest.raises((sqlite3.OperationalError, psycopg.errors.UndefinedTable)):
            _execute(where, [("SELECT COUNT(*) FROM plc_ops_1", ())])  # the old tables gone
        more = [json.dumps(e) for e in _tombstoned_log("later").entries]
        assert Replica(moved).apply(more).applied == 2  # and the mirror goes on
        assert moved.counts()["tombstoned"] == 2
    finally:
        moved.close()


def test_a_schema_1_mirror_that_cannot_be_moved_is_left_as_it_was(where: str) -> None:
    statements: list[tuple[str, tuple[Any, ...]]] = [(text, ()) for text in _SCHEMA_1]
    statements += [
        ("INSERT INTO plc_meta VALUES ('schema_version', '1')", ()),
        ("INSERT INTO plc_ops VALUES (1, 'did:plc:x', 'c', 't', '{not json', 0, 0)", ()),
    ]
    _execute(where, statements)
    with pytest.raises(SchemaMismatch, match=r"op 1 is not an export line"):
        _open(where)
    assert _execute(where, [("SELECT entry FROM plc_ops", ())]) == [("{not json",)]
    version = "SELECT value FROM plc_meta WHERE name = 'schema_version'"
    assert _execute(where, [(version, ())]) == [("1",)]


def test_a_mirror_of_a_later_schema_is_refused(where: str) -> None:
    _open(where).close()
    _execute(where, [("UPDATE plc_meta SET value = '3' WHERE name = 'schema_version'", ())])
    with pytest.raises(SchemaMismatch, match="schema 3, not 2"):
        _open(where)
