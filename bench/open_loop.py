"""A fixed-rate load generator (open loop): request i is due at start + i / rate whatever the
answers before it did, and its latency counts from when it was due, so a server that falls
behind is charged for the queue it built (a closed loop such as wrk's stops asking while it
waits, and its p99 is bounded by Little's law instead).

    python -m bench.open_loop URL_BASE PATHS_FILE RATE SECONDS [CONNECTIONS [OUT]]

A line of PATHS_FILE is a path to GET, or `POST PATH JSON` (a body on one line).
prints one JSON line: sent, answered, non_2xx, errors, p50_ms, p99_ms, p999_ms, max_ms; and
with OUT, writes each answered request's due time (`time.monotonic`, which every process of
the machine shares) and latency in seconds there, as pairs of doubles (for a bench to split
the run into windows).
"""

from __future__ import annotations

import array
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit


async def _connection(
    host: str,
    port: int,
    queue: asyncio.Queue[tuple[float, bytes]],
    results: dict[str, list[float]],
    answered: array.array[float],
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    while True:
        due, request = await queue.get()
        try:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            latency = time.monotonic() - due
            results["latency" if 200 <= status < 300 else "non_2xx"].append(latency)
            answered.extend((due, latency))
        except (OSError, asyncio.IncompleteReadError, ValueError):
            results["errors"].append(0.0)
            writer.close()
            reader, writer = await asyncio.open_connection(host, port)
        finally:
            queue.task_done()


async def run(
    base: str,
    paths: list[str],
    rate: float,
    seconds: float,
    connections: int,
    answered: array.array[float],
) -> dict:
    parts = urlsplit(base)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    requests = [_request(line, f"{host}:{port}") for line in paths]
    random.Random(1).shuffle(requests)
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
    results: dict[str, list[float]] = {"latency": [], "non_2xx": [], "errors": []}
    workers = [
        asyncio.create_task(_connection(host, port, queue, results, answered))
        for _ in range(connections)
    ]
    total = int(rate * seconds)
    start = time.monotonic() + 0.1
    for i in range(total):
        due = start + i / rate
        wait = due - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        queue.put_nowait((due, requests[i % len(requests)]))
    await queue.join()
    for worker in workers:
        worker.cancel()
    latency = sorted(results["latency"])

    def at(fraction: float) -> float:
        return latency[min(len(latency) - 1, int(len(latency) * fraction))] * 1000

    return {
        "sent": total,
        "answered": len(latency),
        "non_2xx": len(results["non_2xx"]),
        "errors": len(results["errors"]),
        "p50_ms": at(0.5),
        "p99_ms": at(0.99),
        "p999_ms": at(0.999),
        "max_ms": latency[-1] * 1000,
    }


def _request(line: str, host: str) -> bytes:
    """A line of the paths file as a request: a path (GET), or `POST PATH JSON`."""
    if not line.startswith("POST "):
        return f"GET {line} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    _, path, body = line.split(" ", 2)
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    return f"{head}Content-Length: {len(body.encode())}\r\n\r\n{body}".encode()


def main() -> None:
    base, paths_file, rate, seconds = sys.argv[1:5]
    connections = int(sys.argv[5]) if len(sys.argv) > 5 else 100
    with open(paths_file) as listing:
        paths = [line.strip() for line in listing if line.strip()]
    answered: array.array[float] = array.array("d")
    result = asyncio.run(run(base, paths, float(rate), float(seconds), connections, answered))
    if len(sys.argv) > 6:
        Path(sys.argv[6]).write_bytes(answered.tobytes())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
