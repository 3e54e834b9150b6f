"""A record verified at its PDS (`resolver.record`), its identity and its PDS stood in for
here: what each identity and each answer of a PDS makes of the record (R-REC-1, R-REC-2),
the proof's verdicts (R-REC-5, R-REC-6), what the caller holds (R-REC-7), and the one fresh
resolution a kept identity gets when the answer may be a changed document's (R-REC-8).
The same against the reference PDS and a hostile one: `tests/resolver/test_record_network.py`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import libipld
import pytest

from atwhois.resolver.errors import (
    ForbiddenAddress,
    InvalidInput,
    NotFound,
    ResolutionError,
    ResponseTooLarge,
    UpstreamTimeout,
)
from atwhois.resolver.identity import CacheInfo, Evidence, Identity
from atwhois.resolver.outcome import Outcome, Status
from atwhois.resolver.record import verify_record
from atwhois.resolver.record_proof import MAX_CAR, RecordVerification
from atwhois.resolver.response import Response
from atwhois.testing import mst
from devnet.plc_ops import Key

DID = "did:plc:" + "v" * 24
KEY, NEW_KEY = Key("record owner"), Key("record owner, rotated")
PATH = "app.bsky.feed.post/3l2abcdefghij"
URI = f"at://{DID}/{PATH}"
PDS, NEW_PDS = "https://pds.example", "https://new-pds.example"
RECORDS = {PATH: mst.post("hello"), "app.bsky.feed.post/3l2zz": mst.post("x")}
REPO = mst.Repo(DID, KEY.private, RECORDS)
PROOF = REPO.proof(PATH)
RECORD_CID = mst.record_block(mst.post("hello"))[0]
RECORD_CID_TEXT = libipld.encode_cid(RECORD_CID)


def identity(
    status: Status = Status.VERIFIED,
    *,
    pds: str | None = PDS,
    key: str | None = KEY.did_key,
    kept: bool = False,
    document: Outcome = Outcome.OK,
    log: Outcome = Outcome.SKIPPED,
) -> Identity:
    return Identity(
        query=DID,
        status=status,
        did=DID,
        pds=pds,
        signing_key=key,
        did_doc=Evidence(document, (DID,) if document is Outcome.OK else ()),
        plc_log=Evidence(log),
        did_document_json=b"{}",
        error=None if status is Status.VERIFIED else f"it is {status}",
        cache=CacheInfo(cached=kept, age_s=60.0, state="fresh") if kept else None,
    )


class Directory:
    """Answers lookups with `kept`, refreshes with `fresh` (counted)."""

    def __init__(self, kept: Identity, fresh: Identity | None = None) -> None:
        self.kept, self.fresh = kept, fresh or kept
        self.refreshes: list[str] = []

    async def lookup(self, identifier: str) -> Identity:
        return self.kept

    async def refresh(self, identifier: str) -> Identity:
        self.refreshes.append(identifier)
        return self.fresh

    async def check_pds(self, identity: Identity) -> Identity:
        return identity

    async def purge(self, identifier: str) -> list[str]:
        return []

    async def aclose(self) -> None:
        return None


Answer = Response | ResolutionError


class Pds:
    """Each PDS's answer to getRecord (by origin), and what was asked of it."""

    def __init__(self, answers: dict[str, Answer]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def get(self, url: str, **options: Any) -> Response:
        self.asked.append((url, options))
        parts = urlsplit(url)
        answer = self.answers[f"{parts.scheme}://{parts.netloc}"]
        if isinstance(answer, ResolutionError):
            raise answer
        return dataclasses.replace(answer, url=url)

    async def aclose(self) -> None:
        return None


def car(body: bytes = PROOF) -> Response:
    return Response("", 200, body)


def xrpc(status: int, error: str) -> Response:
    return Response("", status, b'{"error": "%s", "message": "said"}' % error.encode())


async def verify(
    directory: Directory, pds: Pds, uri: str = URI, **claim: Any
) -> RecordVerification:
    return await verify_record(directory, pds, uri, timeout=2.5, **claim)


async def test_a_record_its_pds_proves_is_verified_with_what_proves_it() -> None:
    """R-REC-2, R-REC-5: asked of the document's PDS by did, collection and rkey, with the
    deadline and the cap; verified with its CID, its value in JSON, the commit, the key."""
    pds = Pds({PDS: car()})
    verdict = await verify(Directory(identity()), pds, cid=RECORD_CID_TEXT)
    assert verdict.outcome == "verified" and verdict.proven and verdict.matches
    assert (verdict.cid, verdict.value) == (RECORD_CID_TEXT, mst.post("hello"))
    assert (verdict.commit, verdict.key, verdict.pds) == (REPO.commit_cid(), KEY.did_key, PDS)
    assert verdict.rev == "3n3qpjq7vrk2v" and verdict.rule is None and not verdict.refreshed
    [(url, options)] = pds.asked
    assert url.startswith(f"{PDS}/xrpc/com.atproto.sync.getRecord?")
    query = parse_qs(urlsplit(url).query)
    assert query == {"did": [DID], "collection": [PATH.split("/")[0]], "rkey": [PATH.split("/")[1]]}
    assert options == {"max_bytes": MAX_CAR, "timeout": 2.5, "accept": "application/vnd.ipld.car"}


async def test_a_record_the_tree_shows_is_not_there_is_absent_proven() -> None:
    """R-REC-6: the signed tree's path shows the key is not there; a claim does not match."""
    absent = f"at://{DID}/app.bsky.feed.post/3l2b"
    pds = Pds({PDS: car(REPO.proof("app.bsky.feed.post/3l2b"))})
    verdict = await verify(Directory(identity()), pds, absent, cid=RECORD_CID_TEXT)
    assert (verdict.outcome, verdict.proven, verdict.matches) == ("absent", True, False)
    assert verdict.key == KEY.did_key and verdict.commit == REPO.commit_cid()


@pytest.mark.parametrize(
    ("answer", "outcome", "rule", "status"),
    [
        (xrpc(400, "RepoDeactivated"), "inactive", None, "deactivated"),
        (xrpc(400, "RepoTakendown"), "inactive", None, "takendown"),
        (xrpc(400, "RepoSuspended"), "inactive", None, "suspended"),
        (xrpc(400, "RepoNotFound"), "absent", None, None),
        (xrpc(404, "RecordNotFound"), "absent", None, None),
        (xrpc(500, "InternalServerError"), "unavailable", None, None),
        (Response("", 503, b"busy"), "unavailable", None, None),
        (Response("", 429, b""), "unavailable", None, None),
        (UpstreamTimeout("no complete answer in time"), "unavailable", None, None),
        (NotFound("pds.example: NXDOMAIN"), "absent", None, None),
        (xrpc(400, "InvalidRequest"), "invalid", "R-REC-2", None),
        (Response("", 404, b"<html>not found</html>"), "invalid", "R-REC-2", None),
        (Response("", 200, b"<html>a page</html>"), "invalid", "R-CAR-1", None),
        (ResponseTooLarge("over the cap"), "invalid", "R-REC-3", None),
        (
            ForbiddenAddress("pds.example resolves only to forbidden addresses"),
            "invalid",
            "R-REC-2",
            None,
        ),
    ],
    ids=lambda value: str(getattr(value, "status", value))[:40],
)
async def test_each_answer_of_a_pds_says_what_the_spec_says_it_does(
    answer: Answer, outcome: str, rule: str | None, status: str | None
) -> None:
    """R-REC-2: an account's state (inactive), a repository or record not there without a
    proof (absent, not proven), a transient failure (unavailable), anything else (invalid)."""
    verdict = await verify(Directory(identity()), Pds({PDS: answer}))
    assert (verdict.outcome, verdict.rule, verdict.status) == (outcome, rule, status)
    assert not verdict.proven and verdict.cid is None and verdict.reason


@pytest.mark.parametrize(
    ("authority", "kept", "outcome", "rule"),
    [
        (DID, identity(Status.UNAVAILABLE, document=Outcome.FAILED), "unavailable", None),
        (DID, identity(Status.UNAVAILABLE, log=Outcome.FAILED), "unavailable", None),
        (DID, identity(Status.UNAVAILABLE), "verified", None),  # only its handle failed
        (DID, identity(Status.HANDLE_NOT_FOUND), "verified", None),  # none declared
        ("alice.example.com", identity(Status.UNAVAILABLE), "unavailable", None),
        (DID, identity(Status.DID_NOT_FOUND), "absent", None),
        (DID, identity(Status.DID_DEACTIVATED), "inactive", None),
        (
            DID,
            dataclasses.replace(identity(Status.INVALID_DOCUMENT), did_document_json=None),
            "invalid",
            "R-REC-1",
        ),
        (DID, identity(Status.PLC_LOG_INVALID), "invalid", "R-REC-1"),
        (DID, identity(pds=None), "absent", None),
        (DID, identity(key=None), "invalid", "R-COMMIT-4"),
        (DID, identity(Status.HANDLE_MISMATCH), "verified", None),  # the DID's document holds
        ("alice.example.com", identity(Status.HANDLE_MISMATCH), "invalid", "R-REC-1"),
        ("alice.example.com", identity(Status.HANDLE_NOT_FOUND), "absent", None),
        ("alice.example.com", identity(), "verified", None),
    ],
)
async def test_the_identity_decides_before_the_pds_is_asked(
    authority: str, kept: Identity, outcome: str, rule: str | None
) -> None:
    """R-REC-1: a handle must verify both ways; a DID needs a document (servable, naming a
    PDS, its log replayed if asked) whatever its handle's state; R-COMMIT-4: a document
    without an `#atproto` key verifies no commit."""
    pds = Pds({PDS: car()})
    verdict = await verify(Directory(kept), pds, f"at://{authority}/{PATH}")
    assert (verdict.outcome, verdict.rule) == (outcome, rule), verdict.reason
    asked = outcome == "verified" or rule == "R-COMMIT-4"
    assert len(pds.asked) == (1 if asked else 0)


@pytest.mark.parametrize(
    "text",
    [f"at://{DID}", f"at://{DID}/app.bsky.feed.post", f"at://{DID}/app.bsky.feed.post/a%20b"],
)
async def test_a_uri_or_claim_that_is_not_one_is_refused_before_anything_is_asked(
    text: str,
) -> None:
    """R-REC-1, R-REC-7: invalid input, raised; nothing looked up, nothing asked."""
    directory, pds = Directory(identity()), Pds({})
    with pytest.raises(InvalidInput):
        await verify(directory, pds, text)
    with pytest.raises(InvalidInput) as refused:
        await verify(directory, pds, URI, record=b"{not json")
    assert refused.value.rule == "R-REC-7" and pds.asked == []
    kept = identity(Status.INVALID_INPUT)
    with pytest.raises(InvalidInput):
        await verify(Directory(kept), pds, f"at://did:key:zQ3sh/{PATH}")


SIGNED_BY_NEW_KEY = REPO.proof(PATH, signer=NEW_KEY.private)


@pytest.mark.parametrize(
    ("answers", "fresh", "refreshed_outcome"),
    [
        # the key rotated since the document was kept: the fresh one verifies
        ({PDS: car(SIGNED_BY_NEW_KEY)}, identity(key=NEW_KEY.did_key), "verified"),
        # the account moved: its old PDS holds it no more, or holds it deactivated
        ({PDS: xrpc(400, "RepoNotFound"), NEW_PDS: car()}, identity(pds=NEW_PDS), "verified"),
        ({PDS: xrpc(400, "RepoDeactivated"), NEW_PDS: car()}, identity(pds=NEW_PDS), "verified"),
        # the document did not change: the verdict stands
        ({PDS: car(SIGNED_BY_NEW_KEY)}, identity(), "invalid"),
    ],
)
async def test_a_kept_identity_gets_one_fresh_resolution_when_the_answer_may_be_its_change(
    answers: dict[str, Answer], fresh: Identity, refreshed_outcome: str
) -> None:
    """R-REC-8: a signature refused, a repository not found or deactivated under a kept
    document: the identity is resolved once afresh, and the PDS asked again only if its
    PDS or key changed."""
    directory = Directory(identity(kept=True), fresh)
    pds = Pds(answers)
    verdict = await verify(directory, pds)
    assert (verdict.outcome, verdict.refreshed) == (refreshed_outcome, True)
    assert directory.refreshes == [DID]
    changed = (fresh.pds, fresh.signing_key) != (PDS, KEY.did_key)
    assert len(pds.asked) == (2 if changed else 1)
    if refreshed_outcome == "invalid":
        assert verdict.rule == "R-COMMIT-4"


WHY_NOT: list[tuple[str, Identity, Callable[[], Answer]]] = [
    ("resolved now, not kept", identity(), lambda: car(SIGNED_BY_NEW_KEY)),
    ("a broken tree", identity(kept=True), lambda: car(REPO.proof(PATH, leave_out=[RECORD_CID]))),
    ("taken down", identity(kept=True), lambda: xrpc(400, "RepoTakendown")),
    ("transient", identity(kept=True), lambda: Response("", 503, b"")),
    ("verified", identity(kept=True), car),
]


@pytest.mark.parametrize(("case", "kept", "answer"), WHY_NOT, ids=[c for c, _, _ in WHY_NOT])
async def test_no_refresh_where_a_changed_document_would_change_nothing(
    case: str, kept: Identity, answer: Callable[[], Answer]
) -> None:
    """R-REC-8: a document resolved now, a verdict no document decides (a broken tree, a
    takedown, a transient failure), a record verified: no refresh."""
    directory = Directory(kept, identity(key=NEW_KEY.did_key, pds=NEW_PDS))
    verdict = await verify(directory, Pds({PDS: answer()}))
    assert directory.refreshes == [] and not verdict.refreshed, case


async def test_a_refresh_the_caller_declines_leaves_the_verdict_under_the_kept_identity() -> None:
    """R-REC-8: a refresh is asked of the caller's `refresh` by the kept identity's DID,
    with that identity (the daemon's declines one within a few seconds of the last): when
    it declines, the verdict under the kept document stands, not refreshed, and the
    directory is not asked; when it answers, the fresh identity decides."""
    directory = Directory(identity(kept=True), identity(key=NEW_KEY.did_key))
    asked: list[tuple[str, Identity]] = []

    async def declining(did: str, used: Identity) -> Identity | None:
        asked.append((did, used))
        return None

    pds = Pds({PDS: car(SIGNED_BY_NEW_KEY)})
    verdict = await verify_record(directory, pds, URI, timeout=2.5, refresh=declining)
    assert (verdict.outcome, verdict.rule, verdict.refreshed) == ("invalid", "R-COMMIT-4", False)
    assert asked == [(DID, directory.kept)] and directory.refreshes == [] and len(pds.asked) == 1

    async def answering(did: str, used: Identity) -> Identity | None:
        return identity(key=NEW_KEY.did_key)

    verdict = await verify_record(directory, pds, URI, timeout=2.5, refresh=answering)
    assert (verdict.outcome, verdict.refreshed) == ("verified", True)


async def test_a_record_named_by_its_handle_is_refreshed_by_its_did() -> None:
    """R-REC-8: what a refresh may find changed is the DID's document, so the DID is
    refreshed, whatever the URI names it by (a handle and its DID share one refresh)."""
    directory = Directory(identity(kept=True), identity(key=NEW_KEY.did_key))
    pds = Pds({PDS: car(SIGNED_BY_NEW_KEY)})
    verdict = await verify(directory, pds, f"at://alice.example.com/{PATH}")
    assert (verdict.outcome, verdict.refreshed) == ("verified", True)
    assert directory.refreshes == [DID]
