"""How the mirror keeps an operation on disk: its JSON, compressed with zstd against a
dictionary the mirror trained on its own recent operations. On 40,000 operations of the
real directory's shape (`python -m bench mirror --scale`'s file, dictionaries trained on
20,000 others), an operation's 504 bytes of JSON took 361 in plain zstd, 202 deflated
against a dictionary of operations and 165-180 in zstd against a trained one; DAG-CBOR
(463 bytes) was no smaller once compressed, and JSON needs no re-encoding to serve.

A packed operation is two bytes naming its dictionary (0: none, as the first operations of
a mirror are packed, before there is anything to train on) and a zstd frame without its
magic number and checksum. Dictionaries are data of the store, never replaced: a new one
is trained now and then, as the directory's operations change shape over the years, and
every one stays readable.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import zstandard

from atwhois.resolver.errors import AtwhoisError

LEVEL = 3  # levels 9 and 19 gained no byte against a dictionary, at 4x and 30x the time
DICTIONARY_SIZE = 16_384  # 8 KiB to 64 KiB trained the same within a byte
TRAIN_SAMPLE = 20_000  # the newest operations a dictionary is trained on (1.3 s)
_FORMAT = zstandard.FORMAT_ZSTD1_MAGICLESS


class UnreadableOperation(AtwhoisError, ValueError):
    """Bytes in the mirror that are no packed operation (an unknown dictionary, corrupt)."""


class Packer:
    """Packs with the newest dictionary, unpacks with any: `load(number)` reads a dictionary
    the store has and this process has not seen yet (another process trained it)."""

    def __init__(self, load: Callable[[int], bytes | None]) -> None:
        self._load = load
        self._lock = threading.Lock()  # zstd's (de)compressors are not for two threads at once
        self._unpackers: dict[int, zstandard.ZstdDecompressor] = {
            0: zstandard.ZstdDecompressor(format=_FORMAT)
        }
        self.number = 0
        self._packer = self._compressor(None)

    @staticmethod
    def _compressor(dictionary: zstandard.ZstdCompressionDict | None) -> zstandard.ZstdCompressor:
        params = zstandard.ZstdCompressionParameters.from_level(
            LEVEL, format=_FORMAT, write_checksum=0, write_dict_id=0, write_content_size=1
        )
        return zstandard.ZstdCompressor(dict_data=dictionary, compression_params=params)

    def use(self, number: int, data: bytes) -> None:
        """Packs from now on with dictionary `number`."""
        dictionary = zstandard.ZstdCompressionDict(data)
        with self._lock:
            self._unpackers[number] = zstandard.ZstdDecompressor(dictionary, format=_FORMAT)
            self._packer, self.number = self._compressor(dictionary), number

    def pack(self, text: bytes) -> bytes:
        with self._lock:
            return self.number.to_bytes(2, "big") + self._packer.compress(text)

    def unpack(self, packed: bytes) -> bytes:
        number = int.from_bytes(packed[:2], "big")
        with self._lock:
            unpacker = self._unpackers.get(number)
        if unpacker is None:
            data = self._load(number)
            if data is None:
                raise UnreadableOperation(f"an operation packed with dictionary {number}, unknown")
            dictionary = zstandard.ZstdCompressionDict(data)
            unpacker = zstandard.ZstdDecompressor(dictionary, format=_FORMAT)
            with self._lock:
                self._unpackers[number] = unpacker
        try:
            with self._lock:
                return unpacker.decompress(packed[2:])
        except zstandard.ZstdError as err:
            raise UnreadableOperation(f"an unreadable packed operation: {err}") from None


def train(samples: Sequence[bytes]) -> bytes:
    """A dictionary for operations like `samples`."""
    return zstandard.train_dictionary(DICTIONARY_SIZE, list(samples), level=LEVEL).as_bytes()
