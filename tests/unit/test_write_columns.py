"""The columns a Kafka write takes from a table, one rule for `Producer.send_batch`
(`producer_input.batch_columns`) and the Ray Data and Spark sinks (`spark_bridge.sink.sink_table`):
a table with a column neither takes is refused by both, naming the column, and one with
every column they take is taken by both. Ray-free: the checks run before any actor is asked."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest

from raykafka.driver.producer_input import batch_columns
from raykafka.spark_bridge.sink import sink_table


def both(table: pa.Table) -> list:
    """What send_batch's reading of `table` and the sink's (of the table, and of it as pandas) give."""
    return [batch_columns(table, None, None, None, None), sink_table(table), sink_table(table.to_pandas())]


@pytest.mark.parametrize("extra", [{"colour": ["red"]}, {"Value": [b"b"]}])
def test_a_column_no_kafka_write_takes_is_refused_by_send_batch_and_the_sinks_alike(extra):
    table = pa.table({"value": [b"a"], "key": [b"k"], **extra})
    (name,) = extra
    for read in (lambda: batch_columns(table, None, None, None, None), lambda: sink_table(table),
                 lambda: sink_table(table.to_pandas())):
        with pytest.raises(ValueError, match=rf"columns \['{name}'\] are not Kafka sink columns \(key, value, "
                                             r"topic, partition, headers, timestamp\)"):
            read()


def test_a_reads_offset_and_timestamp_type_are_dropped_by_the_sinks_and_refused_by_send_batch():
    """The sinks take a read's rows as they are (the broker sets those two); send_batch, given
    them in a table of its caller's, refuses them by name, as any column it does not write."""
    table = pa.table({"value": [b"a"], "offset": [7], "timestampType": pa.array([0], pa.int32())})
    for taken in (sink_table(table), sink_table(table.to_pandas())):
        assert taken.column_names == ["value"]
    with pytest.raises(ValueError, match=r"columns \['offset', 'timestampType'\] are not Kafka sink columns"):
        batch_columns(table, None, None, None, None)


def test_a_table_without_a_value_column_is_refused_alike():
    table = pa.table({"key": [b"k"]})
    for read in (lambda: batch_columns(table, None, None, None, None), lambda: sink_table(table)):
        with pytest.raises(ValueError, match=r"a Kafka write needs a 'value' column; the table has \['key'\]"):
            read()


def test_every_column_a_kafka_write_takes_is_taken_by_both():
    """A `timestamp` column too, which send_batch always read: the sinks hand it on."""
    stamp = datetime.datetime(2026, 11, 26, tzinfo=datetime.UTC)
    table = pa.table({
        "key": pa.array([b"k"]), "value": pa.array([b"v"]), "topic": ["events"], "partition": pa.array([1], pa.int32()),
        "headers": pa.array([[{"key": "h", "value": b"x"}]],
                            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        "timestamp": pa.array([stamp], pa.timestamp("ms", tz="UTC")),
    })
    columns, arrow, pandas = both(table)
    values, keys, headers, partitions, timestamps, topics = columns
    assert (list(values), list(keys), partitions, timestamps, topics) == (
        [b"v"], [b"k"], [1], [int(stamp.timestamp() * 1000)], ["events"])
    assert arrow.column_names == table.column_names and list(pandas.column_names) == table.column_names


class _FrameOfColumns:
    """A stand-in for a Spark DataFrame that has only a schema: a write that reaches Spark's job
    fails on it with AttributeError, so a named error raised before means nothing started."""

    def __init__(self, *names: str):
        self.schema = type("Schema", (), {"fields": [type("Field", (), {"name": n})() for n in names]})()


@pytest.mark.parametrize(("config", "named"), [({"bootstrap.servers": "h:1", "linger.ms": "soon"}, "linger.ms"),
                                               ({"bootstrap.servers": "h:1", "no.such.key": 1}, "no.such.key")])
def test_write_kafka_refuses_a_wrong_config_before_spark_runs_its_job(config, named):
    from raykafka.spark_bridge.writer import write_kafka
    from raykafka.wire.errors import ConfigError

    with pytest.raises(ConfigError, match=named):
        write_kafka(_FrameOfColumns("key", "value"), "t", config)


def test_write_kafka_refuses_a_column_no_kafka_write_takes_before_spark_runs_its_job():
    from raykafka.spark_bridge.writer import write_kafka

    with pytest.raises(ValueError, match="offsets"):
        write_kafka(_FrameOfColumns("value", "offsets"), "t", {"bootstrap.servers": "h:1"})
