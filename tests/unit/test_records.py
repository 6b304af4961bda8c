"""Record batch v2: golden bytes, round trips, cross-checks with aiokafka's codec, and every error path."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from crc32c import crc32c

from raykafka.wire.compression import Compression
from raykafka.wire.errors import CorruptRecordError, DecodeError, KafkaError
from raykafka.wire.record_batch import CREATE_TIME, LOG_APPEND_TIME, Record
from raykafka.wire.record_batch_reader import batch_record_count
from raykafka.wire.record_decoding import decode_record_batches
from raykafka.wire.record_encoding import encode_record_batch
from raykafka.wire.varints import decode_varint, encode_varint

CODECS = list(Compression)


def _golden_batch() -> bytes:
    """One record (key b"k", value b"v", header h=x, timestamp 1000) built field by field."""
    record = (
        b"\x00"  # attributes
        + b"\x00"  # timestamp delta 0
        + b"\x00"  # offset delta 0
        + b"\x02k"  # key length 1 (zigzag 2), key
        + b"\x02v"  # value length 1, value
        + b"\x02"  # 1 header
        + b"\x02h"  # header key length 1, "h"
        + b"\x02x"  # header value length 1, b"x"
    )
    records = bytes([len(record) * 2]) + record  # record length, zigzag
    tail = struct.pack(
        ">hiqqqhii",
        0,  # attributes: no codec, create time, not transactional, not control
        0,  # last offset delta
        1000,  # base timestamp
        1000,  # max timestamp
        -1,  # producer id
        -1,  # producer epoch
        -1,  # base sequence
        1,  # record count
    )
    crc = crc32c(tail + records)
    prefix = struct.pack(
        ">qiibI",
        0,  # base offset
        49 + len(records),  # batch length: everything after this field
        -1,  # partition leader epoch
        2,  # magic
        crc,
    )
    return prefix + tail + records


def _rewrite(batch: bytes, *, attributes: int | None = None, max_timestamp: int | None = None) -> bytes:
    """`batch` with header fields changed and its CRC recomputed."""
    b = bytearray(batch)
    if attributes is not None:
        struct.pack_into(">h", b, 21, attributes)
    if max_timestamp is not None:
        struct.pack_into(">q", b, 35, max_timestamp)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


def test_golden_bytes():
    encoded = encode_record_batch([b"v"], keys=[b"k"], timestamps=1000, headers=[[("h", b"x")]])
    assert encoded == _golden_batch()


def test_golden_bytes_decode():
    (batch,) = decode_record_batches(_golden_batch())
    assert batch.records == [Record(0, 1000, b"k", b"v", [("h", b"x")])]
    assert (batch.base_offset, batch.magic, batch.partition_leader_epoch) == (0, 2, -1)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.crc == struct.unpack_from(">I", _golden_batch(), 17)[0]


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
    ],
)
def test_varint_golden(value, encoded):
    assert encode_varint(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))


@pytest.mark.parametrize("value", [2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 1_700_000_000_000])
def test_varlong_round_trip(value):
    assert decode_varint(encode_varint(value) + b"\xff", 0) == (value, len(encode_varint(value)))


def test_decode_varint_errors():
    with pytest.raises(DecodeError):
        decode_varint(b"\x80\x80")
    with pytest.raises(DecodeError):
        decode_varint(b"\xff" * 11)


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_field(codec):
    values = [b"a" * 100, None, b"", b"\x00\xff" * 5000]
    keys = [None, b"key-1", b"", b"k" * 300]
    timestamps = [1_700_000_000_500, 1_700_000_000_000, 1_700_000_000_900, 1_700_000_000_100]
    headers = [[], [("a", b"1"), ("b", None)], [("unicode-ключ", b"")], [("x", b"y" * 200)] * 3]
    data = encode_record_batch(
        values,
        keys,
        timestamps,
        headers,
        base_offset=1234,
        compression=codec,
        producer_id=77,
        producer_epoch=3,
        base_sequence=40,
        partition_leader_epoch=9,
        is_transactional=True,
    )
    (batch,) = decode_record_batches(data)
    assert [r.value for r in batch.records] == values
    assert [r.key for r in batch.records] == keys
    assert [r.timestamp for r in batch.records] == timestamps
    assert [r.headers for r in batch.records] == headers
    assert [r.offset for r in batch.records] == [1234, 1235, 1236, 1237]
    assert batch.compression == codec
    assert batch.timestamp_type == CREATE_TIME
    assert batch.is_transactional and not batch.is_control
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.partition_leader_epoch) == (
        77,
        3,
        40,
        9,
    )
    assert batch.base_timestamp == timestamps[0]
    assert batch.max_timestamp == max(timestamps)
    assert (batch.last_offset_delta, batch.last_offset, batch.next_offset) == (3, 1237, 1238)


def test_timestamp_defaults_to_now():
    import time

    before = int(time.time() * 1000)
    (batch,) = decode_record_batches(encode_record_batch([b"a", b"b"]))
    after = int(time.time() * 1000)
    assert all(before <= r.timestamp <= after for r in batch.records)
    assert batch.records[0].timestamp == batch.records[1].timestamp


def test_plain_fast_path_with_null_values_and_large_values():
    values = [None, b"x" * 20_000, b"", b"y"]
    (batch,) = decode_record_batches(encode_record_batch(values, timestamps=5))
    assert [r.value for r in batch.records] == values
    assert all(r.key is None and r.headers == [] and r.timestamp == 5 for r in batch.records)


def test_more_records_than_the_varint_table():
    values = [b"%d" % i for i in range(20_000)]
    (batch,) = decode_record_batches(encode_record_batch(values, timestamps=1))
    assert [r.value for r in batch.records] == values
    assert batch.records[-1].offset == 19_999
    assert batch.last_offset_delta == 19_999


def test_buffer_types_accepted():
    data = encode_record_batch(
        [bytearray(b"ab"), memoryview(b"cd")], keys=[memoryview(b"k"), None], timestamps=1
    )
    (batch,) = decode_record_batches(data)
    assert [(r.key, r.value) for r in batch.records] == [(b"k", b"ab"), (None, b"cd")]


def test_type_error_names_the_index():
    with pytest.raises(TypeError, match=r"values\[2\]"):
        encode_record_batch([b"a", None, "text"])
    with pytest.raises(TypeError, match=r"keys\[1\]"):
        encode_record_batch([b"a", b"b"], keys=[None, 5])


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one"):
        encode_record_batch([])
    with pytest.raises(ValueError, match="keys"):
        encode_record_batch([b"a"], keys=[b"a", b"b"])
    with pytest.raises(ValueError, match="timestamps"):
        encode_record_batch([b"a"], timestamps=[1, 2])
    with pytest.raises(ValueError, match="compression"):
        encode_record_batch([b"a"], compression=5)
    with pytest.raises(TypeError, match="header"):
        encode_record_batch([b"a"], headers=[[("h", "not bytes")]])


def test_consecutive_batches_and_truncated_tail():
    first = encode_record_batch([b"a", b"b"], base_offset=0, timestamps=1)
    second = encode_record_batch([b"c"], base_offset=2, timestamps=1, compression=Compression.ZSTD)
    both = decode_record_batches(first + second)
    assert [r.offset for b in both for r in b.records] == [0, 1, 2]
    for cut in (1, 11, 12, 30, 61, len(second) - 1):
        got = decode_record_batches(first + second[:cut])
        assert [b.base_offset for b in got] == [0], cut
    assert decode_record_batches(first[:-1]) == []
    assert decode_record_batches(b"") == []
    assert batch_record_count(first + second) == 3
    assert batch_record_count(first + second[:-1]) == 2


def test_memoryview_input():
    data = encode_record_batch([b"a"], timestamps=1)
    assert decode_record_batches(memoryview(data))[0].records[0].value == b"a"


def test_log_append_time_uses_max_timestamp():
    data = encode_record_batch([b"a", b"b"], timestamps=[10, 20])
    data = _rewrite(data, attributes=0x08, max_timestamp=99_999)
    (batch,) = decode_record_batches(data)
    assert batch.timestamp_type == LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records] == [99_999, 99_999]


def test_control_batch_flag():
    data = _rewrite(encode_record_batch([b"\x00\x00\x00\x01"], keys=[b"\x00\x00\x00\x00"]), attributes=0x30)
    (batch,) = decode_record_batches(data)
    assert batch.is_control and batch.is_transactional


def test_crc_mismatch_names_base_offset():
    data = bytearray(encode_record_batch([b"value"], base_offset=4242, timestamps=1))
    data[-2] ^= 0x01
    with pytest.raises(CorruptRecordError, match="4242"):
        decode_record_batches(bytes(data))
    # with the check off, the flipped byte comes through
    (batch,) = decode_record_batches(bytes(data), check_crc=False)
    assert batch.records[0].value == b"valud"


@pytest.mark.parametrize("magic", [0, 1, 3])
def test_other_magic_rejected(magic):
    data = bytearray(encode_record_batch([b"a"], timestamps=1))
    data[16] = magic
    with pytest.raises(DecodeError, match=f"magic {magic}"):
        decode_record_batches(bytes(data))


def test_malformed_records_raise_our_errors():
    good = encode_record_batch([b"abc", b"def"], keys=[b"k", None], timestamps=1)
    cases = [
        good[:-1] + b"\x02",  # last record claims a header it does not have
        _rewrite(good[:61] + b"\x7f" + good[62:]),  # record length -64
        _rewrite(good[:-3]),  # records cut short inside a complete batch
        _rewrite(good + b"\x00\x00"),  # bytes left over after the records
    ]
    for case in cases:
        fixed = bytearray(case)
        struct.pack_into(">i", fixed, 8, len(fixed) - 12)
        struct.pack_into(">I", fixed, 17, crc32c(bytes(fixed[21:])))
        with pytest.raises(KafkaError):
            decode_record_batches(bytes(fixed))


def test_record_count_larger_than_records():
    data = bytearray(encode_record_batch([b"a"], timestamps=1))
    struct.pack_into(">i", data, 57, 1000)
    with pytest.raises(CorruptRecordError):
        decode_record_batches(_rewrite(bytes(data)))


def test_negative_batch_length():
    data = bytearray(encode_record_batch([b"a"], timestamps=1))
    struct.pack_into(">i", data, 8, -5)
    with pytest.raises(CorruptRecordError, match="negative"):
        decode_record_batches(bytes(data))


def test_corrupt_compressed_payload():
    data = bytearray(encode_record_batch([b"a" * 1000], timestamps=1, compression=Compression.LZ4))
    data[70:80] = b"\xff" * 10
    with pytest.raises(CorruptRecordError, match="lz4"):
        decode_record_batches(_rewrite(bytes(data)))


# ------------------------------------------------------------- an independent implementation agrees

aiokafka_records = pytest.importorskip("aiokafka.record.default_records")
aiokafka_memory = pytest.importorskip("aiokafka.record.memory_records")


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_reads_ours(codec):
    values = [b"v%d" % i * 30 for i in range(50)] + [None]
    keys = [None if i % 3 else b"k%d" % i for i in range(51)]
    headers = [[("h", b"%d" % i)] if i % 2 else [] for i in range(51)]
    data = encode_record_batch(
        values, keys, list(range(1000, 1051)), headers, base_offset=10, compression=codec
    )
    batch = aiokafka_memory.MemoryRecords(data).next_batch()
    assert batch.validate_crc()
    assert batch.compression_type == codec
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [(10 + i, 1000 + i, keys[i], values[i], headers[i]) for i in range(51)]


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_aiokafkas(codec):
    builder = aiokafka_records.DefaultRecordBatchBuilder(2, codec, 0, 5, 1, 0, 1 << 22)
    expected = []
    for i in range(100):
        key = b"key%d" % i if i % 2 else None
        value = b"x" * i if i % 7 else None
        hs = [("n", b"%d" % i)] if i % 5 == 0 else []
        builder.append(i, timestamp=2000 + i, key=key, value=value, headers=hs)
        expected.append(Record(i, 2000 + i, key, value, hs))
    (batch,) = decode_record_batches(bytes(builder.build()))
    assert batch.records == expected
    assert batch.compression == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5, 1, 0)


@pytest.mark.parametrize("n", [1, 63, 64, 65, 8191, 8192, 8193, 20000])
@pytest.mark.parametrize("keys", [False, True])
@pytest.mark.parametrize("stamps", [False, True])
def test_columns_encode_to_the_same_bytes_as_lists(monkeypatch, n, keys, stamps):
    """What the flusher encodes from the pipeline's one-buffer columns is byte for byte what the
    per-record encoder makes: every varint width (lengths of 0, 127, 128, 20000; offset deltas
    past 63 and 8191), null values and keys, timestamps that differ, and slices of a column."""
    import random

    from raykafka.wire import record_encoding
    from raykafka.wire.columns import BinaryColumn

    monkeypatch.setattr(record_encoding, "COLUMNAR_MIN", 1)  # the column-wise encoder at every size

    rng = random.Random(n)
    sizes = [0, 5, 100, 127, 128, 200] + ([20000] if n < 100 else [])
    values = [None if rng.random() < 0.1 else rng.randbytes(rng.choice(sizes)) for _ in range(n)]
    key_list = [None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 3, 64, 130])) for _ in range(n)] \
        if keys else None
    ts = [1_700_000_000_000 + rng.randint(0, 10**9) for _ in range(n)] if stamps else 1_700_000_000_000
    key_column = BinaryColumn.from_list(key_list) if keys else None
    expected = encode_record_batch(values, key_list, ts, producer_id=7, producer_epoch=1, base_sequence=5)
    assert encode_record_batch(BinaryColumn.from_list(values), key_column, ts, producer_id=7, producer_epoch=1,
                               base_sequence=5) == expected
    if n > 10:
        cut = slice(3, n - 2)
        expected = encode_record_batch(values[cut], key_list[cut] if keys else None, ts[cut] if stamps else ts)
        got = encode_record_batch(BinaryColumn.from_list(values)[cut], key_column[cut] if keys else None,
                                  ts[cut] if stamps else ts)
        assert got == expected


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_columns_encode_the_same_under_every_codec(monkeypatch, codec):
    from raykafka.wire import record_encoding
    from raykafka.wire.columns import BinaryColumn

    monkeypatch.setattr(record_encoding, "COLUMNAR_MIN", 1)

    values = [bytes([i % 251]) * (i % 300) if i % 7 else None for i in range(3000)]
    key_list = [b"k%d" % i if i % 3 else None for i in range(3000)]
    assert encode_record_batch(BinaryColumn.from_list(values), BinaryColumn.from_list(key_list), 5,
                               compression=codec) == encode_record_batch(values, key_list, 5, compression=codec)



@pytest.mark.parametrize("shape", ["fixed values", "fixed keys and values", "null values", "one record"])
def test_columns_with_constant_fields_encode_the_same_as_lists(monkeypatch, shape):
    """Fields the same for every record (fixed-size values or keys, all-null values) are encoded
    once and broadcast; the bytes must still be the per-record encoder's."""
    from raykafka.wire import record_encoding
    from raykafka.wire.columns import BinaryColumn

    monkeypatch.setattr(record_encoding, "COLUMNAR_MIN", 1)

    n = 1 if shape == "one record" else 9000  # offset deltas of 1, 2 and 3 bytes beside the constants
    values = [None] * n if shape == "null values" else [b"%0130d" % i for i in range(n)]
    key_list = [b"key-%05d" % i for i in range(n)] if shape == "fixed keys and values" else None
    keys = BinaryColumn.from_list(key_list) if key_list else None
    assert encode_record_batch(BinaryColumn.from_list(values), keys, 42) == encode_record_batch(values, key_list, 42)


HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _header_rows(n: int, seed: int) -> list:
    """Per record None, no headers, or up to 3 headers with null, empty, short and 200-byte values."""
    import random

    rng = random.Random(seed)
    rows: list = [[("first", b"1")]]
    for _ in range(n - 1):
        kind = rng.random()
        if kind < 0.1:
            rows.append(None)
        elif kind < 0.2:
            rows.append([])
        else:
            rows.append([(rng.choice(["h", "trace-id", "é", ""]), rng.choice([None, b"", b"v", b"x" * 200]))
                         for _ in range(rng.randint(1, 3))])
    return rows


@pytest.mark.parametrize("n", [1, 900, 5000])
@pytest.mark.parametrize("keys", [False, True])
def test_headers_from_arrow_encode_to_the_same_bytes_as_lists(monkeypatch, n, keys):
    """A DataFrame's headers column, encoded in Arrow passes (`encode_headers`) and laid into the
    records column-wise, is byte for byte what the per-record encoder makes from Python lists,
    and reads back as the same headers; also for a slice of the column."""
    from raykafka.wire import record_encoding
    from raykafka.wire.columns import BinaryColumn
    from raykafka.wire.record_encoding import encode_header_lists, encode_headers

    monkeypatch.setattr(record_encoding, "COLUMNAR_MIN", 1)
    rows = _header_rows(n, n)
    arrow = pa.array([None if hs is None else [{"key": k, "value": v} for k, v in hs] for hs in rows], HEADER_TYPE)
    values = [b"v%d" % i for i in range(n)]
    key_list = [b"k%d" % i if i % 4 else None for i in range(n)] if keys else None
    key_column = BinaryColumn.from_list(key_list) if keys else None
    expected = encode_record_batch(values, key_list, 7, rows)
    encoded = encode_headers(arrow)
    assert encoded.to_list() == encode_header_lists(rows).to_list()
    assert encode_record_batch(BinaryColumn.from_list(values), key_column, 7, encoded) == expected
    assert [r.headers for r in decode_record_batches(expected)[0].records] == [hs or [] for hs in rows]
    if n > 10:
        cut = slice(4, n - 3)
        assert encode_headers(arrow[cut]).to_list() == encode_header_lists(rows[cut]).to_list()
        assert encode_record_batch(BinaryColumn.from_list(values)[cut], key_column[cut] if keys else None, 7,
                                   encoded[cut]) == encode_record_batch(values[cut], key_list[cut] if keys else None,
                                                                        7, rows[cut])


def test_headers_from_arrow_take_string_values_and_large_lists_and_chunks():
    from raykafka.wire.record_encoding import encode_header_lists, encode_headers

    rows = [[("a", b"1")], None, [("b", None), ("c", b"33")]]
    as_strings = pa.array([None if hs is None else [{"key": k, "value": None if v is None else v.decode()}
                                                    for k, v in hs] for hs in rows],
                          pa.large_list(pa.struct([("key", pa.string()), ("value", pa.string())])))
    chunked = pa.chunked_array([as_strings[:1], as_strings[1:]])
    assert encode_headers(chunked).to_list() == encode_header_lists(rows).to_list()
    assert encode_headers(pa.array([None, []], HEADER_TYPE)) is None  # no record has a header


@pytest.mark.parametrize(("column", "message"), [
    (pa.array([[{"key": None, "value": b"x"}]], HEADER_TYPE), "key must be a string, not null"),
    (pa.array([[{"key": b"k", "value": b"x"}]], pa.list_(pa.struct([("key", pa.binary()), ("value", pa.binary())]))),
     "key must be a string"),
    (pa.array([[{"key": "k", "value": 1}]], pa.list_(pa.struct([("key", pa.string()), ("value", pa.int64())]))),
     "value must be binary"),
    (pa.array([[{"name": "k", "value": b"x"}]], pa.list_(pa.struct([("name", pa.string()), ("value", pa.binary())]))),
     "needs a 'key' and a 'value'"),
    (pa.array([b"x"]), "expected a list of struct"),
])
def test_bad_headers_columns_are_named(column, message):
    from raykafka.wire.record_encoding import encode_headers

    with pytest.raises(TypeError, match=message):
        encode_headers(column)
