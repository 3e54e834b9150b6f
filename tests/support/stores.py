"""Reading a store whole, as a test checks what it holds."""

from __future__ import annotations

from atwhois.cache import Store


async def walk_all(store: Store, prefix: str, page: int) -> list[str]:
    """Every key under `prefix`, walked `page` at a time from the start to the walk's end."""
    keys: list[str] = []
    position = ""
    while True:
        found, position = await store.walk(prefix, page, position)
        keys += found
        if not position:
            return keys
