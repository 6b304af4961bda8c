"""The faster hot paths give exactly what the plain ones give: the numpy record reader against
the per-record loop, and Arrow columns taken from their buffers against `to_pylist`."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from raykafka.wire import arrow_batches
from raykafka.wire.columns import BinaryColumn
from raykafka.wire.errors import CorruptRecordError
from raykafka.wire.record_encoding import encode_record_batch


def _fetched(n: int, per_batch: int, *, keys: bool, headers: bool, codec: int, size: int) -> tuple[bytes, list]:
    values = [os.urandom(size // 2) + b"v" * (size - size // 2) if i % 11 else None for i in range(n)]
    ks = [None if i % 5 == 0 else b"key-%d" % i for i in range(n)] if keys else None
    hs = [[("h", b"%d" % i)] if i % 7 == 0 else [] for i in range(n)] if headers else None
    data = b"".join(encode_record_batch(values[i:i + per_batch], keys=None if ks is None else ks[i:i + per_batch],
                                        headers=None if hs is None else hs[i:i + per_batch], base_offset=i,
                                        timestamps=[1_700_000_000_000 + j for j in range(i, min(n, i + per_batch))],
                                        compression=codec)
                    for i in range(0, n, per_batch))
    return data, values


@pytest.mark.parametrize("codec", [0, 3])
@pytest.mark.parametrize("keys,headers", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("size", [10, 100, 1024])
@pytest.mark.parametrize("start", [0, 333])
@pytest.mark.parametrize("per_batch", [1, 7, 200])
@pytest.mark.parametrize("given", ["bytes", "array"])
def test_numpy_reader_matches_the_loop(monkeypatch, codec, keys, headers, size, start, per_batch, given):
    """Given as bytes, or as the consumer's feed gives it: a uint8 array (from the object store)."""
    data, values = _fetched(1200, per_batch, keys=keys, headers=headers, codec=codec, size=size)
    if given == "array":
        data = np.frombuffer(data, np.uint8)
    fast, after = arrow_batches.records_to_arrow(data, "t", 3, start)
    monkeypatch.setattr(arrow_batches, "_read_vectorised", lambda *a: None)  # every record through the loop
    slow, after_slow = arrow_batches.records_to_arrow(data, "t", 3, start)
    assert fast.equals(slow)
    assert after == after_slow == 1200
    assert fast.column("value").to_pylist() == values[start:]
    assert fast.column("value").to_pylist() == values[start:]
    assert fast.column("offset").to_pylist() == list(range(start, 1200))


def test_a_corrupt_record_in_a_long_batch_still_names_the_batch():
    data = bytearray(encode_record_batch([b"x" * 100] * 64, base_offset=0, timestamps=1))
    data[61] = 0x02  # the first record's length says 1 byte: the chain of records breaks
    with pytest.raises(CorruptRecordError, match="record batch at offset 0"):
        arrow_batches.records_to_arrow(bytes(data), "t", 0, 0, check_crc=False)


def test_a_corrupt_record_among_many_small_batches_names_its_batch():
    data = b"".join(encode_record_batch([b"x" * 10], base_offset=i, timestamps=1) for i in range(50))
    one = len(data) // 50
    data = bytearray(data)
    data[one * 20 + 61 + 5] = 0x7E  # record 20's key length: 63 bytes, past its record
    with pytest.raises(CorruptRecordError, match="record batch at offset 20: key or value overruns"):
        arrow_batches.records_to_arrow(bytes(data), "t", 0, 0, check_crc=False)


@pytest.mark.parametrize("kind", [pa.binary(), pa.string(), pa.large_binary(), pa.large_string()])
def test_binary_column_from_arrow_matches_to_pylist(kind):
    raw = [None if i % 4 == 0 else (f"é{i}" * (i % 9)) for i in range(500)]
    column = pa.chunked_array([pa.array(raw[:200], kind), pa.array(raw[200:], kind)]).slice(37, 400)
    expected = [None if v is None else (v.encode() if isinstance(v, str) else v) for v in column.to_pylist()]
    assert BinaryColumn.from_arrow(column).to_list() == expected
    assert BinaryColumn.from_arrow(pa.array([1, 2])) is None  # not a bytes column: the caller converts it
