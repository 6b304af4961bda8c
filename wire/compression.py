"""Record-batch compression codecs, numbered as Kafka numbers them in a batch's attributes.

Snappy is written in the xerial framing that the Java client writes (and every broker and client
reads), and read both framed and raw, since librdkafka and Sarama may send raw snappy.
LZ4 is the standard frame format with independent blocks, which Java's reader requires.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from .errors import ConfigError, CorruptRecordError

__all__ = ["Compression", "compress", "decompress", "XERIAL_HEADER"]


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> Compression:
        """The codec for a `compression.type` value (none, gzip, snappy, lz4, zstd)."""
        try:
            return cls[str(name).strip().upper()]
        except KeyError:
            raise ConfigError(
                f"compression.type: unknown codec {name!r}; expected one of none, gzip, snappy, lz4, zstd"
            ) from None


# magic, then version 1 and minimum compatible version 1 (both int32 big-endian)
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK = 32 * 1024  # input bytes per block, as the Java client's SnappyOutputStream

_pack_len = struct.Struct(">i").pack
_unpack_len = struct.Struct(">i").unpack_from


def _snappy_compress(data: bytes) -> bytes:
    raw = cramjam.snappy.compress_raw
    parts = [XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(view), XERIAL_BLOCK):
        block = bytes(raw(view[start : start + XERIAL_BLOCK]))
        parts.append(_pack_len(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes | memoryview) -> bytes:
    raw = cramjam.snappy.decompress_raw
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(raw(view))
    if len(view) < 16:
        raise CorruptRecordError("snappy: truncated xerial header")
    pos, end = 16, len(view)
    parts = []
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"snappy: truncated xerial block length at byte {pos}")
        (n,) = _unpack_len(view, pos)
        pos += 4
        if n < 0 or n > end - pos:
            raise CorruptRecordError(f"snappy: xerial block of {n} bytes at byte {pos} overruns the data")
        parts.append(bytes(raw(view[pos : pos + n])))
        pos += n
    return b"".join(parts)


# an LZ4 frame as Java's KafkaLZ4BlockOutputStream writes it: magic; FLG = version 01 with
# independent blocks and no checksums; BD = blocks of at most 64 KiB; the header checksum, a
# constant for constant flags (second byte of xxh32 over FLG BD). cramjam's frame compressor
# checksums every block and the content: 0.68 ms a megabyte of 1 KiB records, against 0.11 here.
LZ4_FRAME_HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"
LZ4_BLOCK = 64 * 1024
LZ4_STORED = 0x80000000  # a block's size with this bit set: the block is stored uncompressed
LZ4_END = b"\x00\x00\x00\x00"
_pack_le32 = struct.Struct("<I").pack


def _lz4_compress(data: bytes | memoryview) -> bytes:
    # level 0 (acceleration 1), LZ4's fast mode, as librdkafka's default. Each block is copied
    # out of cramjam's buffer first: joining those buffers directly is three times slower.
    compress_block = cramjam.lz4.compress_block
    parts: list = [LZ4_FRAME_HEADER]
    view = memoryview(data)
    for start in range(0, len(view), LZ4_BLOCK):
        raw = view[start : start + LZ4_BLOCK]
        block = compress_block(raw, store_size=False)
        if len(block) < len(raw):
            parts.append(_pack_le32(len(block)))
            parts.append(bytes(block))
        else:
            parts.append(_pack_le32(len(raw) | LZ4_STORED))
            parts.append(raw)
    parts.append(LZ4_END)
    return b"".join(parts)


_COMPRESS = {
    Compression.GZIP: lambda d: bytes(cramjam.gzip.compress(d)),
    Compression.SNAPPY: _snappy_compress,
    Compression.LZ4: _lz4_compress,
    Compression.ZSTD: lambda d: bytes(cramjam.zstd.compress(d, level=3)),
}

_TAKES_VIEWS = (Compression.SNAPPY, Compression.LZ4)  # they cut a view into blocks: no copy first

_DECOMPRESS = {
    Compression.GZIP: lambda d: bytes(cramjam.gzip.decompress(d)),
    Compression.SNAPPY: _snappy_decompress,
    Compression.LZ4: lambda d: bytes(cramjam.lz4.decompress(d)),
    Compression.ZSTD: lambda d: bytes(cramjam.zstd.decompress(d)),
}


def _codec(codec: int) -> Compression:
    try:
        return Compression(codec)
    except ValueError:
        raise CorruptRecordError(f"unknown compression codec {codec}") from None


def compress(codec: int, data: bytes | memoryview) -> bytes:
    """`data` compressed with `codec`; NONE returns it unchanged."""
    c = _codec(codec)
    if type(data) is not bytes and c not in _TAKES_VIEWS:  # some codecs take bytes only
        data = bytes(data)
    return data if c is Compression.NONE else _COMPRESS[c](data)


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """`data` decompressed with `codec`; bad input raises `CorruptRecordError`, never the codec's own error."""
    c = _codec(codec)
    if c is Compression.NONE:
        return bytes(data)
    try:
        return _DECOMPRESS[c](data)
    except CorruptRecordError:
        raise
    except Exception as e:  # cramjam raises DecompressionError, or ValueError/OverflowError on odd input
        raise CorruptRecordError(f"{c.name.lower()} decompression failed: {e}") from e
