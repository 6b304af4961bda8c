"""Property tests: hostile bytes end, in bounded time, in a result or a `DecodeError`, through
both record-batch decoders (`decode_record_batches`, and `records_to_arrow`, which the consumers
use); where both give a result, they give the same records; any records round-trip.

Every decode runs under `cpu_bound` (tests/unit/conftest.py): a decoder that loops for ever
fails its case after BOUND seconds of CPU, with the input in the message, instead of hanging."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raykafka.wire.arrow_batches import records_to_arrow
from raykafka.wire.compression import Compression, compress, decompress
from raykafka.wire.errors import CorruptRecordError, DecodeError
from raykafka.wire.record_decoding import decode_record_batches
from raykafka.wire.record_encoding import encode_record_batch

from ..reference import batches_to_arrow
from ..tiers import fuzz_examples

FUZZ = settings(max_examples=fuzz_examples(300), deadline=2000, suppress_health_check=[HealthCheck.too_slow])
BOUND = 2.0  # CPU seconds one decode of a few KiB may take; an honest one takes milliseconds
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


def _decode_only_our_errors(data: bytes, bounded, check_crc: bool = True) -> None:
    """Both decoders end on `data` within BOUND, each with a result or a DecodeError; where
    both give one, the same records."""
    what = f"{len(data)} bytes {data[:64].hex()}{'...' if len(data) > 64 else ''} (check_crc={check_crc})"
    reference = arrow = None
    with bounded(BOUND, f"decode_record_batches on {what}"):
        try:
            reference = decode_record_batches(data, check_crc=check_crc)
        except DecodeError:
            pass
    with bounded(BOUND, f"records_to_arrow on {what}"):
        try:
            arrow, _after = records_to_arrow(data, "t", 0, check_crc=check_crc)
        except DecodeError:
            pass
    assert reference is None or isinstance(reference, list)
    if reference is None or arrow is None:
        return
    if any(b.last_offset < 0 for b in reference):
        return  # records_to_arrow skips a batch by its header's last offset, as Java's consumer does
    try:
        expected = batches_to_arrow(reference, "t", 0)
    except (OverflowError, pa.ArrowInvalid):
        return  # an offset or timestamp past int64: the reference keeps Python ints
    assert arrow.equals(expected)


def _with_crc(buf: bytearray, at: int = 0) -> bytes:
    """The batch at `at` with its CRC recomputed over its attributes onward (as far as its
    length reaches, or the end of `buf`)."""
    (length,) = struct.unpack_from(">i", buf, at + 8)
    end = min(len(buf), at + 12 + max(length, 9))
    struct.pack_into(">I", buf, at + 17, crc32c(bytes(buf[at + 21:end])))
    return bytes(buf)


def _hostile(field: str, value: int, compression: int = 0) -> bytes:
    """A valid batch of three records with one header field set to `value`, its CRC recomputed."""
    offset, fmt = HEADER_FIELDS[field]
    buf = bytearray(encode_record_batch([b"a", b"bb", b"ccc"], timestamps=1, base_offset=5, compression=compression))
    struct.pack_into(fmt, buf, offset, value)
    return bytes(buf) if field == "crc" else _with_crc(buf)


# where each header field lies, and its type (see record_batch.py)
HEADER_FIELDS = {
    "base_offset": (0, ">q"), "batch_length": (8, ">i"), "partition_leader_epoch": (12, ">i"),
    "magic": (16, ">b"), "crc": (17, ">I"), "attributes": (21, ">h"), "last_offset_delta": (23, ">i"),
    "base_timestamp": (27, ">q"), "max_timestamp": (35, ">q"), "producer_id": (43, ">q"),
    "producer_epoch": (51, ">h"), "base_sequence": (53, ">i"), "record_count": (57, ">i"),
}


def _count_minus_one() -> bytes:
    return _hostile("record_count", -1)


def _length_minus_twelve_crc_zero() -> bytes:
    buf = bytearray(encode_record_batch([b"a", b"bb", b"ccc"], timestamps=1))
    struct.pack_into(">i", buf, 8, -12)  # the batch would end where it starts
    struct.pack_into(">I", buf, 17, 0)  # the CRC of no bytes
    return bytes(buf)


@pytest.mark.parametrize("make", [_count_minus_one, _length_minus_twelve_crc_zero])
@pytest.mark.parametrize("check_crc", [True, False])
def test_the_batches_that_hung_the_consumer_are_refused(cpu_bound, make, check_crc):
    """A record count of -1 under a valid CRC, and a batch length of -12 with a CRC of 0: both
    decoders refuse them, naming the batch, where records_to_arrow used to loop for ever."""
    data = make()
    for name, decode in (("records_to_arrow", lambda: records_to_arrow(data, "t", 3, check_crc=check_crc)),
                         ("decode_record_batches", lambda: decode_record_batches(data, check_crc=check_crc))):
        with cpu_bound(BOUND, f"{name} on {make.__name__}"), pytest.raises(CorruptRecordError) as caught:
            decode()
        assert "record batch at offset" in str(caught.value) and "negative" in str(caught.value)
        if name == "records_to_arrow":
            assert str(caught.value).startswith("t/3: ")


@pytest.mark.parametrize("length", [-61, -13, 0, 5, 48])
def test_a_batch_length_too_short_for_a_header_is_refused(cpu_bound, length):
    """Not a cut (the broker cuts bytes, not length fields): too short to hold a header, it used
    to send records_to_arrow backwards into the bytes before it, or past its own CRC."""
    data = encode_record_batch([b"x"], timestamps=1) + _hostile("batch_length", length)
    for decode in (lambda: records_to_arrow(data, "t", 0), lambda: decode_record_batches(data)):
        with cpu_bound(BOUND, f"length {length}"), pytest.raises(CorruptRecordError, match="shorter than a batch header"):
            decode()


@pytest.mark.parametrize("compression", [0, 3])
def test_a_record_count_beyond_the_bytes_is_refused_before_any_record_is_read(cpu_bound, compression):
    data = _hostile("record_count", 2**31 - 1, compression)
    for decode in (lambda: records_to_arrow(data, "t", 0), lambda: decode_record_batches(data)):
        with cpu_bound(BOUND, "count 2**31-1"), pytest.raises(CorruptRecordError, match="claims 2147483647 records"):
            decode()


def test_a_record_with_many_headers_is_read_in_bounded_time(cpu_bound):
    """150,000 headers in one record (300 kB, valid): read one by one in Python (under 0.1 s of
    CPU), not in 150,000 numpy rounds, one per header position (3 s before)."""
    headers = [[("", None)] * 150_000, [("k", b"v")]]
    data = encode_record_batch([b"a", b"b"], headers=headers, timestamps=1)
    with cpu_bound(1.5, "records_to_arrow on 150,000 headers"):
        batch, _ = records_to_arrow(data, "t", 0)
    assert [len(h) for h in batch.column("headers").to_pylist()] == [150_000, 1]
    assert batch.column("headers")[1].as_py() == [{"key": "k", "value": b"v"}]


_INTERESTING = {
    ">q": st.sampled_from([-1, 0, 1, -(2**63), 2**63 - 1]),
    ">i": st.sampled_from([-1, 0, 1, -12, -61, 48, 49, 50, 2**31 - 1, -(2**31)]),
    ">h": st.sampled_from([-1, 0, 1, 0x20, 0x08, 0x07, 5, 2**15 - 1]),
    ">b": st.sampled_from([-1, 0, 1, 2, 3]),
    ">I": st.sampled_from([0, 2**32 - 1]),
}
_ANY = {">q": st.integers(-(2**63), 2**63 - 1), ">i": st.integers(-(2**31), 2**31 - 1),
        ">h": st.integers(-(2**15), 2**15 - 1), ">b": st.integers(-128, 127), ">I": st.integers(0, 2**32 - 1)}


@pytest.mark.parametrize("field", sorted(HEADER_FIELDS))
@settings(max_examples=fuzz_examples(40), deadline=2000, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_hostile_header_fields_with_the_crc_recomputed(cpu_bound, field, data):
    """One header field of one batch in a fetch of up to three set to an edge or a random
    value, its CRC recomputed so that the decoders read on."""
    parts = data.draw(st.lists(valid_batch(), min_size=1, max_size=3))
    which = data.draw(st.integers(0, len(parts) - 1))
    offset, fmt = HEADER_FIELDS[field]
    value = data.draw(_INTERESTING[fmt] | _ANY[fmt])
    at = sum(len(p) for p in parts[:which])
    buf = bytearray(b"".join(parts))
    struct.pack_into(fmt, buf, at + offset, value)
    raw = bytes(buf) if field == "crc" else _with_crc(buf, at)
    _decode_only_our_errors(raw, cpu_bound)
    _decode_only_our_errors(raw, cpu_bound, check_crc=False)


@FUZZ
@given(st.binary(max_size=2000))
def test_random_bytes_decode(cpu_bound, data):
    _decode_only_our_errors(data, cpu_bound)
    _decode_only_our_errors(data, cpu_bound, check_crc=False)


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_behind_a_plausible_header(cpu_bound, tail):
    """Garbage after a well-formed v2 header with a matching CRC: the record parser itself is fuzzed."""
    for codec in Compression:
        body = struct.pack(">hiqqqhii", int(codec), 0, 0, 0, -1, -1, -1, 3) + tail
        data = struct.pack(">qiibI", 0, len(body) + 9, -1, 2, crc32c(body)) + body
        _decode_only_our_errors(data, cpu_bound)


@FUZZ
@given(codecs, st.binary(max_size=2000))
def test_random_bytes_decompress(cpu_bound, codec, data):
    with cpu_bound(BOUND, f"decompress {codec!r} {data[:64].hex()}"):
        try:
            out = decompress(codec, data)
        except DecodeError:  # CorruptRecordError, or RecordBatchTooLargeError for a claimed size past the cap
            return
    assert isinstance(out, bytes)


@FUZZ
@given(valid_batch(), st.data())
def test_corrupted_batches_raise_only_our_errors(cpu_bound, batch, data):
    """Bytes overwritten anywhere, with the CRC fixed up afterwards so the parser sees them."""
    buf = bytearray(batch)
    for _ in range(data.draw(st.integers(min_value=1, max_value=5))):
        pos = data.draw(st.integers(min_value=0, max_value=len(buf) - 1))
        buf[pos] = data.draw(st.integers(min_value=0, max_value=255))
    _decode_only_our_errors(bytes(buf), cpu_bound)
    _decode_only_our_errors(bytes(buf), cpu_bound, check_crc=False)
    if len(buf) > 21:
        struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
        _decode_only_our_errors(bytes(buf), cpu_bound)


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
