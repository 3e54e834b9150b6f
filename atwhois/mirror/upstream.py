"""The upstream directory as the mirror reads it: GETs of export pages and documents, each
answer read whole within a deadline (not per read: a body trickled a byte at a time ends
there) and under a size cap; and the rule its pages are held to (P-API-1): each line comes
after the cursor and after the line before it. A page that goes back is applied up to that
line and is then an `UpstreamFault`; a line that does not parse is skipped (the verifier
keeps it as evidence), and the cursor is the last line that parsed."""

from __future__ import annotations

import datetime
import threading
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import httpx

from atwhois.foundation.bounded import BoundedBody
from atwhois.foundation.pace import HostPace
from atwhois.foundation.version import agent
from atwhois.resolver.config import AUDIT_LOG_MAX_BYTES, DOCUMENT_MAX_BYTES
from atwhois.resolver.did import view_age
from atwhois.resolver.errors import ResponseTooLarge, UpstreamFailure, UpstreamTimeout
from atwhois.resolver.fetch import host_of, refused
from atwhois.resolver.plc.audit import parse_time
from atwhois.resolver.response import MIRROR_HEADER
from atwhois.resolver.untrusted import parse_json, retry_after

PAGE_SIZE = 1000  # the reference's most per page
PAGE_MAX_BYTES = 64 * 1024 * 1024
PAGE_DEADLINE = 120.0  # seconds for a whole answer (a full page is ~0.5 MB)
READ_IDLE = 30.0  # seconds without a byte before a read gives up


class UpstreamFault(UpstreamFailure):
    """The upstream served what a directory never does (a page that goes back): its fault,
    reported and retried with back-off, never followed."""


class Upstream:
    """GETs to the upstream directory: export pages and documents, each answer read whole
    within `deadline` seconds."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = READ_IDLE,
        deadline: float = PAGE_DEADLINE,
        user_agent: str | None = None,
        pace: HostPace | None = None,
    ) -> None:
        """`pace`: the directory's rate and pauses, shared with this process's lookups."""
        self.url = url.rstrip("/")
        self.pace = pace
        self._host = host_of(self.url)
        self.deadline = deadline
        # how long before its last export page the upstream's own view was complete: 0 for
        # a directory, what an atwhois mirror says, None when not known (`view_age`)
        self.view_age: float | None = 0.0
        self.closing = threading.Event()  # set: give up the answer being read
        self._client = httpx.Client(
            timeout=min(timeout, deadline),
            headers={"User-Agent": user_agent or agent()},
            follow_redirects=False,
        )

    def _answer(
        self, path: str, params: dict[str, str] | None = None, cap: int = PAGE_MAX_BYTES
    ) -> tuple[int, bytes, str | None]:
        """The status, the body (at most `cap` bytes) and the `Atwhois-Plc-Mirror` header
        of an answer."""
        give_up = time.monotonic() + self.deadline
        self._take_turn()
        try:
            with self._client.stream("GET", self.url + path, params=params) as response:
                self._heard(response)
                body = BoundedBody(
                    cap,
                    lambda _: ResponseTooLarge(f"{self.url}{path}: over {cap} bytes"),
                    deadline=give_up,
                    too_slow=lambda size: UpstreamTimeout(
                        f"{self.url}{path}: no whole answer within {self.deadline:g} s "
                        f"({size} bytes read)"
                    ),
                )
                for chunk in response.iter_bytes():
                    if self.closing.is_set():  # given up: as if its deadline had passed
                        body.deadline = 0.0
                    body.add(chunk)
                return response.status_code, body.value(), response.headers.get(MIRROR_HEADER)
        except httpx.HTTPError as err:
            if self.pace is not None:  # no answer: a probe out is over
                self.pace.unanswered(self._host)
            raise UpstreamFailure(f"{self.url}: {type(err).__name__}: {err}") from None

    def _heard(self, response: httpx.Response) -> None:
        """What the directory answered, told to the pace: a pause it asked for (at most the
        pace's cap, POL-PARK-1), or an answer that ends a park whose probe this was."""
        if self.pace is None:
            return
        busy = response.status_code in (429, 503)
        text = response.headers.get("Retry-After") if busy else None
        pause = retry_after(text, cap=self.pace.max_park)
        self.pace.answered(self._host, refused=busy, pause=pause)

    def _take_turn(self) -> None:
        """Waits for a turn at the directory's rate; refuses while it asked for a pause."""
        if self.pace is None:
            return
        wait = self.pace.admit(self._host)
        while wait:
            self.closing.wait(wait)
            wait = self.pace.admit(self._host, again=True)
        if wait is None:
            raise refused(self.pace, self._host, self.url)

    def page(self, after: str, count: int = PAGE_SIZE) -> list[bytes]:
        status, body, provenance = self._answer("/export", {"count": str(count), "after": after})
        if status != 200:
            raise UpstreamFailure(f"{self.url}/export: HTTP {status}")
        self.view_age = view_age(provenance)
        return [line for line in body.split(b"\n") if line.strip()]

    def document(self, did: str) -> dict[str, Any] | None:
        """The upstream's document (None: it serves none: 404 or 410), read within the
        resolver's bounds on a document (bytes, nesting): a stranger's answer."""
        status, body, _ = self._answer(f"/{did}", cap=DOCUMENT_MAX_BYTES)
        if status in (404, 410):
            return None
        if status != 200:
            raise UpstreamFailure(f"{self.url}/{did}: HTTP {status}")
        document = parse_json(body)
        return document if isinstance(document, dict) else {}

    def audit_log(self, did: str) -> list[Any] | None:
        """The upstream's `/log/audit` of `did` (None: it knows no such DID: 404), within
        the resolver's bound on one DID's log."""
        status, body, _ = self._answer(f"/{did}/log/audit", cap=AUDIT_LOG_MAX_BYTES)
        if status == 404:
            return None
        if status != 200:
            raise UpstreamFailure(f"{self.url}/{did}/log/audit: HTTP {status}")
        entries = parse_json(body)
        if not isinstance(entries, list):
            raise UpstreamFailure(f"{self.url}/{did}/log/audit: not a list of operations")
        return entries

    def close(self) -> None:
        self.closing.set()
        self._client.close()


@dataclass(frozen=True, slots=True)
class PageOrder:
    """Where a page leaves the cursor (P-API-1): `usable` lines in order, the cursor after
    the last of them that parsed (None: none did), and why the rest is refused."""

    usable: int
    moved: tuple[str, str] | None
    fault: str | None = None


class _Position(NamedTuple):
    """Where a line says it is: its `seq` (None in the legacy format), its `createdAt`, and
    that time parsed (legacy lines only: a seq line is placed by its seq)."""

    seq: int | None
    created: str
    moment: datetime.datetime | None


def _position(line: bytes) -> _Position | None:
    """Where a line is, or None: it does not parse, or says neither a seq nor a time."""
    try:
        entry = parse_json(line)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    seq, created = entry.get("seq"), entry.get("createdAt")
    if isinstance(seq, int) and not isinstance(seq, bool) and 0 < seq <= 2**63 - 1:
        return _Position(seq, str(created or ""), None)
    if isinstance(created, str):
        try:
            return _Position(None, created, parse_time(created))
        except (ValueError, OverflowError):
            return None
    return None


def newest_seq(lines: list[bytes]) -> int | None:
    """The greatest `seq` among these lines (None: none says one), applied or not: how far
    the upstream has gone, as far as the mirror has seen."""
    seqs = [p.seq for p in map(_position, lines) if p is not None and p.seq is not None]
    return max(seqs, default=None)


def order_page(lines: list[bytes], cursor: str, *, seqs_only: bool = False) -> PageOrder:
    """Which lines of a page asked for after `cursor` may be applied: each must come after
    the cursor and after the line before it (a `seq` greater, a `createdAt` not earlier);
    once in sequence numbers (a cursor past 0, or a line with a `seq`; from the start with
    `seqs_only`, as on /export/stream), a line without one is out of order too (an
    upstream may move to sequence numbers, never back). The first line out of order ends
    the usable part, as an upstream fault."""
    last_seq = int(cursor) if cursor.isascii() and cursor.isdigit() else None
    in_seqs = last_seq is not None and (last_seq > 0 or seqs_only)
    last_time = None if last_seq is not None else _moment_or_none(cursor)
    moved: tuple[str, str] | None = None
    parsed: list[_Position] = []
    for index, line in enumerate(lines):
        position = _position(line)
        if position is None:
            continue  # evidence, and skipped: the verifier records it
        seq, created, moment = position
        if seq is not None:
            if last_seq is not None and seq <= last_seq:
                fault = f"line {index + 1}: seq {seq} is not after {last_seq}"
                return PageOrder(index, moved, fault)
            last_seq, in_seqs = seq, True
        elif in_seqs:
            fault = f"line {index + 1}: no seq after seq {last_seq}"
            return PageOrder(index, moved, fault)
        else:
            assert moment is not None  # a legacy line is placed by its time
            if last_time is not None and moment < last_time:
                fault = f"line {index + 1}: createdAt {created} goes back"
                return PageOrder(index, moved, fault)
            last_time = moment
        parsed.append(position)
        moved = (str(seq), created) if seq is not None else None
    if parsed and parsed[-1].seq is None:
        moved = _time_cursor(parsed)
    return PageOrder(len(lines), moved)


def _moment_or_none(stamp: str) -> datetime.datetime | None:
    """A time cursor's moment; None for the start ("", "0") or one that is not a time."""
    try:
        return parse_time(stamp) if stamp not in ("", "0") else None
    except (ValueError, OverflowError):
        return None


def _time_cursor(parsed: list[_Position]) -> tuple[str, str]:
    """The legacy format's cursor: the last `createdAt` less a millisecond (ops sharing
    the boundary's millisecond are served again and skipped as kept); past it when a whole
    page shares one millisecond, not to loop."""
    last = parsed[-1]
    if len(parsed) > 1 and parsed[0].created == last.created:
        return last.created, last.created
    assert last.moment is not None  # a legacy line
    earlier = last.moment - datetime.timedelta(milliseconds=1)
    stamp = earlier.astimezone(datetime.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z"), last.created


def next_cursor(lines: list[bytes]) -> tuple[str, str]:
    """(cursor, createdAt) after a page read from the start: its last parsed line's `seq`,
    or (legacy format) its last `createdAt` less a millisecond."""
    moved = order_page(lines, "0").moved
    if moved is None:
        raise ValueError("no line of the page says where it is")
    return moved
