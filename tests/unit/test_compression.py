"""Codecs: Kafka's numbering, round trips, the xerial snappy framing, and clean failures."""

from __future__ import annotations

import os
import struct

import cramjam
import pytest

from raykafka.wire.compression import XERIAL_HEADER, Compression, compress, decompress
from raykafka.wire.errors import ConfigError, CorruptRecordError

CODECS = list(Compression)
PAYLOADS = [b"", b"x", b"hello kafka " * 1000, os.urandom(100_000), bytes(200_000)]


def test_codec_ids_are_kafkas():
    assert [
        int(c)
        for c in (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)
    ] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("name", "codec"),
    [("none", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4), ("LZ4", 3)],
)
def test_from_name(name, codec):
    assert Compression.from_name(name) == codec


@pytest.mark.parametrize("name", ["brotli", "", "producer", "lz4-frame"])
def test_from_name_rejects_unknown(name):
    with pytest.raises(ConfigError, match="compression.type"):
        Compression.from_name(name)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size_index", range(len(PAYLOADS)))
def test_round_trip(codec, size_index):
    data = PAYLOADS[size_index]
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(packed)) == data


def test_compressible_data_shrinks():
    data = b"hello kafka " * 1000
    for codec in CODECS[1:]:
        assert len(compress(codec, data)) < len(data) // 5, codec.name


def test_none_is_identity():
    assert compress(Compression.NONE, b"abc") == b"abc"
    assert decompress(Compression.NONE, b"abc") == b"abc"


def test_snappy_writes_xerial_framing_in_32k_blocks():
    data = os.urandom(100_000)
    packed = compress(Compression.SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01"
    assert packed[:16] == XERIAL_HEADER
    pos, blocks = 16, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + n])))
        pos += 4 + n
    assert pos == len(packed)
    assert [len(b) for b in blocks] == [32768, 32768, 32768, 100_000 - 3 * 32768]
    assert b"".join(blocks) == data


def test_snappy_reads_raw_snappy():
    data = b"raw snappy from librdkafka " * 50
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Compression.SNAPPY, raw) == data


def test_snappy_reads_hand_built_xerial_stream():
    parts = [b"first block ", b"second block"]
    stream = XERIAL_HEADER + b"".join(
        struct.pack(">i", len(c)) + c for c in (bytes(cramjam.snappy.compress_raw(p)) for p in parts)
    )
    assert decompress(Compression.SNAPPY, stream) == b"first block second block"


def test_lz4_is_a_frame_with_independent_blocks():
    packed = compress(Compression.LZ4, b"abc" * 10_000)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic, little-endian 0x184D2204
    flg = packed[4]
    assert flg >> 6 == 1  # frame version 01
    assert flg & 0x20  # block independence: Java's KafkaLZ4BlockInputStream needs it


def _xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 of fewer than 16 bytes (the LZ4 frame's header checksum), from its specification."""
    m, p1, p2, p3, p5 = 0xFFFFFFFF, 2654435761, 2246822519, 3266489917, 374761393
    h = (seed + p5 + len(data)) & m
    for byte in data:
        h = (h + byte * p5) & m
        h = (((h << 11) | (h >> 21)) & m) * p1 & m
    h ^= h >> 15
    h = h * p2 & m
    h ^= h >> 13
    h = h * p3 & m
    return h ^ (h >> 16)


def test_lz4_frame_header_checksum_matches_its_flags():
    packed = compress(Compression.LZ4, b"x")
    assert packed[6] == (_xxh32(packed[4:6]) >> 8) & 0xFF


def test_lz4_blocks_of_64_kib_incompressible_ones_stored_and_an_end_mark():
    import random

    noise = random.Random(7).randbytes(100_000)
    data = noise + b"y" * 100_000
    packed = compress(Compression.LZ4, data)
    pos, blocks = 7, []
    while True:
        size = int.from_bytes(packed[pos:pos + 4], "little")
        pos += 4
        if size == 0:
            break
        blocks.append((bool(size & 0x80000000), size & 0x7FFFFFFF))
        pos += size & 0x7FFFFFFF
    assert pos == len(packed)  # the end mark closes the frame
    assert len(blocks) == 4  # 200,000 bytes in blocks of 64 KiB
    assert blocks[0] == (True, 65536)  # random bytes do not compress: stored as they are
    assert blocks[-1][0] is False and blocks[-1][1] < 1000
    assert decompress(Compression.LZ4, packed) == data
    assert decompress(Compression.LZ4, compress(Compression.LZ4, b"")) == b""


def test_gzip_and_zstd_magic():
    assert compress(Compression.GZIP, b"abc")[:2] == b"\x1f\x8b"
    assert compress(Compression.ZSTD, b"abc")[:4] == b"\x28\xb5\x2f\xfd"


@pytest.mark.parametrize("codec", CODECS[1:])
def test_garbage_raises_corrupt_record_error(codec):
    with pytest.raises(CorruptRecordError, match=codec.name.lower()):
        decompress(codec, b"this is not compressed data at all")


@pytest.mark.parametrize("codec", CODECS[1:])
def test_truncated_raises_corrupt_record_error(codec):
    packed = compress(codec, os.urandom(50_000))
    with pytest.raises(CorruptRecordError):
        decompress(codec, packed[: len(packed) // 2])


def test_truncated_xerial_block_length():
    packed = compress(Compression.SNAPPY, b"abc" * 100)
    with pytest.raises(CorruptRecordError, match="xerial"):
        decompress(Compression.SNAPPY, packed[:18])
    with pytest.raises(CorruptRecordError, match="overruns"):
        decompress(Compression.SNAPPY, XERIAL_HEADER + struct.pack(">i", 1000) + b"abc")
    with pytest.raises(CorruptRecordError, match="overruns"):
        decompress(Compression.SNAPPY, XERIAL_HEADER + struct.pack(">i", -5) + b"abc")


def test_unknown_codec():
    with pytest.raises(CorruptRecordError, match="codec 6"):
        decompress(6, b"abc")
