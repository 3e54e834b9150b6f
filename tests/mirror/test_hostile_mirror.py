"""The PLC mirror's follower against a hostile upstream: a scripted directory on loopback
(`PlcStandIn.export_script`) whose `/export` pages go back, end in a line that does not
parse, serve forged copies before the genuine operations, or trickle a byte at a time. Each
test is one reproduction of issue 36 (items 1-4): the follower must never loop, stall for
good, freeze an identity on a forged line, or say it is fine while it makes no progress
(P-API-1, P-CID-1, P-NULL-3)."""

from __future__ import annotations

import copy
import datetime
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from atwhois.mirror import Follower, MirrorApi, Replica, Upstream
from atwhois.mirror.api import report
from atwhois.mirror.backends import SqliteMirrorStore
from atwhois.mirror.upstream import UpstreamFault, order_page
from atwhois.resolver.errors import UpstreamTimeout
from devnet.forwarder import PlcStandIn
from devnet.plc_ops import AuditLog, Key
from tests.support.waiting import until

T0 = datetime.datetime(2026, 1, 5, tzinfo=datetime.UTC)


class SeqExport:
    """The `/export?after=N` a directory with sequence numbers serves, from lines a test
    writes (each an entry and the seq it is served at), in the order given: a test that
    wants a page to go back lists it so."""

    def __init__(self) -> None:
        self.lines: list[tuple[int, dict[str, Any] | str]] = []
        self.asked: list[str] = []

    def add(self, seq: int, entry: dict[str, Any] | str) -> None:
        self.lines.append((seq, entry))

    def __call__(self, query: dict[str, str]) -> list[str]:
        after, count = query.get("after", "0"), int(query.get("count", "1000"))
        self.asked.append(after)
        start = next(
            (i for i, (seq, _) in enumerate(self.lines) if seq > int(after)), len(self.lines)
        )
        return [_line(seq, entry) for seq, entry in self.lines[start : start + count]]


def _line(seq: int, entry: dict[str, Any] | str) -> str:
    if isinstance(entry, str):
        return entry  # served as it is: not JSON, say
    line = {"type": "sequenced_op", "seq": seq, **entry}
    del line["nullified"]
    return json.dumps(line)


@pytest.fixture
def upstream() -> Iterator[tuple[PlcStandIn, SeqExport]]:
    script = SeqExport()
    # Nothing behind it: the script answers /export; documents are not compared here.
    with PlcStandIn("http://127.0.0.1:9") as stand_in:
        stand_in.export_script = script
        yield stand_in, script


def _follower(
    stand_in: PlcStandIn, tmp_path: Path, *, page_size: int = 1000, **upstream: float
) -> Follower:
    store = SqliteMirrorStore(tmp_path / "mirror.db")
    return Follower(
        Replica(store),
        Upstream(stand_in.url, **upstream),
        interval=0.05,
        page_size=page_size,
        check_documents=0,
        stall_after=0.5,
    )


def _three_ops(name: str) -> AuditLog:
    keys = [Key(f"{name}/0")]
    log = AuditLog.plain(keys, T0)
    first = log.update(log.head, keys[0], T0 + datetime.timedelta(hours=1), handle="two.test")
    log.update(first, keys[0], T0 + datetime.timedelta(hours=2), handle="three.test")
    return log


def _aliases(follower: Follower, did: str) -> list[str]:
    reply = MirrorApi(follower.replica.store, follower.state).answer("GET", f"/{did}", {})
    assert reply.status == 200, reply.body
    aliases: list[str] = json.loads(reply.body)["alsoKnownAs"]
    return aliases


def _stopping(follower: Follower) -> Callable[[], None]:
    def stop() -> None:
        follower.stop()
        follower.replica.store.close()

    return stop


def test_a_page_that_goes_back_is_a_fault_not_a_cursor(
    upstream: tuple[PlcStandIn, SeqExport], tmp_path: Path
) -> None:
    """Item 1: a full page after 3 goes back to seq 2. The lines before it are applied, the
    cursor never moves back, the fault is kept as evidence and the follower backs off
    instead of asking hundreds of times a second; /_health is not ok meanwhile."""
    stand_in, script = upstream
    logs = [_three_ops(f"back{i}") for i in range(2)]
    entries = [entry for log in logs for entry in log.entries]  # 6 ops, in order per DID
    pages = {"0": [(1, entries[0]), (2, entries[3]), (3, entries[1])]}
    going_back = [(4, entries[4]), (5, entries[2]), (2, entries[3])]
    asked: list[str] = []

    def export(query: dict[str, str]) -> list[str]:  # after 0 a page, else one going back
        asked.append(query["after"])
        return [_line(seq, entry) for seq, entry in pages.get(query["after"], going_back)]

    stand_in.export_script = export
    script.asked = asked
    follower = _follower(stand_in, tmp_path, page_size=3)
    try:
        with pytest.raises(UpstreamFault, match="went back: line 3: seq 2 is not after 5"):
            follower.catch_up()
        assert follower.state.cursor == "5" and follower.state.ops == 5
        assert follower.replica.store.meta()["cursor"] == "5"
        assert follower.state.faults == 1
        evidence = follower.replica.store.bad_lines(10)
        assert len(evidence) == 1 and "seq 2 is not after 5" in evidence[0].reason
        follower.start()  # following: it backs off, it does not loop
        time.sleep(2.0)
        assert follower.state.errors >= 1
        assert len(script.asked) < 15, f"{len(script.asked)} requests in 2 s"
        assert set(script.asked) == {"0", "3", "5"}
        assert follower.state.problem() is not None
        assert "went back" in str(follower.state.to_json()["problem"])
        assert follower.state.cursor == "5"
    finally:
        _stopping(follower)()


def test_a_bad_last_line_keeps_the_page_and_the_evidence(
    upstream: tuple[PlcStandIn, SeqExport], tmp_path: Path
) -> None:
    """Item 2: a page whose last line is not JSON (and one in the middle that is JSON but no
    export line) is applied line by line: its valid ops are kept, the cursor is the last line
    that parsed, and every bad line is in the store, the report and the counters."""
    stand_in, script = upstream
    log = _three_ops("badline")
    script.add(1, log.entries[0])
    script.add(2, '{"seq": 2, "did": 7}')
    script.add(3, log.entries[1])
    script.add(4, "{this is not json")
    follower = _follower(stand_in, tmp_path)
    try:
        state = follower.catch_up()
        assert state.ops == 2 and state.cursor == "3"
        assert state.bad_lines == 2 and state.caught_up_at is not None
        assert _aliases(follower, log.did) == ["at://two.test"]
        listed = report(follower.replica.store, state)
        assert [line["entry"] for line in listed["bad_lines"]] == sorted(
            ['{"seq": 2, "did": 7}', "{this is not json"]
        ) or {line["entry"] for line in listed["bad_lines"]} == {
            '{"seq": 2, "did": 7}',
            "{this is not json",
        }
        assert listed["store"]["bad_lines"] == 2 and listed["mirror"]["bad_lines"] == 2
        script.add(5, log.entries[2])  # the upstream goes on: so does the mirror
        follower.catch_up()
        assert _aliases(follower, log.did) == ["at://three.test"]
        assert follower.replica.store.counts()["bad_lines"] == 2  # served again: kept once
    finally:
        _stopping(follower)()


@pytest.mark.parametrize("forgery", ["early", "tampered", "forged-future"])
def test_a_refused_line_never_shadows_the_genuine_op(
    upstream: tuple[PlcStandIn, SeqExport], tmp_path: Path, forgery: str
) -> None:
    """Item 3: what the mirror keeps as seen is the CID it computed for an op it accepted.
    (a) op 3 served before op 2 is refused, and served again after op 2 it is applied;
    (b) a tampered op 2 with its claimed CID is refused, the honest op 2 served later is
    applied; (c) a forged copy of op 3 served first does not block the real op 3."""
    stand_in, script = upstream
    log = _three_ops(f"shadow-{forgery}")
    genesis, op2, op3 = log.entries
    script.add(1, genesis)
    if forgery == "early":
        script.add(2, op3)
    elif forgery == "tampered":
        tampered = copy.deepcopy(op2)
        tampered["operation"]["alsoKnownAs"] = ["at://mallory.test"]
        script.add(2, tampered)
    else:
        forged = copy.deepcopy(op3)
        forged["operation"]["alsoKnownAs"] = ["at://mallory.test"]
        script.add(2, forged)
    follower = _follower(stand_in, tmp_path)
    try:
        state = follower.catch_up()
        assert sum(state.rejected.values()) == 1
        assert _aliases(follower, log.did) == ["at://x.test"]
        script.add(3, op2)
        script.add(4, op3)
        state = follower.catch_up()
        assert state.ops == 3 and state.duplicates == 0
        assert _aliases(follower, log.did) == ["at://three.test"]
        audit = MirrorApi(follower.replica.store, state).answer("GET", f"/{log.did}/log/audit", {})
        assert [e["cid"] for e in json.loads(audit.body)] == [e["cid"] for e in log.entries]
    finally:
        _stopping(follower)()


def test_a_trickling_page_ends_at_its_deadline_and_stop_is_bounded(
    upstream: tuple[PlcStandIn, SeqExport], tmp_path: Path
) -> None:
    """Item 4: a body trickled a byte every 0.2 s (each read well within the idle timeout)
    is given up at the whole answer's deadline; /_health says why; stop() returns within
    its bound while a read is under way."""
    stand_in, script = upstream
    for seq, entry in enumerate(_three_ops("trickle").entries, start=1):
        script.add(seq, entry)
    stand_in.trickle_every = 0.2
    stand_in.set_fault("trickle")
    follower = _follower(stand_in, tmp_path, timeout=5.0, deadline=1.5)
    try:
        started = time.monotonic()
        with pytest.raises(UpstreamTimeout, match=r"no whole answer within 1\.5 s"):
            follower.catch_up()
        # given up at 1.5 s: the trickle itself would take minutes
        assert time.monotonic() - started < 5.0
        follower.start()
        until(lambda: follower.state.problem() is not None, 10)  # stalled, or failed
        until(lambda: "no whole answer" in str(follower.state.problem()), 10)
        assert follower.state.errors >= 1 and follower.state.ops == 0
    finally:
        started = time.monotonic()
        stopper = threading.Thread(target=_stopping(follower))
        stopper.start()
        stopper.join(10)
        assert time.monotonic() - started < 5.0  # STOP_WAIT (3 s); the read would go on


def test_a_hanging_upstream_is_a_stall_health_reports(
    upstream: tuple[PlcStandIn, SeqExport], tmp_path: Path
) -> None:
    """A follower whose upstream answers nothing makes no progress: /_health says so once
    the stall bound has passed, before any error could be counted."""
    stand_in, _ = upstream
    stand_in.set_fault("hang")
    follower = _follower(stand_in, tmp_path, timeout=30.0, deadline=30.0)
    follower.state.stall_after = 0.5  # the bound, short for the test
    try:
        follower.start()
        until(lambda: follower.state.problem() is not None, 5)
        assert follower.state.errors == 0
        assert "no progress" in str(follower.state.problem())
    finally:
        _stopping(follower)()


def test_order_page_rules() -> None:
    """The ordering rule as a pure function: seqs strictly increasing past the cursor,
    legacy `createdAt` not going back, bad lines skipped, the cursor at the last good one."""
    lines = [b'{"seq": 4, "createdAt": "2026-01-01T00:00:00.000Z"}', b"nope"]
    assert order_page(lines, "3") == order_page(lines, "0")
    assert order_page(lines, "3").moved == ("4", "2026-01-01T00:00:00.000Z")
    assert order_page(lines, "4").fault == "line 1: seq 4 is not after 4"
    assert order_page(lines, "4").usable == 0
    legacy = [
        b'{"createdAt": "2026-01-01T00:00:00.005Z"}',
        b'{"createdAt": "2026-01-01T00:00:00.003Z"}',
    ]
    assert order_page(legacy, "0").fault == "line 2: createdAt 2026-01-01T00:00:00.003Z goes back"
    assert order_page(legacy[:1], "2026-01-01T00:00:00.004Z").moved == (
        "2026-01-01T00:00:00.004Z",
        "2026-01-01T00:00:00.005Z",
    )
    assert order_page(legacy[:1], "2026-01-01T00:00:00.006Z").usable == 0
    assert order_page([b'{"seq": 99999999999999999999}'], "0").moved is None


def test_bad_lines_kept_are_bounded_newest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The evidence of unparseable lines is bounded: the newest `BAD_LINES_KEPT`, and up to
    `BAD_LINES_SLACK` more between two prunes, whatever an upstream sends."""
    from atwhois.mirror import records as stores
    from atwhois.mirror import store as bounds

    monkeypatch.setattr(bounds, "BAD_LINES_KEPT", 5)
    monkeypatch.setattr(bounds, "BAD_LINES_SLACK", 3)
    store = SqliteMirrorStore(tmp_path / "bounded.db")
    try:
        for n in range(40):
            line = stores.BadLine.of(
                f"garbage {n}".encode(), "not JSON", f"2026-01-01T00:00:{n:02d}Z"
            )
            store.write(stores.Batch(bad_lines=[line]))
            assert store.counts()["bad_lines"] <= 5 + 3
        kept = [b.entry for b in store.bad_lines(100)]
        assert kept[0] == "garbage 39" and "garbage 0" not in kept
    finally:
        store.close()


def test_escaped_surrogates_never_wedge_the_store(tmp_path: Path) -> None:
    """Found by `make fuzz`: a line whose claimed CID (or time) is a JSON-escaped lone
    surrogate made the page's write fail and left the transaction open, so every later
    write failed too: one line froze the mirror. The claim is kept as evidence (U+FFFD),
    and a write that fails leaves nothing behind and the store usable."""
    from atwhois.mirror import records as stores

    log = _three_ops("surrogate")
    forged = copy.deepcopy(log.entries[1])
    forged["cid"] = "\ud800"
    forged["createdAt"] = "\udfff"
    store = SqliteMirrorStore(tmp_path / "surrogates.db")
    try:
        replica = Replica(store)
        result = replica.apply([json.dumps(log.entries[0]), json.dumps(forged)])
        assert (result.applied, result.rejected) == (1, 1)
        refused = store.rejected(10)[0]
        assert refused.cid == "\ufffd" and refused.created_at == "\ufffd"
        assert replica.apply([json.dumps(log.entries[1])]).applied == 1  # still writable
        before = store.counts()
        with pytest.raises(UnicodeEncodeError):
            store.write(stores.Batch(ops=[(log.did, "\ud800", "t", b"{}", 0)], meta={"a": "b"}))
        assert store.counts() == before and "a" not in store.meta()  # none of it
        store.write(stores.Batch(meta={"a": "b"}))
        assert store.meta()["a"] == "b"
    finally:
        store.close()
