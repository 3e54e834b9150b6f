"""The PLC mirror's core on synthetic exports, signed for real: every op verified before it
enters the state, refusals recorded with their rule, nullification worked out by the mirror,
pages applied once, the cursor kept with the data; on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import concurrent.futures
import copy
import datetime
import json
import sqlite3
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from atwhois.mirror import Follower, MirrorApi, MirrorFetcher, MirrorState, Replica, Upstream
from atwhois.mirror.backends import (
    READERS,
    PostgresMirrorStore,
    SqliteMirrorStore,
    WriterElsewhere,
    open_mirror_store,
)
from atwhois.mirror.follow import POKE_GAP
from atwhois.mirror.records import Batch, InForce, StoredOp
from atwhois.mirror.replica import KEPT_LISTED
from atwhois.mirror.store import MirrorCorrupt, SqlMirrorStore
from atwhois.mirror.upstream import next_cursor
from atwhois.resolver import Config, Outcome, Resolver
from atwhois.resolver.did import mirror_note, view_age
from atwhois.resolver.errors import UpstreamFailure
from atwhois.resolver.plc.export import route
from atwhois.resolver.response import MIRROR_HEADER, Response
from devnet.plc_ops import AuditLog, Key, log_entry, plc_operation
from devnet.postgres import scratch_database
from devnet.synthetic_plc import export_lines
from tests.support.waiting import until

T0 = datetime.datetime(2025, 3, 1, tzinfo=datetime.UTC)


@pytest.fixture
def pg_url() -> Iterator[str]:
    with scratch_database("atwhois_mirror") as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlMirrorStore]:
    if request.param == "sqlite":
        opened: SqlMirrorStore = SqliteMirrorStore(tmp_path / "mirror.db")
    else:
        opened = PostgresMirrorStore(request.getfixturevalue("pg_url"))
    yield opened
    opened.close()


def _api(store: SqlMirrorStore, profile: str = "directory") -> MirrorApi:
    state = MirrorState("https://upstream.example", caught_up_at=time.time())
    return MirrorApi(store, state, profile=profile)


def _get(api: MirrorApi, path: str) -> tuple[int, object]:
    reply = api.answer("GET", path, {})
    return reply.status, json.loads(reply.body)


def test_a_synthetic_export_is_verified_and_served(store: SqlMirrorStore) -> None:
    lines = list(export_lines(40, 3, recover_every=10))  # 4 DIDs recover: op 1 nullified
    replica = Replica(store)
    result = replica.apply(lines)
    assert (result.applied, result.rejected, result.duplicates) == (120, 0, 0)
    assert result.nullified == 4  # worked out by the mirror itself
    assert result.created == 40  # a genesis op for each DID
    counts = store.counts()
    assert counts == {
        "ops": 120,
        "dids": 40,
        "tombstoned": 0,
        "rejected": 0,
        "flagged": 0,
        "bad_lines": 0,
    }
    api = _api(store)
    recovered = json.loads(lines[0])["did"]  # DID 0 recovers (every 10th)
    status, audit = _get(api, f"/{recovered}/log/audit")
    assert status == 200 and isinstance(audit, list)
    assert [entry["nullified"] for entry in audit] == [False, True, False]
    status, log = _get(api, f"/{recovered}/log")
    assert status == 200 and isinstance(log, list) and len(log) == 2
    status, document = _get(api, f"/{recovered}")
    assert status == 200 and isinstance(document, dict)
    assert document["alsoKnownAs"] == ["at://user0-v2.test"]
    assert document["verificationMethod"][0]["type"] == "Multikey"
    assert document["@context"][-1] == "https://w3id.org/security/suites/secp256k1-2019/v1"


def test_a_page_served_twice_changes_nothing_and_a_restart_rebuilds(
    store: SqlMirrorStore,
) -> None:
    lines = list(export_lines(30, 4, recover_every=5))
    first, second = lines[:60], lines[60:]
    Replica(store).apply(first)
    again = Replica(store)  # a restart: nothing in memory
    replayed = again.apply(first)
    assert (replayed.applied, replayed.duplicates, replayed.rejected) == (0, 60, 0)
    rest = again.apply(second)  # every op of the second half needs its DID's replay
    assert (rest.applied, rest.rejected) == (60, 0)
    assert again.rebuilt == 30  # each DID rebuilt once, from its stored verified ops
    assert replayed.rebuilt + rest.rebuilt == 30  # and each page says how many it rebuilt
    assert store.counts()["ops"] == 120


@pytest.mark.parametrize("listed", [KEPT_LISTED, 1])
def test_a_page_served_again_to_replays_in_memory_is_kept_already(
    store: SqlMirrorStore, monkeypatch: pytest.MonkeyPatch, listed: int
) -> None:
    """A page of ten DIDs' ops, each DID in every page: served again after the others, its
    ops are not those of the page before (which the store may not hold yet). The DIDs
    stayed in memory: what is kept of them is known there (listed), or read from the
    store (past `listed` ops: they have 4 each, against a limit of 1)."""
    monkeypatch.setattr("atwhois.mirror.replica.KEPT_LISTED", listed)
    lines = list(export_lines(10, 5, recover_every=3))
    replica = Replica(store)
    for start in range(0, 40, 10):
        replica.apply(lines[start : start + 10])
    for start in range(0, 40, 10):
        again = replica.apply(lines[start : start + 10])
        assert (again.applied, again.duplicates, again.rejected) == (0, 10, 0)
    assert replica.rebuilt == 0
    restarted = Replica(store)  # the DIDs rebuilt from the store, in memory since
    rest = restarted.apply(lines[40:])
    assert (rest.applied, rest.rebuilt, restarted.rebuilt) == (10, 10, 10)
    for start in range(0, 50, 10):
        again = restarted.apply(lines[start : start + 10])
        assert (again.applied, again.duplicates, again.rejected) == (0, 10, 0)
    assert store.counts()["ops"] == 50


def test_evicted_replays_are_rebuilt_not_trusted(store: SqlMirrorStore) -> None:
    """With room for one replay in memory (and the two pages in hand) most DIDs are rebuilt
    from the store when they come back, and the verdicts are those of a mirror that kept
    them all."""
    lines = list(export_lines(30, 3, recover_every=4))  # 8 DIDs recover
    tight = Replica(store, max_replays=1)
    results = [tight.apply(lines[i : i + 6]) for i in range(0, len(lines), 6)]
    assert sum(r.rejected for r in results) == 0
    assert sum(r.applied for r in results) == 90
    assert sum(r.nullified for r in results) == 8
    assert tight.rebuilt >= 30


def _forged_world() -> tuple[AuditLog, list[str]]:
    """A DID with three ops; op 1 as the upstream serves it has a field changed after
    signing (its cid no longer matches), op 2 builds on the real op 1."""
    keys = [Key("forge/0"), Key("forge/1")]
    log = AuditLog.plain(keys, T0)
    honest = log.update(log.head, keys[0], T0 + datetime.timedelta(hours=1), handle="one.test")
    log.update(honest, keys[0], T0 + datetime.timedelta(hours=2), handle="two.test")
    lines = [json.dumps(entry) for entry in log.entries]
    tampered = copy.deepcopy(log.entries[1])
    tampered["operation"]["alsoKnownAs"] = ["at://mallory.test"]
    lines[1] = json.dumps(tampered)
    return log, lines


def test_a_tampered_op_is_refused_reported_and_the_did_frozen(store: SqlMirrorStore) -> None:
    log, lines = _forged_world()
    result = Replica(store).apply(lines)
    assert (result.applied, result.rejected) == (1, 2)
    assert result.by_rule == {"P-CID-1": 1, "P-NULL-3": 1}  # and what was built on it
    refused = {r.cid: r for r in store.rejected(10)}
    assert refused[log.entries[1]["cid"]].rule == "P-CID-1"
    assert "mallory" in refused[log.entries[1]["cid"]].entry  # the evidence, as served
    assert refused[log.entries[2]["cid"]].rule == "P-NULL-3"
    flags = store.flags(10)
    assert [(did, "P-CID-1" in reason) for did, reason, _ in flags] == [(log.did, True)]
    status, document = _get(_api(store), f"/{log.did}")
    assert status == 200 and isinstance(document, dict)
    assert document["alsoKnownAs"] == ["at://x.test"]  # the last verified state


def test_a_forged_signature_names_its_rule(store: SqlMirrorStore) -> None:
    keys, stranger = [Key("sig/0")], Key("sig/stranger")
    log = AuditLog.plain(keys, T0)
    forged = stranger.sign(plc_operation(log.head, keys, ["at://stolen.test"]))
    entry = log_entry(log.did, forged, T0 + datetime.timedelta(minutes=5))
    result = Replica(store).apply([json.dumps(log.entries[0]), json.dumps(entry)])
    assert result.by_rule == {"P-SIG-5": 1}


def test_tombstones_follow_the_profiles(store: SqlMirrorStore) -> None:
    """P-API-1: a tombstoned DID is 410 as the directory answers, 404 as the reference."""
    key = Key("tomb/0")
    log = AuditLog.plain([key], T0)
    log.append(key.sign({"type": "plc_tombstone", "prev": log.head}), T0 + datetime.timedelta(1))
    Replica(store).apply([json.dumps(e) for e in log.entries])
    directory, reference = _api(store, "directory"), _api(store, "reference")
    for api, status in ((directory, 410), (reference, 404)):
        for path in (f"/{log.did}", f"/{log.did}/data"):
            assert _get(api, path) == (status, {"message": f"DID not available: {log.did}"})
        code, last = _get(api, f"/{log.did}/log/last")
        assert code == 200 and isinstance(last, dict) and last["type"] == "plc_tombstone"
        code, audit = _get(api, f"/{log.did}/log/audit")
        assert code == 200 and isinstance(audit, list) and len(audit) == 2
    unknown = "did:plc:" + "a" * 24
    assert _get(directory, f"/{unknown}") == (404, {"message": f"DID not registered: {unknown}"})
    assert store.counts()["tombstoned"] == 1


def test_writes_are_refused_naming_the_upstream(store: SqlMirrorStore) -> None:
    did = "did:plc:" + "b" * 24
    reply = _api(store).answer("POST", f"/{did}", {})
    assert reply.status == 405 and reply.headers["Allow"] == "GET, HEAD"
    assert f"https://upstream.example/{did}" in json.loads(reply.body)["message"]


def test_the_export_pages_in_both_formats(store: SqlMirrorStore) -> None:
    lines = list(export_lines(10, 2))
    Replica(store).apply(lines)
    api = _api(store)
    seq = api.answer("GET", "/export", {"after": "0", "count": "7"})
    first = [json.loads(line) for line in seq.body.splitlines()]
    assert [e["seq"] for e in first] == list(range(1, 8))
    assert first[0]["type"] == "sequenced_op" and "nullified" not in first[0]
    rest = api.answer("GET", "/export", {"after": "7"})
    assert len(rest.body.splitlines()) == 13
    legacy = api.answer("GET", "/export", {"after": json.loads(lines[4])["createdAt"]})
    got = [json.loads(line) for line in legacy.body.splitlines()]
    assert [e["cid"] for e in got] == [json.loads(line)["cid"] for line in lines[5:]]
    assert set(got[0]) == {"did", "operation", "cid", "nullified", "createdAt"}
    for bad in ({"count": "0"}, {"count": "x"}, {"after": "yesterday"}):
        assert api.answer("GET", "/export", bad).status == 400


def test_the_legacy_cursor_steps_back_a_millisecond_to_lose_no_tie() -> None:
    def line(created: str, **more: object) -> bytes:
        return json.dumps({"did": "x", "createdAt": created, **more}).encode()

    page = [line("2025-01-01T00:00:00.100Z"), line("2025-01-01T00:00:00.500Z")]
    assert next_cursor(page) == ("2025-01-01T00:00:00.499Z", "2025-01-01T00:00:00.500Z")
    # a whole page in one millisecond: step past it, or the same page comes back for ever
    same = [line("2025-01-01T00:00:00.500Z")] * 3
    assert next_cursor(same)[0] == "2025-01-01T00:00:00.500Z"
    sequenced = [line("2025-01-01T00:00:00.500Z", seq=41)]
    assert next_cursor(sequenced)[0] == "41"


def test_unreadable_lines_are_counted_not_applied(store: SqlMirrorStore) -> None:
    lines = list(export_lines(3, 1))
    result = Replica(store).apply(["{not json", '{"did": "did:web:x"}', *lines, "[]"])
    assert (result.applied, result.bad_lines) == (3, 3)
    assert result.by_rule["§12"] == 3


def test_an_op_in_force_is_read_only_when_asked_for_and_its_loss_is_named(
    tmp_path: Path,
) -> None:
    store = SqliteMirrorStore(tmp_path / "m.db")
    try:
        Replica(store).apply(list(export_lines(2, 2)))
        did = json.loads(next(export_lines(2, 2)))["did"]
        current = store.in_force(did)
        assert current is not None and json.loads(current.operation_json)["type"]
        with sqlite3.connect(tmp_path / "m.db") as editor:  # the table edited by hand
            editor.execute("DELETE FROM plc_ops WHERE seq = ?", (current.seq,))
        lost = store.in_force(did)
        assert lost is not None and lost.seq == current.seq  # the DID's row alone is read
        with pytest.raises(MirrorCorrupt, match=f"seq {current.seq}"):
            lost.state(did)
    finally:
        store.close()


def test_postgresql_readers_share_one_writer(pg_url: str) -> None:
    writer = PostgresMirrorStore(pg_url)
    try:
        Replica(writer).apply(list(export_lines(5, 2)))
        with pytest.raises(WriterElsewhere, match="another mirror process is writing"):
            PostgresMirrorStore(pg_url)
        reader = open_mirror_store(pg_url)  # the writer is elsewhere: a reader
        try:
            assert not reader.writable and MirrorState.of("u", reader).role == "reader"
            assert reader.counts()["ops"] == 10
            did = json.loads(next(export_lines(5, 2)))["did"]
            current = reader.in_force(did)
            assert current is not None and current.state(did) is not None
        finally:
            reader.close()
    finally:
        writer.close()


def test_postgresql_reads_run_on_several_connections_and_outlive_a_lost_one(pg_url: str) -> None:
    """The read API's reads run in threads, each a round trip: they share a few readers,
    not one (which held them to one at a time), and a reader the server dropped is
    replaced, not handed out again."""
    import psycopg

    store = PostgresMirrorStore(pg_url)
    try:
        ask = "SELECT pg_backend_pid(), pg_sleep(0.2)"
        with concurrent.futures.ThreadPoolExecutor(READERS * 2) as pool:
            pids = {row[0][0] for row in pool.map(lambda _: store._rows(ask), range(READERS * 2))}
        assert 1 < len(pids) <= READERS
        with psycopg.connect(pg_url, autocommit=True) as admin:
            for pid in pids:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        failed = 0
        for _ in range(READERS + 2):  # each dropped reader fails its read once, then goes
            try:
                store.counts()
            except psycopg.OperationalError:
                failed += 1
        assert 0 < failed <= READERS
        assert store.counts()["ops"] == 0 and store._readers_open <= READERS
    finally:
        store.close()


def _contents(store: SqlMirrorStore) -> tuple[object, ...]:
    ops = store.export(after_seq=0, after_time=None, count=1000)
    return (
        sorted((op.did, op.cid, op.nullified) for op in ops),
        sorted((r.did, r.cid, r.rule) for r in store.rejected(1000)),
        sorted(_in_force(store, did) for did in {op.did for op in ops}),
    )


def _in_force(store: SqlMirrorStore, did: str) -> tuple[object, ...]:
    current = store.in_force(did)
    return () if current is None else (current.seq, current.tombstoned, current.operation_json)


def test_worker_processes_reach_the_verdicts_of_one_process(tmp_path: Path) -> None:
    _, forged = _forged_world()
    lines = [*export_lines(60, 3, recover_every=7), *forged]
    pages = [lines[i : i + 20] for i in range(0, len(lines), 20)]
    alone, shared = SqliteMirrorStore(tmp_path / "one.db"), SqliteMirrorStore(tmp_path / "two.db")
    one, two = Replica(alone), Replica(shared, workers=2, max_replays=5)
    try:
        in_hand = None
        rebuilt = 0
        for page in pages:  # as a backfill goes: a page verified while the last is written
            one.apply(page)
            submitted = two.submit(page)
            if in_hand is not None:
                rebuilt += two.commit(in_hand, pipelined=True).rebuilt
            in_hand = submitted
        assert in_hand is not None
        rebuilt += two.commit(in_hand).rebuilt
        assert _contents(alone) == _contents(shared)
        assert shared.counts()["rejected"] == 2 and shared.counts()["ops"] == 181
        assert two.rebuilt > 0  # the workers' replays were evicted and rebuilt
        assert rebuilt == two.rebuilt  # the pages' counts, summed over both workers
        restarted = Replica(shared, workers=2)  # nothing in memory: each DID is rebuilt
        try:
            again = restarted.apply(pages[0])
        finally:
            restarted.close()
        dids = {json.loads(line)["did"] for line in pages[0]}
        assert (again.duplicates, again.rebuilt) == (len(pages[0]), len(dids))
    finally:
        one.close()
        two.close()
        alone.close()
        shared.close()


def test_lines_go_to_the_worker_of_their_own_did() -> None:
    did = "did:plc:" + "c" * 24
    expected = zlib.crc32(did.encode())
    for line in (
        json.dumps({"did": did, "cid": "x"}, separators=(",", ":")),
        json.dumps({"did": did, "cid": "x"}),  # with spaces
        json.dumps({"seq": 7, "type": "sequenced_op", "did": did}),
        # a line whose first key is not its DID is parsed, never routed by a nested one
        json.dumps({"operation": {"did": "did:plc:" + "d" * 24}, "did": did, "cid": "x"}),
    ):
        assert route(line.encode()) == expected, line
    assert route(b"not json") == 0


def test_a_restart_restores_key_priority_without_reverifying(store: SqlMirrorStore) -> None:
    """P-NULL-4 after a restart: the recovery signed by key 0 leaves key 1 no right to fork
    from the genesis op any more, though the replay was restored from the store, not
    replayed with signature checks."""
    keys = [Key("prio/0"), Key("prio/1")]
    log = AuditLog.plain(keys, T0)
    genesis = log.head
    log.update(genesis, keys[1], T0 + datetime.timedelta(hours=1), handle="hot.test")
    log.update(genesis, keys[0], T0 + datetime.timedelta(hours=2), handle="back.test")
    first = Replica(store)
    first.apply([json.dumps(e) for e in log.entries])
    restarted = Replica(store)
    fork = keys[1].sign(plc_operation(genesis, keys, ["at://again.test"]))
    onward = keys[1].sign(plc_operation(log.head, keys, ["at://onward.test"]))
    result = restarted.apply(
        [
            json.dumps(log_entry(log.did, fork, T0 + datetime.timedelta(hours=3))),
            json.dumps(log_entry(log.did, onward, T0 + datetime.timedelta(hours=4))),
        ]
    )
    assert restarted.rebuilt == 1
    assert (result.applied, result.rejected) == (1, 1)
    assert result.by_rule == {"P-NULL-2": 1}
    status, document = _get(_api(store), f"/{log.did}")
    assert status == 200 and isinstance(document, dict)
    assert document["alsoKnownAs"] == ["at://onward.test"]


def test_a_lookup_cites_the_mirror_as_it_describes_itself() -> None:
    def note(header: str | None) -> str | None:
        return mirror_note(Response("https://mirror.example/did:plc:x", 200, b"{}", header))

    state = MirrorState("https://plc.directory", cursor_time="2026-12-01T00:00:00.000Z")
    asked = time.time()
    assert note(state.provenance(asked)) == (
        "verified PLC mirror of https://plc.directory (backfilling)"
    )
    state.caught_up_at = time.time() - 2
    assert note(state.provenance(asked)) == (
        "verified PLC mirror of https://plc.directory (2.0s behind)"
    )
    assert note(None) is None
    assert note("cached; upstream=https://x") is None  # only a mirror that says it verified
    hostile = note("verified; upstream=https://x\x1b[31m" + "y" * 5000 + "; behind=1s")
    assert hostile is not None and "\x1b" not in hostile and len(hostile) < 300


class ExportFile(Upstream):
    """An upstream paging a list of export lines as the reference does (`createdAt >
    after`), failing the `fail_at`-th request."""

    def __init__(self, lines: list[str], fail_at: int | None = None) -> None:
        super().__init__("https://upstream.test")
        self.lines, self.fail_at, self.requests = [line.encode() for line in lines], fail_at, 0

    def page(self, after: str, count: int = 1000) -> list[bytes]:
        self.requests += 1
        if self.requests == self.fail_at:
            raise UpstreamFailure("https://upstream.test: connection reset")
        times = [json.loads(line)["createdAt"] for line in self.lines]
        start = 0 if after == "0" else sum(1 for t in times if t <= after)
        return self.lines[start : start + count]

    def document(self, did: str) -> dict[str, object] | None:
        raise UpstreamFailure("not served here")


@pytest.mark.parametrize("failing", ["upstream", "database", "database, in workers"])
def test_a_failure_mid_backfill_loses_nothing(
    failing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page verified but not stored when the failure came is verified again from the
    stored cursor, by verifiers that forgot it: the mirror ends as one that never failed."""
    lines = list(export_lines(40, 3, recover_every=6))
    clean = SqliteMirrorStore(tmp_path / "clean.db")
    Follower(Replica(clean), ExportFile(lines), page_size=7).catch_up()
    store = SqliteMirrorStore(tmp_path / "failed.db")
    replica = Replica(store, workers=2 if "workers" in failing else 0)
    follower = Follower(
        replica, ExportFile(lines, 6 if failing == "upstream" else None), page_size=7
    )
    if failing != "upstream":
        writes = 0
        real_write = store.write

        def write(batch: Batch) -> None:
            nonlocal writes
            writes += 1
            if writes == 5:
                raise sqlite3.OperationalError("disk I/O error")
            real_write(batch)

        monkeypatch.setattr(store, "write", write)
    try:
        with pytest.raises((UpstreamFailure, sqlite3.OperationalError)):
            follower.catch_up()
        assert store.counts()["ops"] < 120
        state = follower.catch_up()
        assert state.caught_up_at is not None and sum(state.rejected.values()) == 0
        assert _contents(store) == _contents(clean)
        assert store.counts() == clean.counts()
    finally:
        replica.close()
        store.close()
        clean.close()


def test_a_second_process_on_one_sqlite_file_reads(tmp_path: Path) -> None:
    writer = open_mirror_store(tmp_path / "one.db")
    reader = open_mirror_store(f"sqlite://{tmp_path}/one.db")
    try:
        assert writer.writable and not reader.writable
        Replica(writer).apply(list(export_lines(4, 1)))
        assert reader.counts()["ops"] == 4  # what the writer commits, at once
        with pytest.raises(sqlite3.Error):
            reader.write(Batch(meta={"cursor": "1"}))  # and it cannot write
    finally:
        writer.close()
        reader.close()
    again = open_mirror_store(tmp_path / "one.db")  # the writer gone, the next one writes
    assert again.writable
    again.close()


class StuckExport(ExportFile):
    """An upstream that serves its first page whatever `after` says."""

    def page(self, after: str, count: int = 1000) -> list[bytes]:
        return self.lines[:count]


class CaughtUpMeanwhile(SqliteMirrorStore):
    """A store whose reads of a DID's row end as the follower finishes a read of the
    upstream (it sets the state complete as of now), as it may in another thread."""

    state: MirrorState

    def in_force(self, did: str) -> InForce | None:
        found = super().in_force(did)
        self.state.complete_as_of = time.time() + 60
        return found

    def export(
        self, *, after_seq: int | None, after_time: str | None, count: int
    ) -> list[StoredOp]:
        found = super().export(after_seq=after_seq, after_time=after_time, count=count)
        self.state.complete_as_of = time.time() + 60
        return found


def test_an_answer_is_dated_by_the_view_before_its_read_not_after(tmp_path: Path) -> None:
    """P-API-2: a 404 says `current=yes` only when the view it was read from was complete
    after the question came; a read of the upstream that ends while the row is read does
    not vouch for it (the DID may have come with it). Export pages likewise say how old the
    view was before they were read (`complete=`), not after."""
    store = CaughtUpMeanwhile(tmp_path / "mirror.db")
    state = MirrorState("https://upstream.test", caught_up_at=time.time() - 5)
    state.complete_as_of = time.time() - 5
    store.state = state
    api = MirrorApi(store, state)
    asked = time.time()
    absent = api.answer("GET", "/did:plc:" + "q" * 24, {}, asked)
    assert absent.status == 404 and "current=no" in absent.headers[MIRROR_HEADER]
    state.complete_as_of = time.time() - 5
    page = api.answer("GET", "/export", {"after": "0"}, asked)
    age = view_age(page.headers[MIRROR_HEADER])
    assert page.status == 200 and age is not None and age >= 5


def test_an_export_that_does_not_advance_is_a_failure_not_a_loop(tmp_path: Path) -> None:
    lines = [json.dumps({**json.loads(line), "createdAt": "x"}) for line in export_lines(9, 1)]
    store = SqliteMirrorStore(tmp_path / "stuck.db")
    follower = Follower(Replica(store), StuckExport(lines), page_size=3)
    try:
        with pytest.raises(UpstreamFailure, match="does not advance"):
            follower.catch_up()
        assert store.counts()["rejected"] == 3  # the page it had was judged (bad createdAt)
    finally:
        follower.stop()
        store.close()


async def test_a_mirror_still_catching_up_claims_neither_absence_nor_currency(
    store: SqlMirrorStore,
) -> None:
    lines = list(export_lines(3, 2))
    Replica(store).apply(lines[:3])  # every DID's first op; their second not yet read
    backfilling = MirrorApi(store, MirrorState("https://upstream.example", cursor_time="T"))
    known, unknown = json.loads(lines[0])["did"], "did:plc:" + "e" * 24
    for did in (known, unknown):
        reply = backfilling.answer("GET", f"/{did}", {})
        assert reply.status == 503 and reply.headers["Retry-After"] == "30"
        assert "still catching up (at T)" in json.loads(reply.body)["message"]
    assert backfilling.answer("GET", "/export", {}).status == 200  # its verified ops, as far
    config = Config(plc_url="https://upstream.example")
    async with Resolver(config, plc=MirrorFetcher(backfilling)) as resolver:
        document = await resolver.resolve_document(unknown)
    assert document.evidence.outcome is Outcome.FAILED  # transient: never cached as absence
    assert document.evidence.error_kind == "UpstreamFailure"


async def test_p_api_2_a_mirror_reads_its_upstream_again_before_it_denies_a_did(
    tmp_path: Path,
) -> None:
    """A follower resting for a minute between polls: the DIDs a live poll changes are told
    (once written; a backfill tells nothing), a poke polls at once, and a question about a
    DID the mirror does not know is answered after that read, as current: a DID created
    meanwhile is found, an absent one is a 404 that says `current=yes`. Without a follower to
    poke, the 404 says `current=no` at once."""
    lines = list(export_lines(24, 2))[:30]  # 24 genesis operations, then 6 updates
    export = ExportFile(lines[:12])  # what the upstream has at first
    told: list[list[str]] = []
    store = SqliteMirrorStore(tmp_path / "mirror.db")
    follower = Follower(Replica(store), export, interval=60, page_size=5, on_applied=told.append)
    api = MirrorApi(store, follower.state, waits=follower.waits)
    follower.start()
    try:
        until(lambda: follower.state.caught_up_at is not None, 10)
        assert told == []  # a backfill: every DID is new, nobody holds one yet
        export.lines = [line.encode() for line in lines]  # the upstream moves on
        newcomer = json.loads(lines[20])["did"]  # created since the mirror's last read
        started = time.monotonic()
        found = await api.run("GET", f"/{newcomer}", {})
        assert found.status == 200 and "current=yes" in found.headers[MIRROR_HEADER]
        assert time.monotonic() - started < 30  # a poke, not the minute's interval
        changed = {json.loads(line)["did"] for line in lines[12:]}
        # the answer waits for the newcomer's page only; the poll's later pages follow it
        until(lambda: {did for dids in told for did in dids} >= changed, 10)
        assert {did for dids in told for did in dids} == changed
        stranger = "did:plc:" + "q" * 24
        absent = await api.run("GET", f"/{stranger}", {})
        assert absent.status == 404 and "current=yes" in absent.headers[MIRROR_HEADER]
        # its read started a poke gap after the one before: 404s in a flood cost the
        # upstream one more read a second at most
        assert time.monotonic() - started >= POKE_GAP
        unpoked = await MirrorApi(store, follower.state).run("GET", f"/{stranger}", {}, wait=5)
        assert unpoked.status == 404 and "current=no" in unpoked.headers[MIRROR_HEADER]
        follower.state.last_error = "UpstreamFailure: 503"  # a poll would not come sooner
        started = time.monotonic()
        failing = await api.run("GET", f"/{stranger}", {}, wait=60)
        assert failing.status == 404 and "current=no" in failing.headers[MIRROR_HEADER]
        assert time.monotonic() - started < 30  # not its minute's wait: none would help
    finally:
        follower.stop()
