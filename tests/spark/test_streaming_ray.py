"""Streaming micro-batches into Ray Data on the real broker: the position is committed only after
a step returns, so a stream stopped by a failing step and started again hands every offset to a
successful step exactly once, nothing skipped, the failed batch again first."""

import threading
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from raykafka.driver.admin import Admin  # noqa: E402
from raykafka.spark_bridge.streaming import KafkaStream, stream_kafka  # noqa: E402
from raykafka.wire.admin import TopicPartition  # noqa: E402

pytestmark = [pytest.mark.broker, pytest.mark.ray]


def produce(bootstrap: str, topic: str, first: int, count: int, partitions: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(first, first + count):
        producer.produce(topic, value=b"v%d" % i, partition=i % partitions)
    assert producer.flush(30) == 0


def rows(ds) -> list[tuple[int, int]]:
    return [(r["partition"], r["offset"]) for r in ds.select_columns(["partition", "offset"]).take_all()]


def test_a_restarted_stream_resumes_at_the_failed_batch_with_nothing_skipped(ray_for_spark, bootstrap, topic_name):
    topic = topic_name("stream")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 3})
    produce(bootstrap, topic, 0, 1200, 3)
    config = {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"}
    succeeded: list[tuple[int, int]] = []
    failed: list = []

    def step(ds, batch):
        got = rows(ds)
        assert sorted(got) == sorted((r.partition, o) for r in batch.ranges for o in range(r.start, r.end))
        assert len(got) <= 400 + 3  # maxOffsetsPerTrigger, at most one more per partition
        if len(succeeded) >= 400 and not failed:
            failed.append(batch)
            raise RuntimeError("the step fails")
        succeeded.extend(got)

    with pytest.raises(RuntimeError, match="the step fails"):
        stream_kafka(topic, config, step, max_offsets_per_trigger=400, ending_offsets="latest")
    assert 400 <= len(succeeded) < 1200
    with Admin(bootstrap) as admin:  # the group holds where the last successful step ended
        committed = admin.committed_offsets(config["group.id"], topic)
    assert committed == {TopicPartition(topic, r.partition): r.start for r in failed[0].ranges}

    resumed: list = []

    def step_again(ds, batch):
        resumed.append(batch)
        succeeded.extend(rows(ds))

    handled = stream_kafka(topic, config, step_again, max_offsets_per_trigger=400, ending_offsets="latest")
    assert handled == len(resumed) >= 1
    assert resumed[0] == failed[0]  # the failed batch is handed again first: same ranges, same id
    assert sorted(succeeded) == sorted((p, o) for p in range(3) for o in range(400))  # each once, none skipped
    assert [b.batch_id for b in resumed] == sorted({b.batch_id for b in resumed})


def test_an_unbounded_stream_picks_up_records_as_they_come(ray_for_spark, bootstrap, topic_name, wait_for):
    topic = topic_name("stream-live")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 2})
    config = {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"}
    seen: list[tuple[int, int]] = []
    stream = KafkaStream(topic, config, starting_offsets="latest", trigger_interval=0.2)
    runner = threading.Thread(target=lambda: stream.run(lambda ds, batch: seen.extend(rows(ds))))
    runner.start()
    try:
        wait_for(lambda: stream.position, timeout=60)  # it started at the (empty) end
        produce(bootstrap, topic, 0, 500, 2)
        wait_for(lambda: len(seen) >= 500, timeout=120)
        produce(bootstrap, topic, 500, 500, 2)
        wait_for(lambda: len(seen) >= 1000, timeout=120)
    finally:
        stream.stop()
        runner.join(120)
    assert not runner.is_alive()
    assert sorted(seen) == sorted((p, o) for p in range(2) for o in range(500))
    with Admin(bootstrap) as admin:
        assert admin.committed_offsets(config["group.id"], topic) == {
            TopicPartition(topic, 0): 500, TopicPartition(topic, 1): 500}


def test_a_stream_over_explicit_ranges_without_a_group_reads_exactly_them(ray_for_spark, bootstrap, topic_name):
    topic = topic_name("stream-range")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 2})
    produce(bootstrap, topic, 0, 400, 2)
    batches: list = []
    seen: list[tuple[int, int]] = []

    def step(ds, batch):
        batches.append(batch)
        seen.extend(rows(ds))

    stream = KafkaStream(topic, {"bootstrap.servers": bootstrap}, starting_offsets={topic: {"0": 50, "1": -2}},
                         ending_offsets={topic: {"0": 150, "1": 30}}, max_offsets_per_trigger=60)
    assert stream.run(step) == len(batches) == 3  # 130 records, at most 60 a batch
    assert sorted(seen) == [(0, o) for o in range(50, 150)] + [(1, o) for o in range(30)]
    assert all(b.count <= 60 + 2 for b in batches)
    assert stream.position == {TopicPartition(topic, 0): 150, TopicPartition(topic, 1): 30}


def test_without_fail_on_data_loss_a_position_past_the_log_moves_into_it(ray_for_spark, bootstrap, topic_name,
                                                                          wait_for):
    """A group's position past the log's end (the topic re-created, say): with failOnDataLoss=false
    the stream warns, goes on from the log's end, and hands the records that come after."""
    topic = topic_name("stream-loss")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 1})
        produce(bootstrap, topic, 0, 10, 1)
        group = f"g-{uuid.uuid4().hex[:8]}"
        admin.alter_offsets(group, {(topic, 0): 500})
    seen: list[tuple[int, int]] = []
    stream = KafkaStream(topic, {"bootstrap.servers": bootstrap, "group.id": group}, fail_on_data_loss=False)
    runner = threading.Thread(target=lambda: stream.run(lambda ds, batch: seen.extend(rows(ds))))
    runner.start()
    try:
        wait_for(lambda: stream.position.get(TopicPartition(topic, 0)) == 10, timeout=60)
        produce(bootstrap, topic, 10, 5, 1)
        wait_for(lambda: len(seen) >= 5, timeout=120)
    finally:
        stream.stop()
        runner.join(120)
    assert sorted(seen) == [(0, o) for o in range(10, 15)]
    with Admin(bootstrap) as admin:
        assert admin.committed_offsets(group, topic) == {TopicPartition(topic, 0): 15}


def test_a_stream_with_a_group_id_warns_of_nothing_it_does_itself(ray_for_spark, bootstrap, topic_name, caplog):
    """The stream config of docs/streaming.md (`bootstrap.servers` and `group.id`) is used by the stream's
    own Admin too: that internal Admin is given only the keys it reads, so nothing is logged or
    warned of `group.id` (warnings are routed to logging here, as `logging.captureWarnings` does)."""
    import logging
    import warnings

    topic = topic_name("quiet")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 2})
    produce(bootstrap, topic, 0, 20, 2)
    config = {"bootstrap.servers": bootstrap, "group.id": f"etl-{uuid.uuid4().hex[:8]}"}
    seen: list[int] = []
    logging.captureWarnings(True)
    try:
        with caplog.at_level(logging.WARNING), warnings.catch_warnings():
            warnings.simplefilter("always")
            stream_kafka([topic], config, lambda ds, batch: seen.append(ds.count()), ending_offsets="latest")
    finally:
        logging.captureWarnings(False)
    assert sum(seen) == 20
    assert not [r for r in caplog.records if "not used by" in r.getMessage()], caplog.text
