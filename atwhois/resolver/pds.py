"""The PDS check: whether the PDS a DID document names hosts the account, whether the
account is active there, and whether the repository it serves is signed by the key the
document declares (R-PDS-*). What relays and AppViews depend on, and what a binding that
verifies both ways does not show: a PDS that is gone, an account deactivated or taken down,
a migration that left the old signing key in the document.

Three requests through the guarded fetcher (the PDS is a stranger's choice: timeouts, caps,
the address guard): `com.atproto.sync.getRepoStatus`, `getLatestCommit`, and `getBlocks`
for the commit block, which `resolver.commit` reads and verifies. Outcomes kept apart as
everywhere: `hosted` (active, and the commit verifies); `inactive` and `not_hosted`
(confirmed by the PDS, or by DNS: its host name does not exist); `unreachable` (transient);
`invalid` (an answer that breaks a rule, or a commit no declared key signed: `signed_with`
names an earlier key of the DID's PLC log that did)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from .commit import read_commit, signed_by
from .errors import AtwhoisError, InvalidData, MalformedAnswer, NotFound, ResolutionError
from .identity import HOSTED, INACTIVE, INVALID, NOT_HOSTED, UNREACHABLE, PdsCheck
from .response import Getter, Response
from .untrusted import parse_json

_JSON_CAP = 16 * 1024  # a repo status or a latest commit is a few hundred bytes
_CAR_CAP = 64 * 1024  # one commit block is about 250 bytes
_TRANSIENT = {408, 425, 429, 500, 502, 503, 504}


class _Refused(AtwhoisError):
    """The PDS answered, and the answer settles the check (`check`)."""

    def __init__(self, check: PdsCheck) -> None:
        self.check = check


async def check_pds(
    web: Getter,
    pds: str,
    did: str,
    signing_key: str | None,
    earlier_keys: Callable[[], Awaitable[tuple[str, ...]]],
    *,
    timeout: float,
) -> PdsCheck:
    """Check `did`'s account at `pds` (the document's `#atproto_pds` endpoint) and its
    latest commit against `signing_key`; `earlier_keys` gives the DID's earlier signing
    keys, asked only when the commit does not verify."""
    started = time.perf_counter()
    base = pds.rstrip("/") + "/xrpc/com.atproto.sync."

    def done(outcome: str, **evidence: Any) -> PdsCheck:
        ms = round((time.perf_counter() - started) * 1000, 2)
        return PdsCheck(outcome, pds, ms=ms, **evidence)

    async def get(method: str, params: dict[str, str], cap: int, accept: str) -> Response:
        answer = await web.get(
            f"{base}{method}?{urlencode(params)}", max_bytes=cap, timeout=timeout, accept=accept
        )
        if answer.status in _TRANSIENT:
            raise _Refused(done(UNREACHABLE, error=f"{method}: HTTP {answer.status}"))
        if answer.status != 200:
            raise _Refused(_refusal(done, method, answer))
        return answer

    try:
        status = _json(await get("getRepoStatus", {"did": did}, _JSON_CAP, "application/json"))
        if status.get("did") != did:
            return done(INVALID, error="getRepoStatus answered for another DID [R-PDS-2]")
        active = status.get("active")
        said = status.get("status")
        said = said if isinstance(said, str) else None
        if active is not True:
            if active is not False:
                return done(INVALID, error="getRepoStatus without a boolean `active` [R-PDS-2]")
            return done(INACTIVE, status=said or "inactive")
        latest = _json(await get("getLatestCommit", {"did": did}, _JSON_CAP, "application/json"))
        cid, rev = latest.get("cid"), latest.get("rev")
        if not isinstance(cid, str) or not isinstance(rev, str):
            return done(INVALID, error="getLatestCommit without its cid and rev [R-PDS-3]")
        car = await get(
            "getBlocks", {"did": did, "cids": cid}, _CAR_CAP, "application/vnd.ipld.car"
        )
        commit = read_commit(car.body, cid)
    except _Refused as refused:
        return refused.check
    except InvalidData as err:
        return done(INVALID, error=str(err))
    except NotFound as err:  # the PDS's host name does not exist: nobody hosts it there
        return done(NOT_HOSTED, error=f"{err} [R-PDS-1]")
    except ResolutionError as err:
        return done(UNREACHABLE, error=str(err))
    evidence: dict[str, Any] = {"status": "active", "rev": commit.rev, "commit": cid}
    if commit.did != did:
        error = f"the commit is {commit.did}'s, not {did}'s [R-COMMIT-5]"
        return done(INVALID, error=error, **evidence)
    if commit.rev != rev:
        error = f"the commit's rev {commit.rev} is not the latest {rev} [R-PDS-3]"
        return done(INVALID, error=error, **evidence)
    if signing_key is not None and signed_by(commit, (signing_key,)):
        return done(HOSTED, key=signing_key, **evidence)
    try:
        earlier = signed_by(commit, await earlier_keys())
    except ResolutionError:
        earlier = None  # which key signed it stays unknown; the mismatch does not
    declared = signing_key or "no #atproto key"
    if earlier is not None:
        error = f"the commit is signed with {earlier}, an earlier key, not {declared} [R-COMMIT-4]"
    else:
        error = (
            f"no key of the DID verifies the commit; the document declares {declared} [R-COMMIT-4]"
        )
    return done(INVALID, signed_with=earlier, error=error, **evidence)


def _json(answer: Response) -> dict[str, Any]:
    try:
        body = parse_json(answer.body)
    except ValueError:
        raise MalformedAnswer(f"{answer.url[:120]}: not JSON [R-PDS-2]") from None
    if not isinstance(body, dict):
        raise MalformedAnswer(f"{answer.url[:120]}: not a JSON object [R-PDS-2]")
    return body


def _refusal(done: Callable[..., PdsCheck], method: str, answer: Response) -> PdsCheck:
    """A PDS's refusal: the account not there, or not active there (R-PDS-1); any other
    answer than an XRPC error is no PDS's, and the account is not hosted there either."""
    try:
        error = parse_json(answer.body).get("error")
    except (ValueError, AttributeError):
        error = None
    if error in ("RepoDeactivated", "RepoTakendown", "RepoSuspended"):
        status = {"RepoTakendown": "takendown"}.get(error, error[4:].lower())
        return done(INACTIVE, status=status, error=f"{method}: {error}")
    if error == "RepoNotFound":
        return done(NOT_HOSTED, error=f"{method}: RepoNotFound")
    said = f"XRPC error {error}" if isinstance(error, str) else "no XRPC answer"
    return done(NOT_HOSTED, error=f"{method}: HTTP {answer.status}, {said} [R-PDS-1]")
