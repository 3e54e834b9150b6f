"""What a bucket of `RedisStore` holds, and the move into buckets of a cache written a key
per entry (before issue 69).

A field's value is the entry's expiry (6 bytes, milliseconds) then its bytes; a bucket lives
as long as its latest field. The move goes on in place while the fleet serves from the
cache: one daemon at a time moves (a claim with a lease, renewed each step; another takes
over once it lapses), a page of old keys a step, paced; each entry is copied into its bucket
unless a newer write is there, then its old key deleted if it still holds what was copied (a
purge meanwhile deleted it: the copy is taken back). The others look now and then whether
the move is done: until then their reads of an absent field read the old key too
(`RedisStore.moving`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError

from .base import Stored

log = logging.getLogger("atwhois.cache")

_EXPIRY_BYTES = 6  # an entry's expiry before its bytes, in milliseconds: until year 10889
# A bucket's expiry is set only this far ahead of now or more: a time the server's clock has
# passed would delete the bucket, with the other entries it holds.
_BUCKET_EXPIRY_MARGIN_MS = 5000

_MOVE_BATCH = 500  # old keys a step of the move reads (`Move._step`)
_MOVE_PAUSE = 0.1  # seconds between steps of the move: 5,000 keys a second at most
_MOVE_LEASE_MS = 30_000  # a mover's claim, renewed each step: another takes over after it
_MOVE_LOOK = 5.0  # seconds between looks, by a daemon not moving, at whether the move is done

# KEYS[1]: a key; ARGV[1]: a value. Deletes the key if it holds the value still (1), else 0.
_DELETE_IF = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# KEYS[1]: a bucket; ARGV[1]: a field, ARGV[2]: a value. Deletes the field if it holds it.
_HDELETE_IF = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
"""


def packed(value: bytes, expires_at: float) -> bytes:
    """A field's value: the entry's expiry (ms), then its bytes."""
    ms = min(max(int(expires_at * 1000), 0), (1 << 8 * _EXPIRY_BYTES) - 1)
    return ms.to_bytes(_EXPIRY_BYTES, "big") + value


def bucket_expiry_set(pipe: Any, bucket: str, expires_ms: int, now: float) -> None:
    """Adds to `pipe` what makes `bucket` live at least until `expires_ms`, as long as its
    latest field; nothing for a time too near (the server's clock may have passed it, and
    the bucket would go with every field it holds: the sweep deletes the field)."""
    if expires_ms > now * 1000 + _BUCKET_EXPIRY_MARGIN_MS:
        pipe.pexpireat(bucket, expires_ms, nx=True)  # GT takes no expiry as infinite
        pipe.pexpireat(bucket, expires_ms, gt=True)


def unpacked(raw: object, now: float) -> Stored | None:
    """The entry a field's value holds, or None when absent or past its expiry."""
    if not isinstance(raw, bytes) or len(raw) < _EXPIRY_BYTES:
        return None
    expires_at = int.from_bytes(raw[:_EXPIRY_BYTES], "big") / 1000
    return Stored(raw[_EXPIRY_BYTES:], expires_at) if expires_at > now else None


# a page of old keys from a position ("": the start), and the next position ("": the end)
WalkOld = Callable[[str, int, str], Awaitable[tuple[list[str], str]]]


class Move:
    """The move as one daemon takes part in it (`run`): its steps while it holds the claim,
    else a look at whether it is done every `_MOVE_LOOK` seconds."""

    def __init__(
        self,
        redis: Any,
        prefix: str,
        origin: bytes,
        walk_old: WalkOld,
        bucket: Callable[[str], str],
    ) -> None:
        self._redis, self._prefix, self._origin = redis, prefix, origin
        self._walk_old, self._bucket = walk_old, bucket
        self.marker = prefix + "{moving}"  # while the move is not done
        self._claim = prefix + "{mover}"
        self.moved = 0  # old keys this daemon moved into buckets
        self._delete_if = redis.register_script(_DELETE_IF)
        self._hdelete_if = redis.register_script(_HDELETE_IF)

    async def run(self) -> None:
        """Until the move is done, by this daemon or another."""
        redis, position = self._redis, ""
        while True:
            try:
                mine = await redis.set(self._claim, self._origin, nx=True, px=_MOVE_LEASE_MS)
                if not mine and await redis.get(self._claim) == self._origin:
                    mine = await redis.pexpire(self._claim, _MOVE_LEASE_MS)
                if not mine:
                    position = ""  # another daemon's move: this one's starts anew, if ever
                    await asyncio.sleep(_MOVE_LOOK)
                    if not await redis.exists(self.marker):
                        return
                    continue
                position = await self._step(position)
                if position == "":  # every old key seen: the move is done
                    await redis.delete(self.marker)
                    await self._delete_if(keys=[self._claim], args=[self._origin])
                    log.info("cache %s: %d entries moved into buckets", self._prefix, self.moved)
                    return
                await asyncio.sleep(_MOVE_PAUSE)
            except (RedisError, OSError):  # Redis away: tried again in a while
                await asyncio.sleep(_MOVE_LOOK)

    async def _step(self, position: str) -> str:
        """Moves a page of old keys from `position` ("": the start) into their buckets;
        the position of the next ("" once the old keys are all seen)."""
        keys, following = await self._walk_old("", _MOVE_BATCH, position or "0")
        if not keys:
            return following
        redis, prefix = self._redis, self._prefix
        async with redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.get(prefix + key)
                pipe.pexpiretime(prefix + key)
            read = await pipe.execute()
        held = [
            (key, value, expires_ms)
            for key, value, expires_ms in zip(keys, read[::2], read[1::2], strict=True)
            if isinstance(value, bytes) and expires_ms >= 0
        ]
        now = time.time()
        async with redis.pipeline(transaction=False) as pipe:
            for key, value, expires_ms in held:
                bucket = self._bucket(key)
                pipe.hsetnx(bucket, key, packed(value, expires_ms / 1000))  # a newer write stays
                bucket_expiry_set(pipe, bucket, expires_ms, now)
            await pipe.execute()
        for key, value, expires_ms in held:
            if await self._delete_if(keys=[prefix + key], args=[value]):
                self.moved += 1
            elif await redis.get(prefix + key) is None:
                # deleted since it was read (a purge deletes both): not brought back
                field = packed(value, expires_ms / 1000)
                await self._hdelete_if(keys=[self._bucket(key)], args=[key, field])
        return following
