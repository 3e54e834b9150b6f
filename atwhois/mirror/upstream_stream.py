"""The upstream's `/export/stream` (P-API-3) as the follower reads it, on its own thread:
connect from the stored `seq`, take the messages in batches, tell a close's reason apart.
What the messages say is judged as a page's lines are (`upstream.order_page`, the
verifier): here only the WebSocket, with a deadline to connect, a size cap per message,
and pings that prove the connection alive.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit, urlunsplit

import websockets
from websockets.sync.client import ClientConnection, connect

from atwhois.foundation.version import agent
from atwhois.resolver.errors import UpstreamFailure

# The reasons a stream is closed with (P-API-3), which the follower tells apart.
FUTURE, OUTDATED, TOO_SLOW = "FutureCursor", "OutdatedCursor", "ConsumerTooSlow"
MAX_MESSAGE = 1024 * 1024  # bytes: an operation is a few KB; the reference caps ops at 7,500
OPEN_TIMEOUT = 10.0
PING_TIMEOUT = 10.0
# handshake answers that mean "no stream here" (an older directory): follow by polling
NO_STREAM = frozenset({400, 404, 405, 410, 426, 501})


class StreamUnavailable(UpstreamFailure):
    """The upstream serves no `/export/stream`: the follower polls `/export` instead."""


class StreamClosed(UpstreamFailure):
    """The upstream closed the stream; `reason` is the close's (`FutureCursor`, …)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class UpstreamStream:
    def __init__(self, url: str, *, user_agent: str | None = None) -> None:
        parts = urlsplit(url.rstrip("/"))
        scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
        self.url = urlunsplit((scheme, parts.netloc, parts.path + "/export/stream", "", ""))
        self.user_agent = user_agent or agent()
        self._socket: ClientConnection | None = None

    def open(self, cursor: str) -> None:
        """Connects from `cursor` (a seq). Raises `StreamUnavailable` when the upstream has
        no stream, `UpstreamFailure` when it cannot be reached."""
        self.close()
        try:
            self._socket = connect(
                f"{self.url}?cursor={cursor}",
                open_timeout=OPEN_TIMEOUT,
                max_size=MAX_MESSAGE,
                user_agent_header=self.user_agent,
                ping_interval=None,  # the follower pings when it needs to know (`alive`)
                close_timeout=2.0,
                compression=None,
                legacy=True,  # kept open across calls, closed by `close`
            )
        except websockets.exceptions.InvalidStatus as err:
            status = err.response.status_code
            if status in NO_STREAM:
                raise StreamUnavailable(f"{self.url}: no stream here (HTTP {status})") from None
            raise UpstreamFailure(f"{self.url}: HTTP {status}") from None
        except (OSError, TimeoutError, websockets.exceptions.WebSocketException) as err:
            raise UpstreamFailure(f"{self.url}: {type(err).__name__}: {err}") from None

    def receive(self, most: int, wait: float) -> list[bytes]:
        """Up to `most` messages: those that come within `wait` seconds of the first look
        (none: an empty list). Raises `StreamClosed` when the stream ends."""
        socket = self._connected()
        lines: list[bytes] = []
        give_up = time.monotonic() + wait
        while len(lines) < most:
            left = give_up - time.monotonic()
            try:
                message = socket.recv(timeout=max(left, 0.0))
            except TimeoutError:
                break
            except websockets.exceptions.ConnectionClosed as err:
                if lines:  # what came before the close is kept; the close is read next time
                    break
                raise _closed(self.url, err) from None
            lines.append(message.encode() if isinstance(message, str) else message)
        return lines

    def alive(self) -> bool:
        """A ping answered: everything the upstream sent before it has been read (one
        connection keeps its order)."""
        socket = self._connected()
        try:
            return socket.ping().wait(PING_TIMEOUT)
        except websockets.exceptions.ConnectionClosed as err:
            raise _closed(self.url, err) from None

    def _connected(self) -> ClientConnection:
        if self._socket is None:
            raise UpstreamFailure(f"{self.url}: not connected")
        return self._socket

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def _closed(url: str, err: websockets.exceptions.ConnectionClosed) -> StreamClosed:
    reason = err.rcvd.reason if err.rcvd is not None else ""
    code = err.rcvd.code if err.rcvd is not None else "none"
    return StreamClosed(f"{url} closed the stream (code {code}) {reason}".strip(), reason)
