"""A Redis Cluster (`RedisClusterStore`, redis-py's own cluster client) is `RedisStore` over
another client; what differs is only what a cluster must: the walk of the old keys goes
shard by shard, a notice follows its write (a cluster's pipeline takes no PUBLISH) from the
node that took it, and the subscription watches the masters. Every operation touches one
key, or one key per command (a pipeline's HDELs), so no key needs a hash tag but a nonce
share's (`{nonce:SHARE}`, one script over one key). Notices are plain PUBLISH, which a cluster
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
import random
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from atwhois.foundation.defaults import MAX_CONCURRENCY, REDIS_BUCKETS
from atwhois.resolver.errors import AtwhoisError

from .redis import RedisStore, glob_escaped


class BadClusterUrl(AtwhoisError, ValueError):
    """A Redis Cluster's URL that cannot be used as it is: it names a database (a cluster
    has database 0 only), or a node that is not HOST:PORT."""


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

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "atwhois:",
        timeout: float = 0.5,
        buckets: int = REDIS_BUCKETS,
    ) -> None:
        super().__init__(url, prefix=prefix, timeout=timeout, buckets=buckets)
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

    async def _walk_old(self, prefix: str, limit: int, position: str) -> tuple[list[str], str]:
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
        else:  # a new walk
            cursor = "0"
        name, slot = shards[at]
        pattern = glob_escaped(self.prefix + prefix) + "*"
        node = self._redis.get_node(node_name=name)
        cursors, keys = await self._redis.scan(
            int(cursor), match=pattern, count=limit, _type="string", target_nodes=node
        )
        page = self._entry_keys(keys)
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
