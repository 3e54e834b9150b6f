"""The cache entries of the network-shaped world's identities (`world.shaped_handle`), as a
daemon keeps them once it resolved and verified each: its handle's resolution and its DID's
document, with the evidence, times and document form the resolver gives on the live network
(plc.directory's `Multikey` documents, PDS hosts named as Bluesky's are). Made without a
network or a signature, a million in a minute: what `bench store` fills each store with,
and what the store's tests read back.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Iterator
from typing import NamedTuple

from atwhois.cache.entry import Entry
from atwhois.cache.keys import did_key, handle_key
from atwhois.cache.policy import VERIFIED
from atwhois.resolver.keys import b58encode
from devnet import world

DIRECTORY = "https://plc.directory/"
# Bluesky's PDS hosts are named after mushrooms, in a few regions.
_MUSHROOMS = [
    "amanita",
    "agaric",
    "blewit",
    "boletus",
    "chanterelle",
    "cordyceps",
    "enoki",
    "fuzzyfoot",
    "hedgehog",
    "inkcap",
    "lionsmane",
    "maitake",
    "morel",
    "oyster",
    "porcini",
    "puffball",
    "russula",
    "shiitake",
    "shimeji",
    "truffle",
]
_HOSTS = [
    f"https://{name}.{region}.host.bsky.network"
    for name in _MUSHROOMS
    for region in ("us-east", "us-west")
]
_K256 = b"\xe7\x01"  # multicodec of a compressed secp256k1 key (CRYPTO-ENC-1)


class Shaped(NamedTuple):
    did: str
    handle: str
    pds: str
    key: bytes  # the signing key, compressed (33 bytes)
    entries: list[tuple[str, Entry]]  # (key, entry): the handle's, then the DID's


def shaped(index: int, checked_at: float | None = None) -> Shaped:
    """Identity `index` of the network-shaped world, with its two entries as kept when it
    was resolved at `checked_at` (default: a moment of the last ten minutes, fixed per
    index: fresh)."""
    handle = world.shaped_handle(index)
    digest = hashlib.sha256(handle.encode()).digest()
    if checked_at is None:
        checked_at = time.time() - int.from_bytes(digest[:2]) % 600 - 0.123456
    plc = not handle.endswith(world.BULK_SUFFIX)
    did = (
        "did:plc:" + base64.b32encode(digest[:15]).decode().lower() if plc else f"did:web:{handle}"
    )
    key = bytes([2 + digest[15] % 2]) + hashlib.sha256(digest).digest()
    pds = _HOSTS[int.from_bytes(digest[16:18]) % len(_HOSTS)]
    if world.shaped_pds(handle) and not world.shaped_pds(handle).startswith("bsky."):
        pds = "https://" + world.shaped_pds(handle)
    own = not world.shaped_pds(handle)
    ms = 5 + digest[18] % 200 + digest[19] / 256
    dns = {
        "outcome": "ok" if own else "not_found",
        "dids": [did] if own else [],
        "error": None if own else f"_atproto.{handle}: NXDOMAIN",
        "error_kind": None if own else "NotFound",
        "ms": round(ms, 2),
        "source": f"_atproto.{handle}",
        "via": None,
    }
    https = {
        "outcome": "not_found" if own else "ok",
        "dids": [] if own else [did],
        "error": f"{handle}: NXDOMAIN" if own else None,
        "error_kind": "NotFound" if own else None,
        "ms": round(ms * 3.1, 2),
        "source": f"https://{handle}/.well-known/atproto-did",
        "via": None,
    }
    multikey = "z" + b58encode(_K256 + key)
    body = _plc_document(did, handle, multikey, pds) if plc else _web_document(handle, multikey)
    evidence = {
        "outcome": "ok",
        "dids": [did],
        "error": None,
        "error_kind": None,
        "ms": round(ms * 1.7, 2),
        "source": DIRECTORY + did if plc else f"https://{handle}/.well-known/did.json",
        "via": None,
    }
    skipped = dict.fromkeys(evidence) | {"outcome": "skipped", "dids": []}
    document = {
        "did": did,
        "evidence": evidence,
        "plc": skipped,
        "plc_findings": [],
        "rotation_keys": [],
        "history": None,
    }
    resolution = {"handle": handle, "dns": dns, "https": https}
    fresh, stale = checked_at + VERIFIED.fresh, checked_at + VERIFIED.max_age
    entries = [
        (handle_key(handle), Entry(resolution, checked_at, fresh, stale)),
        (did_key(did), Entry(document, checked_at, fresh, stale, body=body)),
    ]
    return Shaped(did, handle, pds, key, entries)


def shaped_world(identities: int, start: int = 0) -> Iterator[Shaped]:
    for index in range(start, start + identities):
        yield shaped(index)


def _plc_document(did: str, handle: str, multikey: str, pds: str) -> bytes:
    """As plc.directory serves it (P-DOC-1: the `Multikey` form)."""
    return (
        '{"@context":["https://www.w3.org/ns/did/v1","https://w3id.org/security/multikey/v1",'
        f'"https://w3id.org/security/suites/secp256k1-2019/v1"],"id":"{did}","alsoKnownAs":'
        f'["at://{handle}"],"verificationMethod":[{{"id":"{did}#atproto","type":"Multikey",'
        f'"controller":"{did}","publicKeyMultibase":"{multikey}"}}],"service":[{{"id":'
        '"#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":'
        f'"{pds}"}}]}}'
    ).encode()


def _web_document(host: str, multikey: str) -> bytes:
    """A did:web's, as its own host writes it (whitespace and all: no form to rebuild)."""
    did = f"did:web:{host}"
    return (
        f'{{\n  "@context": ["https://www.w3.org/ns/did/v1"],\n  "id": "{did}",\n'
        f'  "alsoKnownAs": ["at://{host}"],\n  "verificationMethod": [{{"id": "{did}#atproto",'
        f' "type": "Multikey", "controller": "{did}", "publicKeyMultibase": "{multikey}"}}],\n'
        f'  "service": [{{"id": "#atproto_pds", "type": "AtprotoPersonalDataServer",'
        f' "serviceEndpoint": "https://{host}"}}]\n}}\n'
    ).encode()
