"""Fetched record batches to Arrow: the exact schema, nulls, headers, skipping."""

from __future__ import annotations

from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raykafka.wire import arrow_batches
from raykafka.wire.arrow_batches import SCHEMA, next_offset, records_to_arrow
from raykafka.wire.errors import CorruptRecordError, RecordBatchTooLargeError
from raykafka.wire.record_decoding import decode_record_batches
from raykafka.wire.record_encoding import encode_record_batch

from ..reference import batches_to_arrow


def test_schema_is_sparks_kafka_source_schema():
    assert SCHEMA.names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert SCHEMA.types == [pa.binary(), pa.binary(), pa.string(), pa.int32(), pa.int64(),
                            pa.timestamp("ms", tz="UTC"), pa.int32(),
                            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))]


def test_nulls_headers_and_timestamps():
    data = encode_record_batch([b"v0", None, b""], keys=[None, b"k1", b"k2"], timestamps=[1000, 2000, 3000],
                               headers=[[("h", b"x"), ("n", None)], [], [("e", b"")]], base_offset=10)
    batch, after = records_to_arrow(data, "topic-a", 4)
    assert batch.schema == SCHEMA
    assert after == 13
    rows = batch.to_pylist()
    assert [r["key"] for r in rows] == [None, b"k1", b"k2"]
    assert [r["value"] for r in rows] == [b"v0", None, b""]
    assert [r["offset"] for r in rows] == [10, 11, 12]
    assert [r["timestamp"].timestamp() * 1000 for r in rows] == [1000, 2000, 3000]
    assert [r["headers"] for r in rows] == [[{"key": "h", "value": b"x"}, {"key": "n", "value": None}], [],
                                          [{"key": "e", "value": b""}]]
    assert {(r["topic"], r["partition"], r["timestampType"]) for r in rows} == {("topic-a", 4, 0)}


def test_records_before_the_requested_offset_and_control_batches_are_skipped():
    first = encode_record_batch([b"a", b"b", b"c"], base_offset=0)
    control = bytearray(encode_record_batch([b"\x00\x00\x00\x00"], keys=[b"\x00\x00\x00\x00"], base_offset=3))
    control[22] |= 0x20  # attributes low byte: control bit (crc is not checked below)
    last = encode_record_batch([b"d"], base_offset=4, compression=3)
    batch, after = records_to_arrow(first + bytes(control) + last, "t", 0, start_offset=1, check_crc=False)
    assert batch.column("value").to_pylist() == [b"b", b"c", b"d"]
    assert batch.column("offset").to_pylist() == [1, 2, 4]
    assert after == 5


def test_truncated_trailing_batch_is_left_for_the_next_fetch():
    a, b = encode_record_batch([b"a"], base_offset=0), encode_record_batch([b"b"], base_offset=1)
    batch, after = records_to_arrow(a + b[:-3], "t", 0)
    assert batch.column("value").to_pylist() == [b"a"] and after == 1
    assert next_offset(a + b[:-3], 0) == 1 and next_offset(a + b, 0) == 2


def test_bad_crc_is_an_error_naming_the_partition():
    data = bytearray(encode_record_batch([b"abc"], base_offset=0))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="t/2"):
        records_to_arrow(bytes(data), "t", 2)


def test_log_append_time_uses_the_batch_max_timestamp():
    data = bytearray(encode_record_batch([b"x", b"y"], timestamps=[5, 6], base_offset=0))
    data[22] |= 0x08  # timestamp type: log append time
    batch, _ = records_to_arrow(bytes(data), "t", 0, check_crc=False)
    assert batch.column("timestampType").to_pylist() == [1, 1]
    assert [t.value for t in batch.column("timestamp")] == [6, 6]


records = st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=300)),
                             st.one_of(st.none(), st.binary(max_size=40)),
                             st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))),
                                      max_size=3)), min_size=1, max_size=40)


@settings(max_examples=80, deadline=None)
@given(batches=st.lists(records, min_size=1, max_size=3), codec=st.sampled_from([0, 1, 2, 3, 4]),
       start=st.integers(0, 60))
def test_matches_the_reference_decoder(batches, codec, start):
    data, base = b"", 0
    for recs in batches:
        data += encode_record_batch([v for v, _, _ in recs], keys=[k for _, k, _ in recs],
                                    headers=[h for _, _, h in recs], timestamps=list(range(len(recs))),
                                    base_offset=base, compression=codec)
        base += len(recs)
    with _no_fallback():
        fast, after = records_to_arrow(data, "t", 1, start)
    assert after == max(base, start)
    assert fast.equals(batches_to_arrow(decode_record_batches(data), "t", 1, start))


def _no_fallback():
    """Well-formed data must be read by the vectorised reader, not rescued by the looped one."""
    return mock.patch.object(arrow_batches, "_read_looped", side_effect=AssertionError("fell back to the loop"))


def _value(i: int, size: int) -> bytes:
    return (i.to_bytes(4, "big") * (size // 4 + 1))[:size]


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(1, 400), st.integers(0, 200), st.booleans()), min_size=1, max_size=4),
       batches=st.integers(1, 3), codec=st.sampled_from([0, 3]), start=st.integers(0, 300),
       stamp_step=st.sampled_from([0, 1, 70]))
def test_records_of_one_size_in_runs_match_the_reference_decoder(runs, batches, codec, start, stamp_step):
    """Runs of one value size, their records growing by a byte where an offset or timestamp
    delta needs another varint byte: the stride checks must find exactly the records' edges."""
    values, keys = [], []
    for count, size, keyed in runs:
        for _ in range(count):
            values.append(_value(len(values), size))
            keys.append(_value(len(keys), 8) if keyed else None)
    data, base, per_batch = b"", 0, -(-len(values) // batches)
    for at in range(0, len(values), per_batch):
        chunk = slice(at, at + per_batch)
        n = len(values[chunk])
        data += encode_record_batch(values[chunk], keys=keys[chunk], timestamps=[i * stamp_step for i in range(n)],
                                    base_offset=base, compression=codec)
        base += n
    with _no_fallback():
        fast, after = records_to_arrow(data, "t", 2, start)
    assert after == max(base, start)
    assert fast.equals(batches_to_arrow(decode_record_batches(data), "t", 2, start))


def test_ten_thousand_records_of_one_size_cross_every_varint_width():
    values = [_value(i, 100) for i in range(10_000)]
    data = encode_record_batch(values, timestamps=[i * 3 for i in range(10_000)], base_offset=5)
    with _no_fallback():
        batch, after = records_to_arrow(data, "t", 0, 5)
    assert after == 10_005
    assert batch.column("value").to_pylist() == values
    assert batch.column("offset").to_pylist() == list(range(5, 10_005))
    assert [t.value for t in batch.column("timestamp")] == [i * 3 for i in range(10_000)]


def test_headers_of_many_records_are_read_column_wise():
    """Records with 0 to 3 headers each (null, empty and long values, non-ASCII keys) are read by
    the vectorised reader, header by header across the records, in each record's order."""
    headers = [[(f"k{j}é", None if j == 1 else b"v" * (j * 90)) for j in range(i % 4)] for i in range(3000)]
    data = encode_record_batch([b"x%d" % i for i in range(3000)], headers=headers, timestamps=7)
    with _no_fallback():
        batch, _ = records_to_arrow(data, "t", 0, 5)
    assert [[(h["key"], h["value"]) for h in row] for row in batch.column("headers").to_pylist()] == headers[5:]


def test_a_header_key_that_is_not_utf8_names_its_batch():
    data = bytearray(encode_record_batch([b"v"] * 3, headers=[[("ab", b"1")]] * 3, timestamps=5, base_offset=7))
    data[data.index(b"ab")] = 0xFF
    with pytest.raises(CorruptRecordError, match="t/0: record batch at offset 7: 'utf-8' codec"):
        records_to_arrow(bytes(data), "t", 0, check_crc=False)


def test_ten_byte_varints_read_as_javas_readvarlong():
    """Timestamp deltas of 2**62 and more take ten-byte varints; the vectorised reader reads them
    unsigned, as Java and the reference decoder do, instead of flipping their sign."""
    stamps = [0, 2**62, 5, 2**62 + 7] * 10
    data = encode_record_batch([b"v%d" % i for i in range(40)], timestamps=stamps, base_offset=3)
    with _no_fallback():
        batch, after = records_to_arrow(data, "t", 0)
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == stamps
    assert batch.equals(batches_to_arrow(decode_record_batches(data), "t", 0)) and after == 43


def test_a_compressed_batch_past_max_decompressed_names_the_partition_batch_and_key():
    data = encode_record_batch([bytes(5000)] * 100, base_offset=9, compression=4)  # 500 kB in a few hundred bytes
    with pytest.raises(RecordBatchTooLargeError, match=r"^t/1: record batch at offset 9: zstd data inflates past "
                                                       r"65536 bytes \(max.decompressed.batch.bytes\)"):
        records_to_arrow(data, "t", 1, max_decompressed=65536)
    assert records_to_arrow(data, "t", 1, max_decompressed=500_000 + 1200)[0].num_rows == 100
