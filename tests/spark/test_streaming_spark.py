"""Spark's foreachBatch over a Kafka stream on the real broker: each trigger a read_kafka
DataFrame from the committed position, the offsets committed only after fn returns."""

import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from raykafka.driver.admin import Admin  # noqa: E402
from raykafka.spark_bridge.streaming import foreach_batch_kafka  # noqa: E402
from raykafka.wire.admin import TopicPartition  # noqa: E402

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.spark]


@pytest.mark.slow  # about 2 minutes: three Spark reads (measured under a load average of 60)
def test_foreach_batch_resumes_after_a_failing_fn_with_every_offset_once(spark, bootstrap, topic_name):
    topic = topic_name("spark-stream")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 2})
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(400):
        producer.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    config = {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"}
    succeeded: list[tuple[int, int]] = []
    batch_ids: list[int] = []
    failed_ids: list[int] = []

    def fn(df, batch_id):
        got = [(r["partition"], r["offset"]) for r in df.select("partition", "offset").collect()]
        assert 0 < len(got) <= 200
        if len(succeeded) == 200 and not failed_ids:
            failed_ids.append(batch_id)
            raise RuntimeError("fn fails")
        batch_ids.append(batch_id)
        succeeded.extend(got)

    with pytest.raises(RuntimeError, match="fn fails"):
        foreach_batch_kafka(spark, topic, config, fn, max_offsets_per_trigger=200, ending_offsets="latest")
    with Admin(bootstrap) as admin:
        committed = admin.committed_offsets(config["group.id"], topic)
    assert sum(committed.values()) == len(succeeded) == failed_ids[0]  # the id: offsets before the batch

    before = len(batch_ids)
    handled = foreach_batch_kafka(spark, topic, config, fn, max_offsets_per_trigger=200, ending_offsets="latest")
    assert handled == len(batch_ids) - before
    assert batch_ids[before] == failed_ids[0]  # the failed batch is handed again first, under its id
    assert sorted(succeeded) == sorted((p, o) for p in range(2) for o in range(200))
    with Admin(bootstrap) as admin:
        assert admin.committed_offsets(config["group.id"], topic) == {
            TopicPartition(topic, 0): 200, TopicPartition(topic, 1): 200}


@pytest.mark.slow  # Spark reads and writes, five triggers twice
def test_foreach_batch_with_a_transactional_sink_writes_each_record_once_across_a_failure(
        spark, bootstrap, topic_name, read_committed):
    """fn writes through the stream's transactional producer (`write_kafka(..., producer=)`); it
    fails once after writing, the stream started again writes that trigger again: a
    read_committed read of the output holds each input once."""
    from pyspark.sql import functions as F

    from raykafka.driver.producer import Producer
    from raykafka.spark_bridge.writer import write_kafka

    source, sink = topic_name("spark-txs-in"), topic_name("spark-txs-out")
    with Admin(bootstrap) as admin:
        admin.create_topics({source: 2, sink: 2})
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(1000):
        producer.produce(source, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    config = {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"}
    failed: list[int] = []

    def run() -> int:
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{sink}"})

        def fn(df, batch_id):
            out = df.select("key", F.concat(F.lit(bytearray(b"out-")), F.col("value")).alias("value"))
            write_kafka(out, sink, producer=txn)
            if batch_id >= 400 and not failed:
                failed.append(batch_id)
                raise RuntimeError("fn fails after writing")

        try:
            return foreach_batch_kafka(spark, source, config, fn, producer=txn, max_offsets_per_trigger=200,
                                       ending_offsets="latest")
        finally:
            txn.close(30)

    with pytest.raises(RuntimeError, match="after writing"):
        run()
    assert run() >= 1
    out, in_log = read_committed(bootstrap, sink)
    assert sorted(out) == sorted(b"out-v%d" % i for i in range(1000))
    assert in_log == 1000 + 200  # the failed trigger's write is in the log, aborted
