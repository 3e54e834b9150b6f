"""How a cache entry without a compact form (`compact`: a binding that did not verify, a
document of no standard form) is packed into bytes whole: deflated against a preset
dictionary of what every entry repeats (its field names, a DID document's context URLs and
key types, the evidence of each method). Two entries differ mostly in a DID, a handle, a
key and times: the dictionary takes a did:web identity's two entries from 735 bytes (plain
deflate) to 373, in every store and in the memory tier. Every entry was kept so before
issue 69; such entries are still read.

The dictionary is part of the format, as zlib records it: a stream names the dictionary it
needs (its Adler-32), so an entry packed with another one is refused as unreadable (and
dropped and resolved again by the cache), never misread. Never edit `DICTIONARY`: add a
new one and keep reading the old.
"""

from __future__ import annotations

import zlib

from atwhois.resolver.errors import AtwhoisError

_LEVEL = 1  # the dictionary does most of the work; higher levels gained a few bytes at 2x the time

# zlib finds a match fastest and codes it shortest when it is near the end of the dictionary:
# the rarest fragments first, the ones every entry has last.
DICTIONARY = "".join(
    [
        '"type":"EcdsaSecp256r1VerificationKey2019","publicKeyMultibase":"zDn',
        '"type":"EcdsaSecp256k1VerificationKey2019","publicKeyMultibase":"zQ3sh',
        '"https://w3id.org/security/suites/secp256k1-2019/v1"',
        '"https://w3id.org/security/suites/ecdsa-2019/v1"',
        '"outcome":"not_found","dids":[],"error":"',
        '"outcome":"timeout","dids":[],"error":"',
        '"outcome":"invalid","dids":[],"error":"',
        '"outcome":"unavailable","dids":[],"error":"',
        '"error_kind":"transient","ms":',
        '"refresh_error":"',
        '"history":[{"cid":"',
        '"rotation_keys":["did:key:zQ3sh',
        '"plc_findings":[],"rotation_keys":[],"history":null},',
        '.host.bsky.network"}]}',
        '"serviceEndpoint":"https://bsky.social"}]}',
        '"via":"https://plc.directory"},',
        '"source":"https://plc.directory/did:plc:',
        '{"part":{"handle":"',
        '","dns":{"outcome":"ok","dids":["did:plc:',
        '"],"error":null,"error_kind":null,"ms":',
        ',"source":"_atproto.',
        '","via":null},"https":{"outcome":"ok","dids":["did:plc:',
        '/.well-known/atproto-did","via":null}},',
        '{"part":{"did":"did:plc:',
        '","evidence":{"outcome":"ok","dids":["did:web:',
        '/.well-known/did.json","via":null},',
        '"plc":{"outcome":"skipped","dids":[],"error":null,"error_kind":null,"ms":null,',
        '"source":null,"via":null},"plc_findings":[],"rotation_keys":[],"history":null},',
        '"checked_at":1800000000.0000000,"fresh_until":1800000000.0000000,',
        '"stale_until":1800000000.0000000,"refresh_error":null,"retry_at":0.0}\n',
        '{"@context":["https://www.w3.org/ns/did/v1","https://w3id.org/security/multikey/v1",',
        '"https://w3id.org/security/suites/secp256k1-2019/v1"],"id":"did:plc:',
        '","alsoKnownAs":["at://',
        '"],"verificationMethod":[{"id":"did:plc:',
        '#atproto","type":"Multikey","controller":"did:plc:',
        '","publicKeyMultibase":"zQ3sh',
        '"}],"service":[{"id":"#atproto_pds","type":"AtprotoPersonalDataServer",',
        '"serviceEndpoint":"https://',
    ]
).encode()

_DICTIONARY_ID = zlib.adler32(DICTIONARY).to_bytes(4, "big")


class UnreadableEntry(AtwhoisError, ValueError):
    """Bytes that are no entry this cache wrote (unknown dictionary, cut short, corrupt)."""


def pack(data: bytes) -> bytes:
    packer = zlib.compressobj(_LEVEL, zdict=DICTIONARY)
    return packer.compress(data) + packer.flush()


def unpack(packed: bytes) -> bytes:
    """What `pack` made (or a plain zlib stream, as entries were written before the
    dictionary); ValueError for anything else."""
    try:
        if len(packed) > 6 and packed[1] & 0x20:  # FDICT: the stream needs a dictionary
            if packed[2:6] != _DICTIONARY_ID:
                raise UnreadableEntry("an entry packed with an unknown dictionary")
            unpacker = zlib.decompressobj(zdict=DICTIONARY)
            data = unpacker.decompress(packed) + unpacker.flush()
            if not unpacker.eof:
                raise UnreadableEntry("a truncated entry")
            return data
        return zlib.decompress(packed)
    except zlib.error as err:
        raise UnreadableEntry(f"an unreadable cache entry: {err}") from None


def deflate(data: bytes) -> bytes:
    """`pack` for what never leaves the process (the service's kept documents): a raw
    stream, without zlib's header and checksum, 10 bytes shorter and unpacked in half the
    time (1.1 against 1.9 us), since nothing but this process's own `deflate` made it."""
    packer = zlib.compressobj(_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, zdict=DICTIONARY)
    return packer.compress(data) + packer.flush()


def inflate(deflated: bytes) -> bytes:
    return zlib.decompressobj(-zlib.MAX_WBITS, zdict=DICTIONARY).decompress(deflated)
