"""read_kafka's options beyond the offsets, as Spark's Kafka source has them, on the real broker:
startingOffsetsByTimestamp / endingOffsetsByTimestamp, subscribePattern, failOnDataLoss."""

import json
import uuid
from types import SimpleNamespace

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from raykafka.driver.admin import Admin  # noqa: E402
from raykafka.spark_bridge.reader import read_dataset, read_kafka  # noqa: E402
from raykafka.spark_bridge.streaming import stream_kafka  # noqa: E402
from raykafka.wire.errors import ConfigError, DataLossError, RecordBatchTooLargeError  # noqa: E402

pytestmark = [pytest.mark.broker, pytest.mark.ray]

T0 = 1_700_000_000_000


def fill(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    """Record i to partition i % partitions, stamped T0 + 10 * i."""
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: partitions})
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=i % partitions, timestamp=T0 + 10 * i)
    assert producer.flush(30) == 0


def offsets(ds) -> list[tuple[str, int, int]]:
    return sorted((r["topic"], r["partition"], r["offset"]) for r in ds.take_all())


def test_offsets_by_timestamp_start_and_end_at_the_first_record_at_or_after(ray_for_spark, bootstrap, topic_name):
    topic = topic_name("by-ts")
    fill(bootstrap, topic, 200, 2)
    config = {"bootstrap.servers": bootstrap}
    starts = json.dumps({topic: {"0": T0 + 100, "1": T0 + 95}})   # records 10 and 11: offsets 5 and 5
    ends = json.dumps({topic: {"0": T0 + 200, "1": T0 + 1_000_000}})  # record 20: offset 10; none: the end
    ds = read_dataset(topic, config, starting_offsets_by_timestamp=starts, ending_offsets_by_timestamp=ends)
    assert offsets(ds) == [(topic, 0, o) for o in range(5, 10)] + [(topic, 1, o) for o in range(5, 100)]

    late = json.dumps({topic: {"0": T0 + 1_000_000, "1": T0}})
    with pytest.raises(ConfigError, match=rf"{topic}/0 has no record at or after"):
        read_dataset(topic, config, starting_offsets_by_timestamp=late)
    ds = read_dataset(topic, config, starting_offsets_by_timestamp=late,
                      starting_offsets_by_timestamp_strategy="latest")
    assert offsets(ds) == [(topic, 1, o) for o in range(100)]
    with pytest.raises(ConfigError, match="does not name partition"):
        read_dataset(topic, config, starting_offsets_by_timestamp=json.dumps({topic: {"0": T0}}))


@pytest.mark.spark
def test_read_kafka_holds_what_read_dataset_holds_to_the_millisecond(spark, bootstrap, topic_name):
    """read_kafka's rows come to Spark as Arrow streams decoded by its executors: every column as
    read_dataset has it, timestamps in Spark's microseconds (as milliseconds they would read as
    a thousandth of the time)."""
    topic = topic_name("parity")
    fill(bootstrap, topic, 300, 3)
    config = {"bootstrap.servers": bootstrap}
    df = read_kafka(spark, topic, config=config)
    assert [f.dataType.simpleString() for f in df.schema.fields] == [
        "binary", "binary", "string", "int", "bigint", "timestamp", "int", "array<struct<key:string,value:binary>>"]
    got = sorted(tuple(r) for r in df.selectExpr("topic", "partition", "offset", "CAST(value AS STRING)",
                                                 "unix_millis(timestamp)", "timestampType", "key IS NULL",
                                                 "size(headers)").collect())
    expected = sorted((r["topic"], r["partition"], r["offset"], r["value"].decode(),
                       int(r["timestamp"].timestamp() * 1000), r["timestampType"], r["key"] is None, len(r["headers"]))
                      for r in read_dataset(topic, config).take_all())
    assert got == expected and len(got) == 300
    assert sorted(millis for *_, millis, _, _, _ in got) == [T0 + 10 * i for i in range(300)]
    assert df.filter("partition = 1").count() == 100  # Spark reads the streams again for a second action


@pytest.mark.spark
def test_read_kafka_raises_what_failed_its_read_and_reads_nothing_as_an_empty_dataframe(spark, bootstrap,
                                                                                        topic_name):
    """A read task's error reaches read_kafka's caller, named (here a gzip batch inflating past
    max.decompressed.batch.bytes); a topic with no record reads as an empty DataFrame of the
    source's columns."""
    topic, empty = topic_name("spark-cap"), topic_name("spark-empty")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 1, empty: 2})
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "compression.type": "gzip"})
    producer.produce(topic, value=b"A" * 100_000, partition=0)
    assert producer.flush(30) == 0
    config = {"bootstrap.servers": bootstrap}
    with pytest.raises(RecordBatchTooLargeError, match=r"max.decompressed.batch.bytes"):
        read_kafka(spark, topic, config={**config, "max.decompressed.batch.bytes": 65536})
    assert read_kafka(spark, topic, config=config).count() == 1
    nothing = read_kafka(spark, empty, config=config)
    assert nothing.count() == 0 and nothing.columns == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


def test_a_spark_session_that_raydp_did_not_start_is_named(ray_for_spark):
    """Spark's executors read the streams from Ray's object store only under RayDP: another
    session is refused, saying so, before Spark is handed anything."""
    import ray

    from raykafka.spark_bridge.to_spark import streams_to_spark
    from raykafka.wire.arrow_batches import SCHEMA

    elsewhere = SimpleNamespace(sparkContext=SimpleNamespace(appName=f"local-{uuid.uuid4().hex[:6]}"))
    with pytest.raises(ValueError, match=r"was not started through RayDP \(raykafka.spark_bridge.session.init_spark\)"):
        streams_to_spark(elsewhere, [ray.put(b"")], SCHEMA)


@pytest.mark.spark
def test_a_released_dataframe_s_streams_are_no_longer_held(spark, bootstrap, topic_name):
    """RayDP's master holds a read's streams until Spark stops, unless `release` lets them go
    (what `foreach_batch_kafka` does after each batch)."""
    import ray

    from raykafka.spark_bridge import to_spark

    topic = topic_name("release")
    fill(bootstrap, topic, 50, 2)
    df = read_kafka(spark, topic, config={"bootstrap.servers": bootstrap})
    assert df.count() == 50
    key, master = to_spark._HELD[df], to_spark._master(spark)
    assert isinstance(ray.get(master.get_object.remote(key, 0)), ray.ObjectRef)
    to_spark.release(spark, df)
    with pytest.raises(Exception, match="IndexError"):
        ray.get(master.get_object.remote(key, 0))
    assert df not in to_spark._HELD
    to_spark.release(spark, df)  # twice: nothing more to let go


def test_subscribe_pattern_reads_every_topic_whose_whole_name_matches(ray_for_spark, bootstrap):
    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    for name, count in (("x-a", 30), ("x-b", 20), ("y", 10)):
        fill(bootstrap, f"{prefix}-{name}", count, 1)
    config = {"bootstrap.servers": bootstrap}
    ds = read_dataset(None, config, subscribe_pattern=rf"{prefix}-x-.")
    assert offsets(ds) == ([(f"{prefix}-x-a", 0, o) for o in range(30)] + [(f"{prefix}-x-b", 0, o) for o in range(20)])
    with pytest.raises(ConfigError, match="exactly one"):
        read_dataset(f"{prefix}-y", config, subscribe_pattern=prefix + ".*")


def test_fail_on_data_loss_raises_or_reads_what_is_there(ray_for_spark, bootstrap, topic_name, caplog):
    topic = topic_name("loss")
    fill(bootstrap, topic, 20, 2)
    config = {"bootstrap.servers": bootstrap}
    beyond = json.dumps({topic: {"0": 5000, "1": -1}})
    with pytest.raises(DataLossError, match=rf"{topic}/0: range \[0, 5000\) is outside the partition's log \[0, 10\)"):
        read_dataset(topic, config, "earliest", beyond)
    ds = read_dataset(topic, config, "earliest", beyond, fail_on_data_loss=False)
    assert offsets(ds) == [(topic, p, o) for p in range(2) for o in range(10)]
    assert "data loss" in caplog.text

    # a stream whose committed position is past the log (the topic re-created, say) stops, naming it
    group = f"g-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap) as admin:
        admin.alter_offsets(group, {(topic, 0): 500, (topic, 1): 3})
    handed = []
    with pytest.raises(DataLossError, match=rf"{topic}/0: range \[500, 500\)"):
        stream_kafka(topic, {**config, "group.id": group}, lambda ds, b: handed.append(b), ending_offsets="latest")
    assert handed == []
