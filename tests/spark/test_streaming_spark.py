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
