"""The nonces seen (`RedisStore.nonces`, SA-JTI-2), apart from the cache's entries: a
sorted set per share, changed by one script, published to no one (no memory tier keeps
them); on a cluster, a share's key is hash-tagged (`{nonce:SHARE}`: one script over one
key)."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from .nonces import Claim, NoncesUnavailable

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

    def __init__(self, client: Redis | RedisCluster, prefix: str) -> None:
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
