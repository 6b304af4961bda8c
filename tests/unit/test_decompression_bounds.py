"""Decompression is bounded: a batch may inflate to `max.decompressed.batch.bytes` and no further,
in every codec, and a bomb is refused having written about the cap, not what it claims."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raykafka.wire.arrow_batches import records_to_arrow
from raykafka.wire.compression import (
    LZ4_FRAME_HEADER,
    MAX_DECOMPRESSED_BYTES,
    XERIAL_HEADER,
    Compression,
    compress,
    decompress,
)
from raykafka.wire.config import PROPERTIES, parse_config
from raykafka.wire.errors import ConfigError, DecodeError, RecordBatchTooLargeError
from raykafka.wire.record_decoding import decode_record_batches
from raykafka.wire.record_encoding import encode_record_batch

from ..tiers import fuzz_examples

CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
MiB = 1 << 20


def test_the_cap_is_a_config_key_defaulting_to_fetch_max_bytes():
    assert PROPERTIES["max.decompressed.batch.bytes"].default == MAX_DECOMPRESSED_BYTES
    assert MAX_DECOMPRESSED_BYTES == PROPERTIES["fetch.max.bytes"].default
    assert parse_config({"bootstrap.servers": "h:1", "max.decompressed.batch.bytes": "1048576"})[
        "max.decompressed.batch.bytes"] == MiB
    for bad in (0, -1, "lots", 1.5, True):
        with pytest.raises(ConfigError, match="max.decompressed.batch.bytes"):
            parse_config({"bootstrap.servers": "h:1", "max.decompressed.batch.bytes": bad})


# ------------------------------------------------------------------ the cap, byte for byte


def _framings(codec: Compression, data: bytes) -> list[tuple[str, bytes]]:
    """`data` as this client compresses it, and as other writers frame it."""
    out = [("ours", compress(codec, data))]
    if codec is Compression.GZIP:
        half = len(data) // 2
        out.append(("two members", compress(codec, data[:half]) + compress(codec, data[half:])))
    elif codec is Compression.SNAPPY:
        out.append(("raw", bytes(cramjam.snappy.compress_raw(data))))
    elif codec is Compression.LZ4:
        out.append(("cramjam frame (content size, checksums)", bytes(cramjam.lz4.compress(data))))
    elif codec is Compression.ZSTD:
        streamed = cramjam.zstd.Compressor()  # no content size in the frame, as Java's zstd-jni writes
        streamed.compress(data)
        out.append(("streamed", bytes(streamed.finish())))
        out.append(("two frames", compress(codec, data[:7]) + compress(codec, data[7:])))
    return out


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@settings(max_examples=fuzz_examples(40), deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300_000) | st.builds(lambda n, b: b * n, st.integers(1, 400_000), st.binary(min_size=1, max_size=3)))
def test_output_of_exactly_the_cap_is_taken_and_one_byte_more_refused(codec, data):
    """What the framing says ahead of the data is only where to start (two gzip members: the
    trailer gives the second's size alone, so the buffer grows); the output decides."""
    for name, packed in _framings(codec, data):
        assert decompress(codec, packed, max_size=len(data)) == data, name
        assert decompress(codec, packed, max_size=len(data) + 1000) == data, name
        if data:
            with pytest.raises(RecordBatchTooLargeError, match="max.decompressed.batch.bytes"):
                decompress(codec, packed, max_size=len(data) - 1)


# ------------------------------------------------------------------ bombs


def _bomb(codec: Compression, inflated: int) -> bytes:
    """`inflated` zero bytes compressed, built without ever holding them."""
    zeros = bytes(MiB)
    if codec is Compression.GZIP:
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        return b"".join([z.compress(zeros) for _ in range(inflated // MiB)] + [z.flush()])
    if codec is Compression.ZSTD:
        z = cramjam.zstd.Compressor()
        for _ in range(inflated // MiB):
            z.compress(zeros)
        return bytes(z.finish())
    if codec is Compression.LZ4:  # a frame of identical 64 KiB blocks of zeros
        block = bytes(cramjam.lz4.compress_block(zeros[:65536], store_size=False))
        return LZ4_FRAME_HEADER + (struct.pack("<I", len(block)) + block) * (inflated // 65536) + b"\0\0\0\0"
    block = bytes(cramjam.snappy.compress_raw(zeros))  # xerial blocks of a MiB of zeros each
    return XERIAL_HEADER + (struct.pack(">i", len(block)) + block) * (inflated // MiB)


_CHILD = """
import json, resource, sys
from raykafka.wire.compression import decompress
from raykafka.wire.errors import RecordBatchTooLargeError
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
out = {}
for codec, path in json.loads(sys.argv[1]):
    data = open(path, "rb").read()
    before = peak()
    try:
        result = decompress(codec, data, max_size=%d)
        out[codec] = ("returned", len(result), peak() - before)
    except RecordBatchTooLargeError as e:
        out[codec] = ("refused", str(e), peak() - before)
    except Exception as e:
        out[codec] = ("raised", repr(e), peak() - before)
print(json.dumps(out))
"""


@pytest.mark.timeout(120)
def test_a_bomb_is_refused_before_it_is_inflated(tmp_path):
    """256 MiB of zeros in each codec against a cap of 1 MiB, in a fresh process whose peak
    resident memory is measured around each call: every bomb is refused, and none raises the
    peak by more than a few times the cap (inflated, each would add 256 MiB, or twice that)."""
    cap, inflated = MiB, 256 * MiB
    paths = []
    for codec in CODECS:
        path = tmp_path / f"bomb-{codec.name}"
        path.write_bytes(_bomb(codec, inflated if codec is not Compression.SNAPPY else 64 * MiB))
        paths.append((int(codec), str(path)))
    run = subprocess.run([sys.executable, "-c", _CHILD % cap, json.dumps(paths)], capture_output=True, text=True,
                         timeout=100, check=False)
    assert run.returncode == 0, run.stderr
    for codec, (outcome, detail, grown) in json.loads(run.stdout).items():
        name = Compression(int(codec)).name.lower()
        assert outcome == "refused", f"{name}: {outcome} {detail}"
        assert "inflates past 1048576 bytes" in detail
        assert grown < 16 * cap, f"{name}: peak memory grew by {grown / MiB:.0f} MiB"


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_both_decoders_refuse_a_batch_past_the_cap_naming_the_batch_and_the_key(codec):
    values = [bytes(200_000)] * 5  # a MB of records, a few KiB compressed
    data = encode_record_batch(values, timestamps=1, base_offset=40, compression=codec)
    for decode in (lambda cap: records_to_arrow(data, "t", 2, max_decompressed=cap)[0].column("value").to_pylist(),
                   lambda cap: [r.value for b in decode_record_batches(data, max_decompressed=cap) for r in b.records]):
        with pytest.raises(RecordBatchTooLargeError) as caught:
            decode(MiB // 2)
        assert "record batch at offset 40" in str(caught.value)
        assert "max.decompressed.batch.bytes" in str(caught.value)
        assert decode(2 * MiB) == values
    with pytest.raises(RecordBatchTooLargeError, match="^t/2: record batch at offset 40"):
        records_to_arrow(data, "t", 2, max_decompressed=MiB // 2)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@settings(max_examples=fuzz_examples(150), deadline=2000, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(min_size=1, max_size=5000), mutations=st.lists(st.tuples(st.integers(0), st.integers(0, 255)),
                                                                    min_size=1, max_size=4), cap=st.integers(0, 20_000))
def test_mangled_framing_ends_in_output_within_the_cap_or_a_decode_error(cpu_bound, codec, data, mutations, cap):
    """Each codec's framing (the sizes read ahead of decompressing) overwritten here and there."""
    for name, packed in _framings(codec, data):
        buf = bytearray(packed)
        for at, value in mutations:
            buf[at % len(buf)] = value
        with cpu_bound(2.0, f"{codec.name} ({name}) {bytes(buf[:64]).hex()}"):
            try:
                out = decompress(codec, bytes(buf), max_size=cap)
            except DecodeError:
                continue
        assert len(out) <= cap
