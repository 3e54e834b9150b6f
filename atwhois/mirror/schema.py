"""The mirror's tables, as each backend spells them, and moving a mirror of an earlier
schema to this one.

Schema 2 keeps an operation packed (`mirror.packing`) in a table keyed by its seq, and each
DID's row with its op in force and the seqs of its ops. Schema 1 kept each export line
whole, an index of the ops by DID, and each DID's state as JSON: about 1,600 bytes an
operation against about 420 (`python -m bench mirror --scale`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from atwhois.foundation.sql import Dialect
from atwhois.resolver.errors import SchemaMismatch

SCHEMA_VERSION = 2  # 1: the export line kept whole, the state's JSON kept per DID
# A DID's ops are found through its row (`seqs`: their seqs, in order), not through an
# index of plc_ops by DID: at tens of millions of ops an index keyed by a random DID costs
# a page written per op and ~50 bytes, and the DID's row is written anyway (its head).
# The backends' words differ (`foundation.sql.Dialect`): SQLite's seq is the table's own
# key (no second index of it), and a table keyed by its text keeps the key once.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS plc_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS plc_ops (
    seq {seq_key},
    did TEXT NOT NULL,
    cid TEXT NOT NULL,
    created_at TEXT NOT NULL,
    operation {blob} NOT NULL,
    signer SMALLINT NOT NULL,
    nullified SMALLINT NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS plc_ops_created ON plc_ops (created_at);
CREATE TABLE IF NOT EXISTS plc_dids (
    did TEXT PRIMARY KEY,
    head BIGINT NOT NULL,
    tombstoned SMALLINT NOT NULL,
    seqs {blob} NOT NULL
){keyed};
CREATE TABLE IF NOT EXISTS plc_dictionaries (
    number INTEGER PRIMARY KEY,
    trained_at BIGINT NOT NULL,
    data {blob} NOT NULL
);
CREATE TABLE IF NOT EXISTS plc_rejected (
    did TEXT NOT NULL,
    cid TEXT NOT NULL,
    created_at TEXT NOT NULL,
    rule TEXT NOT NULL,
    message TEXT NOT NULL,
    entry TEXT NOT NULL,
    seen_at TEXT NOT NULL,
    PRIMARY KEY (did, cid)
);
CREATE TABLE IF NOT EXISTS plc_bad_lines (
    digest TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    entry TEXT NOT NULL,
    seen_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS plc_bad_lines_seen ON plc_bad_lines (seen_at, digest);
CREATE TABLE IF NOT EXISTS plc_flags (
    did TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    since TEXT NOT NULL
);
"""
# Schema 1's tables, renamed aside while a mirror of it is moved to this schema (its
# indexes dropped first: their names are taken again).
_SCHEMA_1_ASIDE = [
    "DROP INDEX IF EXISTS plc_ops_did",
    "DROP INDEX IF EXISTS plc_ops_created",
    "ALTER TABLE plc_ops RENAME TO plc_ops_1",
    "ALTER TABLE plc_dids RENAME TO plc_dids_1",
]
_COPIED_AT_ONCE = 10_000  # schema 1's ops moved a chunk at a time (memory, not time)


def prepare(
    cursor: Any,
    dialect: Dialect,
    where: str,
    *,
    pack: Callable[[bytes], bytes],
    before_chunk: Callable[[Any, int], None],
    streaming_cursor: Callable[[], Any],
) -> None:
    """The schema made, or a mirror of schema 1 moved to it, in the caller's transaction.
    Moving packs each op with `pack`, calling `before_chunk(cursor, first seq)` before each
    chunk of them (the store trains its dictionaries there, as when it writes)."""
    version = _version(cursor, dialect)
    if version not in (None, 1, SCHEMA_VERSION):
        raise SchemaMismatch(f"{where}: a mirror of schema {version}, not {SCHEMA_VERSION}")
    if version == 1:
        for statement in _SCHEMA_1_ASIDE:
            cursor.execute(statement)
    for statement in dialect.ddl(_SCHEMA).split(";"):
        if statement.strip():
            cursor.execute(statement)
    if version == 1:
        _move_schema_1(cursor, dialect, pack, before_chunk, streaming_cursor)
    cursor.execute(
        dialect.sql(
            "INSERT INTO plc_meta VALUES ('schema_version', ?) ON CONFLICT (name) "
            "DO UPDATE SET value = excluded.value"
        ),
        (str(SCHEMA_VERSION),),
    )


def _version(cursor: Any, dialect: Dialect) -> int | None:
    """The schema of the mirror in this database (None: there is none yet)."""
    cursor.execute(dialect.sql(dialect.table_exists), ("plc_meta",))
    if cursor.fetchone() is None:
        return None
    cursor.execute("SELECT value FROM plc_meta WHERE name = 'schema_version'")
    row = cursor.fetchone()
    return None if row is None else int(row[0])


def _move_schema_1(
    cursor: Any,
    dialect: Dialect,
    pack: Callable[[bytes], bytes],
    before_chunk: Callable[[Any, int], None],
    streaming_cursor: Callable[[], Any],
) -> None:
    """Schema 1's ops into this schema's table, packed, a chunk at a time; each DID's op
    in force is its newest op not nullified (ops in force make one chain, in seq order)."""
    sql = dialect.sql
    after = 0
    while True:
        cursor.execute(
            sql(
                "SELECT seq, did, cid, created_at, entry, signer, nullified FROM plc_ops_1 "
                "WHERE seq > ? ORDER BY seq LIMIT ?"
            ),
            (after, _COPIED_AT_ONCE),
        )
        rows = cursor.fetchall()
        if not rows:
            break
        before_chunk(cursor, int(rows[0][0]))
        cursor.executemany(
            sql("INSERT INTO plc_ops VALUES (?, ?, ?, ?, ?, ?, ?)"),
            [
                (seq, did, cid, created, pack(_operation_of(seq, entry)), signer, gone)
                for seq, did, cid, created, entry, signer, gone in rows
            ],
        )
        after = int(rows[-1][0])
    cursor.execute("DROP TABLE plc_ops_1")
    # Each DID's row, from its ops read in DID order (through an index made for that)
    cursor.execute("CREATE INDEX plc_ops_moving ON plc_ops (did, seq)")
    reader = streaming_cursor()
    reader.execute(
        "SELECT o.did, o.seq, o.nullified, d.state IS NULL FROM plc_ops o "
        "JOIN plc_dids_1 d ON d.did = o.did ORDER BY o.did, o.seq"
    )
    insert = sql("INSERT INTO plc_dids VALUES (?, ?, ?, ?)")
    for did, rows in itertools.groupby(_fetched(reader), key=lambda row: row[0]):
        ops = list(rows)
        head = max(seq for _, seq, gone, _ in ops if not gone)  # the chain in force
        cursor.execute(insert, (did, head, int(ops[0][3]), pack_seqs([op[1] for op in ops])))
    reader.close()
    cursor.execute("DROP INDEX plc_ops_moving")
    cursor.execute("DROP TABLE plc_dids_1")


_SEQ_BYTES = 6  # seqs up to 2**48


def pack_seqs(seqs: Iterable[int]) -> bytes:
    return b"".join(seq.to_bytes(_SEQ_BYTES, "big") for seq in seqs)


def unpack_seqs(packed: bytes) -> list[int]:
    data = bytes(packed)
    return [
        int.from_bytes(data[i : i + _SEQ_BYTES], "big") for i in range(0, len(data), _SEQ_BYTES)
    ]


def _fetched(cursor: Any) -> Iterator[tuple[Any, ...]]:
    """A cursor's rows, a chunk at a time."""
    while rows := cursor.fetchmany(_COPIED_AT_ONCE):
        yield from rows


def _operation_of(seq: int, line: str) -> bytes:
    """The operation's JSON in a line schema 1 kept whole."""
    try:
        return orjson.dumps(orjson.loads(line)["operation"])
    except (orjson.JSONDecodeError, TypeError, KeyError):
        raise SchemaMismatch(
            f"a mirror of schema 1 cannot be moved to schema {SCHEMA_VERSION}: op {seq} "
            "is not an export line"
        ) from None
