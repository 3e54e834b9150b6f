"""Where the mirror keeps the directory: verified operations (packed: `mirror.packing`),
each DID's op in force, what it refused and what it flagged. SQLite by default (one file,
WAL: the follower writes while the API reads), PostgreSQL for operators who outgrow one
machine (several daemons read one database; one writes, held by an advisory lock).

One schema (`mirror.schema`), one set of statements: the two backends differ only in how
they connect, in the placeholder (`?` against `%s`) and in a few words of DDL.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TextIO, TypeVar

import zstandard

from atwhois.foundation.sql import SQLITE, in_chunks, marks
from atwhois.resolver.errors import AtwhoisError

from .packing import TRAIN_SAMPLE, Packer, train
from .records import ENTRY_CAP, BadLine, Batch, InForce, LogRewrite, Rejection, StoredOp
from .schema import pack_seqs, prepare, unpack_seqs

TRAIN_FIRST = TRAIN_SAMPLE  # ops packed without a dictionary before the first is trained
TRAIN_EVERY = 1_000_000  # ops between two dictionaries: the directory's ops change shape
BAD_LINES_KEPT = 10_000  # the newest lines that did not parse, kept as evidence
BAD_LINES_SLACK = 1_000  # kept past that between two prunes (a prune walks the whole table)


class SqlMirrorStore:
    """The statements, over a DB-API connection for writing and one for reading."""

    name = "sql"
    location = ""  # what `open_mirror_store` opens again (a worker process does)
    writable = True  # False: another process writes; this one reads
    _writer_lock: TextIO | None = None  # SQLite's: held open while this process writes
    _dialect = SQLITE

    def __init__(self, writer: Any, reader: Any) -> None:
        self._writer = writer
        self._reader = reader
        # The reader is shared by the API and the follower's thread; writes have their own
        # connection and lock, so that reads go on (WAL, MVCC) while a page is written.
        self._read_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._held = _Held(self._read_lock, reader)
        self._packer = Packer(self._dictionary)
        self._trained_at = 0  # the seq the newest dictionary was trained at
        if self.writable:
            self._prepare()
            newest = self._rows(
                "SELECT number, trained_at, data FROM plc_dictionaries ORDER BY number DESC LIMIT 1"
            )
            if newest:
                number, self._trained_at, data = newest[0]
                self._packer.use(number, bytes(data))
        self._next_seq = 1 + self.head()
        self._bad_since_prune = BAD_LINES_SLACK  # the first write with bad lines prunes

    def _sql(self, text: str) -> str:
        return self._dialect.sql(text)

    def _rows(self, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._reading() as connection:
            cursor = connection.cursor()
            cursor.execute(self._sql(text), params)
            return list(cursor.fetchall())

    def _reading(self) -> contextlib.AbstractContextManager[Any]:
        """A connection to read on, this thread's alone until the block ends."""
        return self._held

    def _one(self, text: str, params: Sequence[Any] = ()) -> Any:
        rows = self._rows(text, params)
        return rows[0][0] if rows else None

    def _dictionary(self, number: int) -> bytes | None:
        data = self._one("SELECT data FROM plc_dictionaries WHERE number = ?", (number,))
        return None if data is None else bytes(data)

    def _prepare(self) -> None:
        """The schema made, or moved from an earlier one: all of it, or (when it fails) the
        mirror left as it was."""
        with self._transaction() as cursor:
            prepare(
                cursor,
                self._dialect,
                self.location or "the database",
                pack=self._packer.pack,
                before_chunk=self._before_moved_chunk,
                streaming_cursor=self._streaming_cursor,
            )

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
        """A cursor of one write transaction, committed when the block ends; on any failure
        rolled back (and raised), the connection left ready for the next."""
        cursor = self._writer.cursor()
        self._begin(cursor)
        try:
            yield cursor
        except BaseException:
            self._writer.rollback()
            raise
        self._writer.commit()

    def _before_moved_chunk(self, cursor: Any, first: int) -> None:
        self._next_seq = first
        self._maybe_train(cursor)

    # --- reading -------------------------------------------------------------------------

    def meta(self) -> dict[str, str]:
        return {name: value for name, value in self._rows("SELECT name, value FROM plc_meta")}

    def known(self, dids: Iterable[str]) -> set[tuple[str, str]]:
        """Which (did, cid) of these DIDs are kept already, verified: a page served again
        is skipped, not applied twice. Refused lines are not among them: what a line claims
        is no reason to skip the genuine op when it comes."""
        return {(op[0], op[1]) for op in self._ops_of(dids, "did, cid")}

    def refusals(self, dids: Iterable[str]) -> dict[tuple[str, str], str]:
        """The lines of these DIDs kept as refused, by (did, cid), as kept (capped): a line
        served again as it was is known evidence, not a new refusal."""
        found: dict[tuple[str, str], str] = {}
        for chunk in _chunks(dids):
            rows = self._rows(
                f"SELECT did, cid, entry FROM plc_rejected WHERE did IN ({marks(chunk)})", chunk
            )
            found.update(((did, cid), entry) for did, cid, entry in rows)
        return found

    def dids_after(self, after: str, count: int) -> list[str]:
        """Up to `count` DIDs the mirror knows after `after` ("" from the first), in order."""
        rows = self._rows(
            "SELECT did FROM plc_dids WHERE did > ? ORDER BY did LIMIT ?", (after, count)
        )
        return [row[0] for row in rows]

    def logs(self, dids: Iterable[str]) -> dict[str, list[StoredOp]]:
        """The verified ops of these DIDs, in order."""
        logs: dict[str, list[StoredOp]] = {}
        for row in self._ops_of(dids, _COLUMNS):
            logs.setdefault(row[1], []).append(self._op(row))
        return logs

    def log(self, did: str) -> list[StoredOp]:
        return self.logs([did]).get(did, [])

    def _ops_of(self, dids: Iterable[str], columns: str) -> list[tuple[Any, ...]]:
        """`columns` of every op of these DIDs, in seq order."""
        seqs: list[int] = []
        for chunk in _chunks(dids):
            rows = self._rows(f"SELECT seqs FROM plc_dids WHERE did IN ({marks(chunk)})", chunk)
            for (packed,) in rows:
                seqs += unpack_seqs(packed)
        found: list[tuple[Any, ...]] = []
        for some in in_chunks(sorted(seqs)):
            found += self._rows(
                f"SELECT {columns} FROM plc_ops WHERE seq IN ({marks(some)}) ORDER BY seq", some
            )
        return found

    def in_force(self, did: str) -> InForce | None:
        """The DID's op in force (None: the mirror does not know the DID). Its row alone:
        the op is read when asked for (a document already made for its seq needs none)."""
        rows = self._rows("SELECT head, tombstoned FROM plc_dids WHERE did = ?", (did,))
        if not rows:
            return None
        head, tombstoned = rows[0]
        return InForce(int(head), bool(tombstoned), self._operation_at)

    def _operation_at(self, seq: int) -> bytes:
        """The op stored at `seq`, unpacked (an op's bytes never change once stored)."""
        packed = self._one("SELECT operation FROM plc_ops WHERE seq = ?", (seq,))
        if packed is None:
            raise MirrorCorrupt(f"a DID's op in force is seq {seq}, which the mirror lacks")
        return self._packer.unpack(bytes(packed))

    def export(
        self, *, after_seq: int | None, after_time: str | None, count: int
    ) -> list[StoredOp]:
        if after_seq is not None:
            rows = self._rows(
                f"SELECT {_COLUMNS} FROM plc_ops WHERE seq > ? ORDER BY seq LIMIT ?",
                (after_seq, count),
            )
        else:
            rows = self._rows(
                f"SELECT {_COLUMNS} FROM plc_ops WHERE created_at > ? "
                "ORDER BY created_at, seq LIMIT ?",
                (after_time or "", count),
            )
        return [self._op(row) for row in rows]

    def _op(self, row: Sequence[Any]) -> StoredOp:
        operation = self._packer.unpack(bytes(row[4])).decode()
        return StoredOp(int(row[0]), row[1], row[2], row[3], operation, int(row[5]), bool(row[6]))

    def head(self) -> int:
        """The newest `seq` stored (0: none)."""
        return int(self._one("SELECT COALESCE(MAX(seq), 0) FROM plc_ops") or 0)

    def rejected(self, limit: int, did: str | None = None) -> list[Rejection]:
        """The refusals kept, the newest first; of one DID when given."""
        where, params = ("WHERE did = ? ", (did, limit)) if did else ("", (limit,))
        rows = self._rows(
            "SELECT did, cid, created_at, rule, message, entry, seen_at FROM plc_rejected "
            f"{where}ORDER BY seen_at DESC, created_at DESC LIMIT ?",
            params,
        )
        return [Rejection(*row) for row in rows]

    def bad_lines(self, limit: int) -> list[BadLine]:
        rows = self._rows(
            "SELECT digest, reason, entry, seen_at FROM plc_bad_lines "
            "ORDER BY seen_at DESC, digest LIMIT ?",
            (limit,),
        )
        return [BadLine(*row) for row in rows]

    def flags(self, limit: int) -> list[tuple[str, str, str]]:
        rows = self._rows(
            "SELECT did, reason, since FROM plc_flags ORDER BY since DESC LIMIT ?", (limit,)
        )
        return [(row[0], row[1], row[2]) for row in rows]

    def counts(self) -> dict[str, int]:
        return {
            "ops": int(self._one("SELECT COUNT(*) FROM plc_ops") or 0),
            "dids": int(self._one("SELECT COUNT(*) FROM plc_dids") or 0),
            "tombstoned": int(self._one("SELECT COUNT(*) FROM plc_dids WHERE tombstoned = 1") or 0),
            "rejected": int(self._one("SELECT COUNT(*) FROM plc_rejected") or 0),
            "flagged": int(self._one("SELECT COUNT(*) FROM plc_flags") or 0),
            "bad_lines": int(self._one("SELECT COUNT(*) FROM plc_bad_lines") or 0),
        }

    # --- writing -------------------------------------------------------------------------

    def write(self, batch: Batch) -> None:
        """One transaction: all of `batch`, or (on any failure, raised) none of it."""
        with self._write_lock:
            with self._transaction() as cursor:
                self._maybe_train(cursor)
                self._write_batch(cursor, batch)
            self._next_seq += len(batch.ops)

    def _maybe_train(self, cursor: Any) -> None:
        """A new dictionary, trained on the newest ops, when the last is far enough behind
        (the first once there are enough ops to train on)."""
        stored = self._next_seq - 1
        due = TRAIN_FIRST if self._packer.number == 0 else TRAIN_EVERY
        if stored - self._trained_at < due:
            return
        self._trained_at = stored  # tried once per period, whatever comes of it
        cursor.execute(
            self._sql("SELECT operation FROM plc_ops ORDER BY seq DESC LIMIT ?"), (TRAIN_SAMPLE,)
        )
        samples = [self._packer.unpack(bytes(row[0])) for row in cursor.fetchall()]
        try:
            data = train(samples)
        except zstandard.ZstdError:  # too few, or too alike to learn from: packed as they are
            return
        number = self._packer.number + 1
        cursor.execute(
            self._sql("INSERT INTO plc_dictionaries VALUES (?, ?, ?)"), (number, stored, data)
        )
        self._packer.use(number, data)

    def _write_batch(self, cursor: Any, batch: Batch) -> None:
        sql = self._sql
        first = self._next_seq
        pack = self._packer.pack
        cursor.executemany(
            sql(
                "INSERT INTO plc_ops (seq, did, cid, created_at, operation, signer) "
                "VALUES (?, ?, ?, ?, ?, ?)"
            ),
            [
                (first + i, did, cid, created, pack(operation), signer)
                for i, (did, cid, created, operation, signer) in enumerate(batch.ops)
            ],
        )
        written = {(op[0], op[1]): first + i for i, op in enumerate(batch.ops)}
        new: dict[str, list[int]] = {}
        for (did, _), seq in written.items():
            new.setdefault(did, []).append(seq)
        # The seqs kept of the DIDs this page changes (their rows are rewritten with the new
        # ones) and of those whose ops it nullifies (such an op may be on an earlier page)
        seqs: dict[str, list[int]] = {}
        for chunk in _chunks([*batch.heads, *(did for did, _ in batch.nullified)]):
            cursor.execute(
                sql(f"SELECT did, seqs FROM plc_dids WHERE did IN ({marks(chunk)})"), chunk
            )
            seqs.update((did, unpack_seqs(packed)) for did, packed in cursor.fetchall())

        def seq_of(did: str, cid: str) -> int:
            seq = written.get((did, cid))
            if seq is not None:
                return seq
            for some in in_chunks(seqs.get(did, [])):  # a DID may have more ops than one IN holds
                cursor.execute(
                    sql(f"SELECT seq FROM plc_ops WHERE seq IN ({marks(some)}) AND cid = ?"),
                    [*some, cid],
                )
                row = cursor.fetchone()
                if row is not None:
                    return int(row[0])
            raise MirrorCorrupt(f"{did}: op {cid} is not among the ops kept of it")

        cursor.executemany(
            sql("UPDATE plc_ops SET nullified = 1 WHERE seq = ?"),
            [(seq_of(did, cid),) for did, cid in batch.nullified],
        )
        cursor.executemany(
            sql(
                "INSERT INTO plc_dids (did, head, tombstoned, seqs) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (did) DO UPDATE SET head = excluded.head, "
                "tombstoned = excluded.tombstoned, seqs = excluded.seqs"
            ),
            [
                (
                    did,
                    seq_of(did, head.cid),
                    int(head.tombstoned),
                    pack_seqs([*seqs.get(did, []), *new.get(did, [])]),
                )
                for did, head in batch.heads.items()
            ],
        )
        cursor.executemany(
            sql(
                "INSERT INTO plc_rejected VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (did, cid) DO NOTHING"
            ),
            [_rejection_row(r) for r in batch.rejected],
        )
        cursor.executemany(
            sql(
                "INSERT INTO plc_flags VALUES (?, ?, ?) ON CONFLICT (did) DO UPDATE "
                "SET reason = excluded.reason"
            ),
            [(did, reason, since) for did, (reason, since) in batch.flags.items()],
        )
        if batch.bad_lines:
            cursor.executemany(
                sql(
                    "INSERT INTO plc_bad_lines VALUES (?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING"
                ),
                [(b.digest, b.reason, b.entry, b.seen_at) for b in batch.bad_lines],
            )
            self._bad_since_prune += len(batch.bad_lines)
            if self._bad_since_prune >= BAD_LINES_SLACK:
                cursor.execute(
                    sql(
                        "DELETE FROM plc_bad_lines WHERE digest IN (SELECT digest FROM "
                        "plc_bad_lines ORDER BY seen_at DESC, digest "
                        "LIMIT 1000000000 OFFSET ?)"
                    ),
                    (BAD_LINES_KEPT,),
                )
                self._bad_since_prune = 0
        cursor.executemany(
            sql(
                "INSERT INTO plc_meta VALUES (?, ?) ON CONFLICT (name) DO UPDATE "
                "SET value = excluded.value"
            ),
            list(batch.meta.items()),
        )

    def rewrite_log(self, did: str, log: LogRewrite) -> None:
        """One transaction: `did`'s ops as a replay without some of them left them (P-CMP-2):
        the dropped deleted, kept among the refused; its op in force (or its row gone)."""
        sql = self._sql
        with self._write_lock, self._transaction() as cursor:
            cursor.executemany(
                sql("DELETE FROM plc_ops WHERE seq = ?"), [(seq,) for seq in log.dropped]
            )
            cursor.executemany(
                sql("UPDATE plc_ops SET nullified = ? WHERE seq = ?"),
                [(int(nullified), seq) for seq, nullified in log.kept],
            )
            if log.head is None:
                cursor.execute(sql("DELETE FROM plc_dids WHERE did = ?"), (did,))
            else:
                seqs = pack_seqs([seq for seq, _ in log.kept])
                cursor.execute(
                    sql("UPDATE plc_dids SET head = ?, tombstoned = ?, seqs = ? WHERE did = ?"),
                    (log.head, int(log.tombstoned), seqs, did),
                )
            cursor.executemany(
                sql(
                    "INSERT INTO plc_rejected VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (did, cid) "
                    "DO UPDATE SET rule = excluded.rule, message = excluded.message, "
                    "seen_at = excluded.seen_at"
                ),
                [_rejection_row(r) for r in log.refused],
            )

    def flag(self, did: str, reason: str, since: str) -> None:
        self.write(Batch(flags={did: (reason, since)}))

    def _begin(self, cursor: Any) -> None:
        """Opens the write transaction (DB-API drivers open one implicitly)."""

    def _streaming_cursor(self) -> Any:
        """A cursor of the writer's transaction that reads its rows as they are fetched."""
        return self._writer.cursor()

    def close(self) -> None:
        self._reader.close()
        self._writer.close()
        if self._writer_lock is not None:
            self._writer_lock.close()


_COLUMNS = "seq, did, cid, created_at, operation, signer, nullified"
T = TypeVar("T")


async def read_from(store: SqlMirrorStore, read: Callable[[], T]) -> T:
    """A read of the store from the event loop: SQLite's are quick and run on the loop; a
    network database's go to a thread, not to hold the loop for a round trip."""
    if store.name == "sqlite":
        return read()
    return await asyncio.to_thread(read)


def _rejection_row(r: Rejection) -> tuple[str, ...]:  # its entry capped
    return (r.did, r.cid, r.created_at, r.rule, r.message, r.entry[:ENTRY_CAP], r.seen_at)


def _chunks(dids: Iterable[str]) -> Iterator[list[str]]:
    """Each DID once, in order (neighbouring keys, neighbouring pages), in chunks."""
    return in_chunks(sorted(set(dids)))


class _Held:
    """A connection held under a lock for a block (a class, not a generator-made context
    manager: a read of the API is a few microseconds, and making a generator for each
    one was a visible share of them)."""

    __slots__ = ("connection", "lock")

    def __init__(self, lock: threading.Lock, connection: Any) -> None:
        self.lock, self.connection = lock, connection

    def __enter__(self) -> Any:
        self.lock.acquire()
        return self.connection

    def __exit__(self, *_: object) -> None:
        self.lock.release()


class MirrorCorrupt(AtwhoisError, ValueError):
    """The mirror's tables disagree with each other (edited by hand, or a broken disk)."""
