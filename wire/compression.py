"""Record-batch compression codecs, numbered as Kafka numbers them in a batch's attributes.

Snappy is written in the xerial framing that the Java client writes (and every broker and client
reads), and read both framed and raw, since librdkafka and Sarama may send raw snappy.
LZ4 is the standard frame format with independent blocks, which Java's reader requires: written
by the `lz4` package and read by cramjam, each the faster at its half on our batches
(docs/performance.md, "Codecs").

Decompression is bounded: `decompress` takes the most bytes a batch may inflate to and refuses
more with `RecordBatchTooLargeError`, having written at most that many (plus one) bytes. Each codec
first reads the size it will need from its own framing (snappy's length preambles, gzip's ISIZE
trailer, the block headers of LZ4 and zstd frames) and decompresses into a buffer of that size,
capped; a codec whose size hint falls short grows the buffer by doubling, still capped. A bomb
costs the cap, never its claimed size.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from functools import partial
from typing import Any

import cramjam
import lz4.frame

from .errors import ConfigError, CorruptRecordError, RecordBatchTooLargeError

__all__ = ["Compression", "compress", "decompress", "XERIAL_HEADER", "MAX_DECOMPRESSED_BYTES"]

# the default of `max.decompressed.batch.bytes`: fetch.max.bytes' default, the most one fetch
# may carry; no honest batch inflates past it
MAX_DECOMPRESSED_BYTES = 52428800


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


def _snappy_decompress(data: bytes | memoryview, max_size: int) -> bytes:
    """Raw snappy, or xerial blocks of it: each raw block opens with its decompressed length,
    so every block is checked against `max_size` before it is decompressed."""
    raw_len = cramjam.snappy.decompress_raw_len
    raw = cramjam.snappy.decompress_raw
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        if raw_len(view) > max_size:
            raise _too_large(Compression.SNAPPY, max_size)
        return bytes(raw(view))
    if len(view) < 16:
        raise CorruptRecordError("snappy: truncated xerial header")
    pos, end, total = 16, len(view), 0
    parts = []
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"snappy: truncated xerial block length at byte {pos}")
        (n,) = _unpack_len(view, pos)
        pos += 4
        if n < 0 or n > end - pos:
            raise CorruptRecordError(f"snappy: xerial block of {n} bytes at byte {pos} overruns the data")
        block = view[pos : pos + n]
        total += raw_len(block)
        if total > max_size:
            raise _too_large(Compression.SNAPPY, max_size)
        parts.append(bytes(raw(block)))
        pos += n
    return b"".join(parts)


# an LZ4 frame as Java's KafkaLZ4BlockOutputStream writes it: magic; FLG = version 01 with
# independent blocks and no checksums; BD = blocks of at most 64 KiB; the header checksum, a
# constant for constant flags (second byte of xxh32 over FLG BD). Blocks that do not compress
# are stored as they are (their size's top bit set); four zero bytes end the frame.
LZ4_FRAME_HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"
LZ4_STORED = 0x80000000  # a block's size with this bit set: the block is stored uncompressed


def _lz4_compress(data: bytes | memoryview) -> bytes:
    # level 0: LZ4's fast mode (acceleration 1), as librdkafka's default
    return lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                              content_checksum=False, block_checksum=False, store_size=False,
                              compression_level=0)


_COMPRESS = {
    Compression.GZIP: lambda d: bytes(cramjam.gzip.compress(d)),
    Compression.SNAPPY: _snappy_compress,
    Compression.LZ4: _lz4_compress,
    Compression.ZSTD: lambda d: bytes(cramjam.zstd.compress(d, level=3)),
}

_TAKES_VIEWS = (Compression.SNAPPY, Compression.LZ4)  # they cut a view into blocks: no copy first


# -- sizes ahead of decompression: read from each codec's framing, never trusted past the cap

_LE32 = struct.Struct("<I")
_LE64 = struct.Struct("<Q")
_LZ4_MAGIC = 0x184D2204
_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE = 0x184D2A50  # the 16 magics of skippable frames (both LZ4 and zstd) share these bits
_ZSTD_BLOCK_MAX = 128 * 1024  # the most one compressed zstd block holds


def _gzip_size(data: memoryview) -> int | None:
    """The last member's ISIZE trailer: the size of its input, modulo 2**32."""
    return _LE32.unpack_from(data, len(data) - 4)[0] if len(data) >= 18 else None


def _framed_size(data: memoryview, magic: int, frame_size: Any) -> int | None:
    """The most the frames of `data` inflate to, by `frame_size` for each frame with `magic`
    (skippable frames hold nothing). None if the framing is malformed."""
    pos, end, total = 0, len(data), 0
    while pos < end:
        if end - pos < 8:
            return None
        (found,) = _LE32.unpack_from(data, pos)
        if found & 0xFFFFFFF0 == _SKIPPABLE:
            pos += 8 + _LE32.unpack_from(data, pos + 4)[0]
            continue
        frame = frame_size(data, pos + 4, end) if found == magic else None
        if frame is None:
            return None
        size, pos = frame
        total += size
    return total


def _lz4_frame(data: memoryview, pos: int, end: int) -> tuple[int, int] | None:
    """The LZ4 frame whose header starts at `pos`: its content size if it gives one, else each
    block's size (its own when stored, the frame's block maximum when compressed); and where
    the frame ends."""
    flags, descriptor = data[pos], data[pos + 1]
    block_max = 1 << (8 + 2 * ((descriptor >> 4) & 7))  # 4: 64 KiB, 5: 256 KiB, 6: 1 MiB, 7: 4 MiB
    if flags >> 6 != 1 or block_max < 1 << 16:
        return None
    pos += 2
    content_size = None
    if flags & 0x08:
        if end - pos < 8:
            return None
        (content_size,) = _LE64.unpack_from(data, pos)
        pos += 8
    pos += 1 + (4 if flags & 0x01 else 0)  # dictionary id, header checksum
    checksum = 4 if flags & 0x10 else 0
    blocks = 0
    while True:
        if end - pos < 4:
            return None
        (size,) = _LE32.unpack_from(data, pos)
        pos += 4
        if size == 0:
            break
        stored, size = size & LZ4_STORED, size & ~LZ4_STORED
        blocks += size if stored else block_max
        pos += size + checksum
    pos += 4 if flags & 0x04 else 0  # content checksum
    return (blocks if content_size is None else content_size), pos


def _zstd_frame(data: memoryview, pos: int, end: int) -> tuple[int, int] | None:
    """The zstd frame whose header starts at `pos`: its content size if it gives one, else each
    block's size (its own when raw or RLE, 128 KiB when compressed); and where the frame ends."""
    descriptor = data[pos]
    single = descriptor & 0x20
    fcs_bytes = (1 if single else 0, 2, 4, 8)[descriptor >> 6]
    pos += 1 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3]  # window, dictionary id
    content_size = None
    if fcs_bytes:
        if end - pos < fcs_bytes:
            return None
        content_size = int.from_bytes(data[pos : pos + fcs_bytes], "little") + (256 if fcs_bytes == 2 else 0)
        pos += fcs_bytes
    blocks = 0
    while True:
        if end - pos < 3:
            return None
        header = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
        kind, size = (header >> 1) & 3, header >> 3
        if kind == 3:
            return None
        blocks += _ZSTD_BLOCK_MAX if kind == 2 else size
        pos += 3 + (1 if kind == 1 else size)
        if header & 1:
            break
    pos += 4 if descriptor & 0x04 else 0  # content checksum
    return (blocks if content_size is None else content_size), pos


_INTO = {
    Compression.GZIP: (cramjam.gzip.decompress_into, _gzip_size),
    Compression.LZ4: (cramjam.lz4.decompress_into, partial(_framed_size, magic=_LZ4_MAGIC, frame_size=_lz4_frame)),
    Compression.ZSTD: (cramjam.zstd.decompress_into, partial(_framed_size, magic=_ZSTD_MAGIC, frame_size=_zstd_frame)),
}
_FULL = "failed to write whole buffer"  # cramjam's words when the output buffer is too small


def _decompress_bounded(c: Compression, data: bytes | memoryview, max_size: int) -> bytes:
    """Decompress into a buffer of the size the framing announces (at most `max_size` + 1
    bytes); double it while it is too small and below that. Output that fills `max_size` + 1
    bytes is refused: at most that much is ever written."""
    into, size_of = _INTO[c]
    view = memoryview(data)
    hint = size_of(view)
    size = min(max(hint, 1) if hint is not None else max(4 * len(view), 1 << 16), max_size + 1)
    while True:
        out = bytearray(size)
        try:
            n = into(view, out)
        except cramjam.DecompressionError as e:
            if str(e) != _FULL:
                raise
            if size > max_size:
                raise _too_large(c, max_size) from None
            size = min(2 * size, max_size + 1)
            continue
        if n > max_size:
            raise _too_large(c, max_size)
        return bytes(memoryview(out)[:n])


def _too_large(c: Compression, max_size: int) -> RecordBatchTooLargeError:
    return RecordBatchTooLargeError(
        f"{c.name.lower()} data inflates past {max_size} bytes (max.decompressed.batch.bytes)")


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


def decompress(codec: int, data: bytes | memoryview, max_size: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """`data` decompressed with `codec`, at most `max_size` bytes of it.

    More than `max_size` raises `RecordBatchTooLargeError` (a `DecodeError`); bad input raises
    `CorruptRecordError`, never the codec's own error."""
    c = _codec(codec)
    if c is Compression.NONE:
        return bytes(data)
    try:
        if c is Compression.SNAPPY:
            return _snappy_decompress(data, max_size)
        return _decompress_bounded(c, data, max_size)
    except (CorruptRecordError, RecordBatchTooLargeError):
        raise
    except Exception as e:  # cramjam raises DecompressionError, or ValueError/OverflowError on odd input
        raise CorruptRecordError(f"{c.name.lower()} decompression failed: {e}") from e
