"""A stream whose step writes to Kafka in the trigger's transaction (`producer=`), on the real
broker: the output and the group's committed offsets move together. A step that fails after
writing leaves none of its output committed, and the stream started again writes it once; an
actor of the producer's pipeline killed mid-trigger aborts the trigger, which runs again on the
new pipeline. The output is read back read_committed and read_uncommitted (where the aborted
writes show)."""

import uuid
from types import SimpleNamespace

import pytest
import ray

confluent_kafka = pytest.importorskip("confluent_kafka")

from raykafka.driver.admin import Admin  # noqa: E402
from raykafka.driver.producer import Producer  # noqa: E402
from raykafka.spark_bridge.streaming import KafkaStream, stream_kafka  # noqa: E402
from raykafka.spark_bridge.writer import write_dataset  # noqa: E402
from raykafka.wire.admin import TopicPartition  # noqa: E402
from raykafka.wire.errors import ConfigError  # noqa: E402

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(600)]

ROWS, PARTITIONS, PER_TRIGGER = 1500, 3, 300


def produce(bootstrap: str, topic: str) -> list[bytes]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    values = [b"in-%05d" % i for i in range(ROWS)]
    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=value[-2:], partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return values


def transform(ds):
    """The step's output: each record's value marked, its key kept (to the output topic)."""
    return ds.select_columns(["key", "value"]).map_batches(
        lambda b: {"key": b["key"], "value": [b"out-" + v for v in b["value"]]}, batch_format="numpy")


def setup_topics(bootstrap: str, topic_name) -> tuple[str, str, list[bytes]]:
    source, sink = topic_name("txs-in"), topic_name("txs-out")
    with Admin(bootstrap) as admin:
        admin.create_topics({source: PARTITIONS, sink: PARTITIONS})
    return source, sink, produce(bootstrap, source)


@pytest.mark.slow  # 9 s; the default tier keeps a trigger aborted and run again
def test_a_step_failing_after_its_write_leaves_nothing_and_the_restart_writes_each_once(
        ray_for_spark, bootstrap, topic_name, read_committed):
    source, sink, values = setup_topics(bootstrap, topic_name)
    config = {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"}
    txn = {"bootstrap.servers": bootstrap, "transactional.id": f"tx-{sink}"}
    failed: list = []

    def step(ds, batch):
        write_dataset(transform(ds), sink, producer=producer)
        if len(failed) == 0 and batch.batch_id >= 2 * PER_TRIGGER:  # the third trigger, once written
            failed.append(batch)
            raise RuntimeError("the step fails after writing")

    producer = Producer(txn)
    try:
        with pytest.raises(RuntimeError, match="after writing"):
            stream_kafka(source, config, step, producer=producer, max_offsets_per_trigger=PER_TRIGGER,
                         ending_offsets="latest")
    finally:
        producer.close(30)
    with Admin(bootstrap) as admin:  # the offsets committed are those of the two triggers before
        assert admin.committed_offsets(config["group.id"], source) == {
            TopicPartition(source, r.partition): r.start for r in failed[0].ranges}

    producer = Producer(txn)  # the same transactional.id, as a restarted job has
    try:
        handled = stream_kafka(source, config, step, producer=producer, max_offsets_per_trigger=PER_TRIGGER,
                               ending_offsets="latest")
    finally:
        producer.close(30)
    assert handled >= 3
    out, in_log = read_committed(bootstrap, sink)
    assert sorted(out) == sorted(b"out-" + v for v in values)  # each once
    assert in_log == ROWS + PER_TRIGGER  # the failed trigger's write is in the log, aborted


def test_an_actor_killed_mid_trigger_aborts_it_and_the_trigger_runs_again(
        ray_for_spark, bootstrap, topic_name, kill_actor, read_committed):
    source, sink, values = setup_topics(bootstrap, topic_name)
    config = {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"}
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{sink}",
                         "delivery.timeout.ms": 40_000})
    killed: list[str] = []
    attempts: dict[int, int] = {}

    def step(ds, batch):
        attempts[batch.batch_id] = attempts.get(batch.batch_id, 0) + 1
        if len(attempts) == 2 and not killed:  # the second trigger, before it writes
            (name,) = [n for n in ray.util.list_named_actors() if n.startswith(f"{producer.name}/broker_worker")]
            killed.append(kill_actor(name))
        write_dataset(transform(ds), sink, producer=producer)

    try:
        handled = stream_kafka(source, config, step, producer=producer, max_offsets_per_trigger=PER_TRIGGER,
                               ending_offsets="latest")
        assert producer.healed == 1 and killed
    finally:
        producer.close(30)
    assert handled == len(attempts) == ROWS // PER_TRIGGER
    assert sorted(attempts.values()) == [1] * (handled - 1) + [2]  # the killed trigger ran twice
    out, in_log = read_committed(bootstrap, sink)
    assert sorted(out) == sorted(b"out-" + v for v in values) and in_log >= ROWS
    with Admin(bootstrap) as admin:
        assert admin.committed_offsets(config["group.id"], source) == {
            TopicPartition(source, p): ROWS // PARTITIONS for p in range(PARTITIONS)}


def test_a_producer_without_transactional_id_or_a_stream_without_group_is_refused():
    plain = SimpleNamespace(config={"transactional.id": None})
    transactional = SimpleNamespace(config={"transactional.id": "tx"})
    with pytest.raises(ConfigError, match="transactional.id"):
        KafkaStream("t", {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}, producer=plain)
    with pytest.raises(ConfigError, match="group.id"):
        KafkaStream("t", {"bootstrap.servers": "127.0.0.1:1"}, producer=transactional)
