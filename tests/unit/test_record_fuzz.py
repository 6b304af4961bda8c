"""Property tests: hostile bytes never escape as anything but our errors, and any records round-trip."""

from __future__ import annotations

import struct

from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raykafka.wire.compression import Compression, compress, decompress
from raykafka.wire.errors import CorruptRecordError, KafkaError
from raykafka.wire.records import decode_record_batches, encode_record_batch

FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
codecs = st.sampled_from(list(Compression))
maybe_bytes = st.none() | st.binary(max_size=300)
headers_st = st.lists(st.tuples(st.text(max_size=20), maybe_bytes), max_size=4)


@st.composite
def record_columns(draw):
    n = draw(st.integers(min_value=1, max_value=40))
    values = draw(st.lists(maybe_bytes, min_size=n, max_size=n))
    keys = draw(st.none() | st.lists(maybe_bytes, min_size=n, max_size=n))
    timestamps = draw(
        st.none()
        | st.integers(min_value=0, max_value=2**50)
        | st.lists(st.integers(min_value=0, max_value=2**50), min_size=n, max_size=n)
    )
    headers = draw(st.none() | st.lists(headers_st, min_size=n, max_size=n))
    return values, keys, timestamps, headers


@st.composite
def valid_batch(draw):
    values, keys, timestamps, headers = draw(record_columns())
    return encode_record_batch(
        values,
        keys,
        timestamps if timestamps is not None else 1000,
        headers,
        base_offset=draw(st.integers(min_value=0, max_value=2**40)),
        compression=draw(codecs),
    )


def _decode_only_our_errors(data: bytes, check_crc: bool = True) -> None:
    try:
        batches = decode_record_batches(data, check_crc=check_crc)
    except KafkaError:
        return
    assert isinstance(batches, list)


@FUZZ
@given(st.binary(max_size=2000))
def test_random_bytes_decode(data):
    _decode_only_our_errors(data)
    _decode_only_our_errors(data, check_crc=False)


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_behind_a_plausible_header(tail):
    """Garbage after a well-formed v2 header with a matching CRC: the record parser itself is fuzzed."""
    for codec in Compression:
        body = struct.pack(">hiqqqhii", int(codec), 0, 0, 0, -1, -1, -1, 3) + tail
        data = struct.pack(">qiibI", 0, len(body) + 9, -1, 2, crc32c(body)) + body
        _decode_only_our_errors(data)


@FUZZ
@given(codecs, st.binary(max_size=2000))
def test_random_bytes_decompress(codec, data):
    try:
        out = decompress(codec, data)
    except CorruptRecordError:
        return
    assert isinstance(out, bytes)


@FUZZ
@given(valid_batch(), st.data())
def test_corrupted_batches_raise_only_our_errors(batch, data):
    """Bytes overwritten anywhere, with the CRC fixed up afterwards so the parser sees them."""
    buf = bytearray(batch)
    for _ in range(data.draw(st.integers(min_value=1, max_value=5))):
        pos = data.draw(st.integers(min_value=0, max_value=len(buf) - 1))
        buf[pos] = data.draw(st.integers(min_value=0, max_value=255))
    _decode_only_our_errors(bytes(buf))
    _decode_only_our_errors(bytes(buf), check_crc=False)
    if len(buf) > 21:
        struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
        _decode_only_our_errors(bytes(buf))


@FUZZ
@given(valid_batch(), st.data())
def test_single_flipped_byte_caught_by_crc(batch, data):
    buf = bytearray(batch)
    pos = data.draw(st.integers(min_value=21, max_value=len(buf) - 1))  # attributes onward
    buf[pos] ^= data.draw(st.integers(min_value=1, max_value=255))
    try:
        decode_record_batches(bytes(buf))
    except CorruptRecordError as e:
        assert "CRC" in str(e)
    else:
        raise AssertionError(f"flipped byte {pos} was not detected")


@FUZZ
@given(record_columns(), codecs, st.integers(min_value=0, max_value=2**40))
def test_round_trip(columns, codec, base_offset):
    values, keys, timestamps, headers = columns
    data = encode_record_batch(values, keys, timestamps, headers, base_offset=base_offset, compression=codec)
    (batch,) = decode_record_batches(data)
    n = len(values)
    assert batch.compression == codec
    assert [r.offset for r in batch.records] == list(range(base_offset, base_offset + n))
    assert [r.value for r in batch.records] == values
    assert [r.key for r in batch.records] == (keys if keys is not None else [None] * n)
    assert [r.headers for r in batch.records] == (headers if headers is not None else [[]] * n)
    if isinstance(timestamps, list):
        assert [r.timestamp for r in batch.records] == timestamps
        assert batch.max_timestamp == max(timestamps)
    elif isinstance(timestamps, int):
        assert {r.timestamp for r in batch.records} == {timestamps}
    else:
        assert len({r.timestamp for r in batch.records}) == 1


@FUZZ
@given(codecs, st.binary(max_size=100_000))
def test_compression_round_trip(codec, data):
    assert decompress(codec, compress(codec, data)) == data


@FUZZ
@given(st.lists(valid_batch(), min_size=1, max_size=4), st.data())
def test_truncated_stream_keeps_complete_batches(batches, data):
    stream = b"".join(batches)
    cut = data.draw(st.integers(min_value=0, max_value=len(stream)))
    got = decode_record_batches(stream[:cut])
    complete, total = 0, 0
    for b in batches:
        total += len(b)
        if total <= cut:
            complete += 1
    assert len(got) == complete
