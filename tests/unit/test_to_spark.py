"""spark_bridge.to_spark's Ray-free part: the Arrow IPC streams Spark's executors decode."""

import datetime as dt

import pyarrow as pa
import pytest

from raykafka.spark_bridge.to_spark import SPARK_TIMESTAMP_UNIT, spark_ready, stream_of, streams_of
from raykafka.wire.arrow_batches import SCHEMA


def _records(n: int, first: int = 0) -> pa.Table:
    stamps = [1_795_000_000_123 + i for i in range(first, first + n)]
    return pa.table({
        "key": pa.array([None if i % 2 else b"k%d" % i for i in range(first, first + n)], pa.binary()),
        "value": pa.array([b"v%d" % i for i in range(first, first + n)], pa.binary()),
        "topic": pa.array(["t"] * n, pa.string()),
        "partition": pa.array([3] * n, pa.int32()),
        "offset": pa.array(range(first, first + n), pa.int64()),
        "timestamp": pa.array(stamps, pa.int64()).view(pa.timestamp("ms", tz="UTC")),
        "timestampType": pa.array([0] * n, pa.int32()),
        "headers": pa.array([[{"key": "h", "value": b"x"}]] * n, SCHEMA.field("headers").type),
    }, schema=SCHEMA)


def test_timestamps_go_in_microseconds_and_nothing_else_changes():
    ready = spark_ready(SCHEMA)
    assert ready.field("timestamp").type == pa.timestamp(SPARK_TIMESTAMP_UNIT, tz="UTC")
    assert SCHEMA.field("timestamp").type.unit == "ms"  # Kafka's unit, so the cast is needed
    for name in SCHEMA.names:
        if name != "timestamp":
            assert ready.field(name) == SCHEMA.field(name)
    assert spark_ready(ready) == ready


def test_a_stream_holds_every_table_in_order_with_the_same_instants():
    tables = [_records(5), _records(0, 5), _records(3, 5)]
    rows, stream = stream_of(tables, SCHEMA)
    assert rows == 8
    read = pa.ipc.open_stream(pa.BufferReader(stream)).read_all()
    assert read.schema == spark_ready(SCHEMA)
    assert read.column("offset").to_pylist() == list(range(8))
    assert read.column("timestamp")[0].as_py() == dt.datetime.fromtimestamp(1_795_000_000.123, tz=dt.UTC)
    assert read.column("timestamp").cast(pa.int64()).to_pylist() == [(1_795_000_000_123 + i) * 1000 for i in range(8)]
    assert read.drop_columns(["timestamp"]).equals(pa.concat_tables(tables).drop_columns(["timestamp"]))


def test_no_table_makes_an_empty_stream_of_the_schema():
    rows, stream = stream_of([], SCHEMA)
    assert rows == 0
    read = pa.ipc.open_stream(pa.BufferReader(stream)).read_all()
    assert read.num_rows == 0 and read.schema == spark_ready(SCHEMA)


def test_a_table_of_another_schema_is_refused():
    with pytest.raises((pa.ArrowInvalid, ValueError, KeyError)):
        stream_of([pa.table({"value": [b"x"]})], SCHEMA)


def test_streams_are_cut_to_the_bound_in_order_and_lose_no_row():
    table = _records(1000)
    most = table.nbytes // 7  # some 140 rows a stream
    streams = list(streams_of([table, _records(0), _records(10, 1000)], SCHEMA, most=most))
    assert len(streams) >= 8  # at least 7 for the first table, 1 for the last; none for the empty one
    read = [pa.ipc.open_stream(pa.BufferReader(stream)).read_all() for _, stream in streams]
    assert [rows for rows, _ in streams] == [t.num_rows for t in read]
    assert all(t.nbytes <= most * 1.1 for t in read)  # the bound, but for a row's rounding
    offsets = [o for t in read for o in t.column("offset").to_pylist()]
    assert offsets == list(range(1010))


def test_a_row_larger_than_the_bound_goes_alone():
    streams = list(streams_of([_records(3)], SCHEMA, most=1))
    assert [rows for rows, _ in streams] == [1, 1, 1]
