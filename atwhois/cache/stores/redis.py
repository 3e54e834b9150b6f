"""Redis, for several daemons sharing one cache. Keys carry a prefix, so instances (and test
runs) can share a server without colliding; Redis expires entries itself.

Every write also publishes its keys on `<prefix>changes`, so each daemon's memory tier drops
what another daemon changed as soon as it is told (`watch`). Commands fail fast (a short
timeout, no retries): the memory tier in front answers while Redis is away.

The nonces seen (`nonces`, SA-JTI-2) are apart from the entries: a sorted set per share,
changed by one script, published to no one (no memory tier keeps them).

A Redis Cluster (`RedisClusterStore`, redis-py's own cluster client) is the same store over
another client; what differs is only what a cluster must: the walk goes shard by shard, a
notice follows its write (a cluster's pipeline takes no PUBLISH) from the node that took it,
and the subscription watches the masters. Every operation touches one key, or one key per
command (a pipeline's DELs), so no key needs a hash tag but a nonce share's
(`{nonce:SHARE}`, one script over one key). Notices are plain PUBLISH, which a cluster
carries to every node: each daemon hears them on whichever node it subscribed to, one
subscription, moved to another node when that one fails. (Sharded SPUBLISH would keep a
notice on its shard: a daemon would subscribe to every shard and follow their failovers,
for less traffic on the cluster's bus than a cache's writes make.) When the masters change
(a failover), writes a master acknowledged may not have reached the replica that took over,
and notices sent meanwhile may be lost: the subscription is given up and counted
(`failovers`), so the memory tier reads again what it holds and one daemon of the fleet
re-verifies every identity held, at its paced share (`cache.sweep`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from atwhois.foundation.defaults import MAX_CONCURRENCY
from atwhois.resolver.errors import AtwhoisError

from .base import OnChange, Stored
from .nonces import Claim, NoncesUnavailable

_CONNECTIONS = 100  # to the server at once, from one process
_SILENCE = 1.0  # seconds without a message before the subscription is pinged
_DEAD = 3.0  # seconds without any message (not even a pong) before it is given up


class RedisStore:
    """The cache's entries on a Redis server, shared by the daemons that name it (the
    `redis` extra): each change is heard by the others; a command that waits past its
    short timeout fails at once, and the memory tier in front answers meanwhile."""

    name = "redis"
    failovers = 0  # one server: its writes are not lost to a failover

    def __init__(self, url: str, *, prefix: str = "atwhois:", timeout: float = 0.5) -> None:
        self.prefix = prefix
        self.channel = prefix + "changes"
        self._origin = os.urandom(8).hex().encode()  # our own notices are not news to us
        # a server's client or a cluster's: the commands used are the same
        self._redis: Any = self._client(url, timeout)

    @staticmethod
    def _client(url: str, timeout: float) -> Any:
        # A burst of commands (the daemon serves 256 requests at once) waits its turn for one
        # of the pool's connections, within the command timeout: redis-py's default pool
        # fails a command at once past 100 in use ("Too many connections").
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=_CONNECTIONS,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
        return aioredis.Redis.from_pool(pool)

    async def get(self, key: str) -> Stored | None:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(self.prefix + key)
            pipe.pexpiretime(self.prefix + key)
            value, expires_ms = await pipe.execute()
        if not isinstance(value, bytes) or expires_ms < 0:
            return None
        return Stored(value, expires_ms / 1000)

    async def put(self, key: str, value: bytes, expires_at: float) -> None:
        def write(pipe: Any) -> None:
            pipe.set(self.prefix + key, value, pxat=int(expires_at * 1000))

        await self._written(write, [key])

    async def _written(self, write: Callable[[Any], None], keys: list[str]) -> None:
        """`write`'s commands and, after them, the notice of `keys`: one round trip."""
        async with self._redis.pipeline(transaction=False) as pipe:
            write(pipe)
            pipe.publish(self.channel, self._notice(keys))
            await pipe.execute()

    def nonces(self) -> RedisNonces:
        """The nonces seen, under this prefix: every daemon on the server sees them."""
        return RedisNonces(self._redis, self.prefix)

    async def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)

        def write(pipe: Any) -> None:
            for key in keys:  # a DEL each: a cluster holds them on several nodes
                pipe.delete(self.prefix + key)

        if keys:
            await self._written(write, keys)

    def _notice(self, keys: list[str]) -> bytes:
        return b"\n".join([self._origin, *(k.encode() for k in keys)])

    async def count(self) -> int:
        nonces = (self.prefix + "{").encode()  # the nonces' keys (`nonces`) are no entries
        keys = self._redis.scan_iter(match=self.prefix + "*", count=1000)
        return sum([1 async for key in keys if not key.startswith(nonces)])

    async def scan(self, prefix: str, limit: int) -> list[tuple[str, bytes]]:
        pattern = _glob_escaped(self.prefix + prefix) + "*"
        keys: list[bytes] = []
        async for key in self._redis.scan_iter(match=pattern, count=1000):
            keys.append(key)
            if len(keys) >= limit:
                break
        found: list[tuple[str, bytes]] = []
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            async with self._redis.pipeline(transaction=False) as pipe:
                for key in chunk:  # a GET each (not MGET): a cluster holds them on several nodes
                    pipe.get(key)
                values = await pipe.execute()
            found += [
                (key.decode()[len(self.prefix) :], value)
                for key, value in zip(chunk, values, strict=True)
                if isinstance(value, bytes)  # expired between the scan and the read
            ]
        return found

    async def walk(self, prefix: str, limit: int, position: str = "") -> tuple[list[str], str]:
        # Redis's own walk (SCAN): its cursor is the position, `limit` the count it is given
        # (a hint: a page may hold a few more, or none while the walk goes on)
        pattern = _glob_escaped(self.prefix + prefix) + "*"
        start = int(position) if position.isdigit() else 0
        cursor, keys = await self._redis.scan(start, match=pattern, count=limit)
        names = [key.decode() if isinstance(key, bytes) else key for key in keys]
        page = [name[len(self.prefix) :] for name in names]
        return page, "" if int(cursor) == 0 else str(cursor)

    async def watch(self, on_change: OnChange, ready: Callable[[], Awaitable[None]]) -> None:
        pubsub = await self._subscription()
        try:
            await pubsub.subscribe(self.channel)
            await self._masters_changed()  # a change while nobody followed: counted
            await ready()
            loop = asyncio.get_running_loop()
            heard = looked = loop.time()
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
                now = loop.time()
                if now - looked > _SILENCE:
                    looked = now
                    if await self._masters_changed():
                        raise FailedOver(f"the masters changed under {self.channel}")
                if message is not None:
                    heard = now
                    if message["type"] == "message":
                        origin, *keys = bytes(message["data"]).split(b"\n")
                        if origin != self._origin:
                            on_change([k.decode() for k in keys])
                elif now - heard > _DEAD:
                    raise TimeoutError(f"no word from Redis on {self.channel} for {_DEAD:.0f}s")
                elif now - heard > _SILENCE:
                    await pubsub.ping()
        finally:
            # The connection may be gone already, or held by the read a cancellation just
            # interrupted: redis-py's close then waits on it for good, and so would a
            # daemon's shutdown (a tier closed while another process's change was arriving).
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pubsub.aclose(), _CLOSE_WITHIN)

    async def _subscription(self) -> Any:
        return self._redis.pubsub()

    async def _masters_changed(self) -> bool:
        """Whether the masters changed since last looked (one server: never)."""
        return False

    async def close(self) -> None:
        await self._redis.aclose()


_CLOSE_WITHIN = 2.0  # seconds a subscription's close may take


def _glob_escaped(text: str) -> str:
    """`text` matched literally by a Redis glob pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


# KEYS[1]: the share's sorted set (member: a nonce; score: when it expires, in ms).
# ARGV: the nonce, its expiry (ms), now (ms), the share's limit.
_CLAIM = """
local share = KEYS[1]
redis.call('ZREMRANGEBYSCORE', share, '-inf', ARGV[3])
if redis.call('ZSCORE', share, ARGV[1]) then return 'seen' end
if redis.call('ZCARD', share) >= tonumber(ARGV[4]) then return 'share' end
redis.call('ZADD', share, ARGV[2], ARGV[1])
local last = redis.call('ZRANGE', share, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', share, last[2])
return 'first'
"""
_CLAIMS: dict[object, Claim] = {b"first": "first", b"seen": "seen", b"share": "share"}


class RedisNonces:
    """In Redis (`RedisStore.nonces`), which every daemon on it shares: one sorted set per
    share, changed by one script (atomic); the set expires with its last nonce."""

    name = "redis"
    shared = True

    def __init__(self, client: aioredis.Redis | RedisCluster, prefix: str) -> None:
        self._prefix = prefix
        self._claim = client.register_script(_CLAIM)

    def key(self, share: str) -> str:
        return f"{self._prefix}{{nonce:{share}}}"

    async def claim(
        self, share: str, nonce: str, expires_at: float, limit: int, now: float
    ) -> Claim:
        args: list[str | int] = [nonce, int(expires_at * 1000), int(now * 1000), limit]
        try:
            answer = await self._claim(keys=[self.key(share)], args=args)
        except (RedisError, OSError) as err:  # unreachable, too slow, the script refused
            raise NoncesUnavailable(f"Redis: {err}") from err
        claim = _CLAIMS.get(answer)
        if claim is None:
            raise NoncesUnavailable(f"Redis: the nonce script answered {str(answer)[:40]}")
        return claim


class BadClusterUrl(AtwhoisError, ValueError):
    """A Redis Cluster's URL that cannot be used as it is: it names a database (a cluster
    has database 0 only), or a node that is not HOST:PORT."""


class FailedOver(AtwhoisError):
    """A cluster's masters changed while its notices were followed: some may be lost."""


_SLOTS = 16384  # a cluster's hash slots
_FAILOVER_KEPT_MS = 3600_000  # how long the fleet remembers who re-verifies after a failover
_MARK_TRIES, _MARK_RETRY = 5, 0.5  # tries at marking a failover, and seconds between them


def cluster_nodes(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """The nodes of `redis-cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…]` (or
    `rediss-cluster://`, over TLS) and the client's settings the URL gives."""
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    if parts.path.strip("/"):
        raise BadClusterUrl(
            f"cache {url!r}: a Redis Cluster has no database number "
            f"({parts.path.strip('/')!r}): give HOST:PORT[,HOST:PORT…] only"
        )
    nodes = []
    for node in hosts.split(","):
        host, _, port = node.strip().rpartition(":")
        if not host or not port.isdigit():
            raise BadClusterUrl(f"cache {url!r}: {node!r} is not HOST:PORT")
        nodes.append((host.strip("[]"), int(port)))
    user, _, password = userinfo.partition(":")
    settings: dict[str, Any] = {"ssl": parts.scheme == "rediss-cluster"}
    if user:
        settings["username"] = unquote(user)
    if password:
        settings["password"] = unquote(password)
    return nodes, settings


class RedisClusterStore(RedisStore):
    """The cache's entries on a Redis Cluster (`redis-cluster://HOST:PORT[,…]`), through
    redis-py's cluster client: what `RedisStore` does, shard by shard where it must."""

    name = "redis-cluster"
    # Tried again a fifth of a second after a failure, not a second (`TieredStore`): no one
    # tells the tier when a replica took over, and what it writes until it tries again is
    # written nowhere, then deleted from the cluster once it answers (the fleet's pass
    # would walk a cluster emptied of what it held). A failing node refuses at once or
    # within the command timeout; the other masters answer at once.
    retry_after = 0.2

    def __init__(self, url: str, *, prefix: str = "atwhois:", timeout: float = 0.5) -> None:
        super().__init__(url, prefix=prefix, timeout=timeout)
        self.failovers = 0  # failovers after which this daemon re-verifies for the fleet
        self._masters: frozenset[str] | None = None  # the masters' IDs last seen
        self._listening: ClusterNode | None = None  # the node subscribed to

    @staticmethod
    def _client(url: str, timeout: float) -> Any:
        nodes, settings = cluster_nodes(url)
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in nodes],
            # per node, and a command past them fails: room for every request at once
            max_connections=2 * MAX_CONCURRENCY,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),  # the memory tier answers meanwhile
            # A command's failure has the slot map read again at the next command, not a
            # second after the last reading (redis-py's pace): the tier already leaves a
            # failing store alone a second, and the two paces added up kept a daemon
            # writing to the master gone for seconds after a replica took over. Each such
            # write is deleted from the cluster once it answers again: the fleet's pass
            # then walked a cluster emptied of what it held (issue 69).
            topology_refresh_min_interval=0,
            **settings,
        )

    async def _written(self, write: Callable[[Any], None], keys: list[str]) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            write(pipe)
            await pipe.execute()
        # after the write is taken, not before (a daemon told early would read the old
        # value again, and keep it); from the node that took it, alive a moment ago
        node = self._redis.get_node_from_key(self.prefix + keys[0])
        await self._redis.publish(self.channel, self._notice(keys), target_nodes=node)

    async def walk(self, prefix: str, limit: int, position: str = "") -> tuple[list[str], str]:
        # Each master's SCAN in turn, the masters in the order of their slots. A position
        # is a master's first slot and its cursor: after a failover the replica that took
        # over holds the same slots (its cursor may show a key twice, which a walk may).
        await self._redis.initialize()
        firsts: dict[str, int] = {}
        for slot in range(_SLOTS):
            owners = self._redis.nodes_manager.slots_cache.get(slot)
            if owners:
                firsts.setdefault(owners[0].name, slot)
        shards = sorted(firsts.items(), key=lambda shard: shard[1])
        first, _, cursor = position.partition(":")
        at = 0  # the master holding the position's slot now
        if first.isdigit() and cursor.isdigit():
            at = max((i for i, (_, held) in enumerate(shards) if held <= int(first)), default=0)
        else:  # a new walk, or a position another store gave
            cursor = "0"
        name, slot = shards[at]
        pattern = _glob_escaped(self.prefix + prefix) + "*"
        node = self._redis.get_node(node_name=name)
        cursors, keys = await self._redis.scan(
            int(cursor), match=pattern, count=limit, target_nodes=node
        )
        page = [bytes(key).decode()[len(self.prefix) :] for key in keys]
        following = int(next(iter(cursors.values())))
        if following:
            return page, f"{slot}:{following}"
        return page, f"{shards[at + 1][1]}:0" if at + 1 < len(shards) else ""

    async def _subscription(self) -> Any:
        # any node hears every PUBLISH; the fleet's subscriptions spread over them
        await self._redis.initialize()
        self._listening = random.choice(self._redis.get_nodes())
        return self._redis.pubsub(node=self._listening)

    async def _masters_changed(self) -> bool:
        # asked of the node listened to: alive while the subscription is (another may be
        # the one that failed, and its silence would be no news of the masters)
        described = await self._redis.execute_command("CLUSTER NODES", target_nodes=self._listening)
        masters = frozenset(
            node["node_id"]
            for node in described.values()
            if "master" in node["flags"].split(",") and node["slots"]
        )
        before, self._masters = self._masters, masters
        if before is None or before == masters:
            return False
        # the client learns them now, not after its commands to the master gone failed:
        # the pass re-verifying what is held walks them at once
        with contextlib.suppress(RedisError, OSError):
            await self._redis.nodes_manager.initialize()
        if await self._first_to_hear(masters):
            self.failovers += 1
        return True

    async def _first_to_hear(self, masters: frozenset[str]) -> bool:
        """Whether this daemon is the fleet's first to see these masters: it re-verifies
        what the fleet holds, once, not every daemon (unsure: it does)."""
        named = hashlib.sha256(" ".join(sorted(masters)).encode()).hexdigest()[:16]
        key = f"{self.prefix}{{failover:{named}}}"  # braced: not counted as an entry
        for _ in range(_MARK_TRIES):
            try:
                return bool(await self._redis.set(key, self._origin, nx=True, px=_FAILOVER_KEPT_MS))
            except (RedisError, OSError):  # its slot's master not known yet: the client
                await asyncio.sleep(_MARK_RETRY)  # learns the new masters as it fails
        return True
