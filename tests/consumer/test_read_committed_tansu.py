"""read_committed on tansu, end to end: a transactional raykafka `Producer` commits, aborts and
commits; raykafka's `Consumer` and a Ray Data read (what `read_kafka` runs) return exactly the
committed messages under read_committed, and the aborted ones too under read_uncommitted (tansu
0.6.0 serves aborted records to every reader and lists no aborted transactions, so our readers
decide by the markers).

Consume-transform-produce: a `ConsumerGroup` whose handler writes each batch, transformed, in a
transaction that also commits the batch's offsets (`session.group_metadata()` into
`send_offsets_to_transaction`). An aborted round leaves the group's offsets where they were; a
second group of the same id resumes there, and the output topic holds, read_committed, each
input exactly once.
"""

from __future__ import annotations

import threading

import pytest
import ray

from raykafka.driver.admin import Admin
from raykafka.driver.consumer import Consumer
from raykafka.driver.consumer_group import ConsumerGroup
from raykafka.driver.producer import Producer
from raykafka.spark_bridge.reader import read_dataset
from raykafka.wire.admin import TopicPartition

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(300)]

PARTITIONS = 2
SEND_TIMEOUT = 60  # s: generous bound on one transaction on a shared 2-core machine
FAST = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest",
        "retry.backoff.ms": 200, "enable.auto.commit": False}


def read(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": isolation}) as consumer:
        consumer.assign_topic(topic, "earliest")
        return consumer.read_all(timeout=60).column("value").to_pylist()


def test_the_consumer_and_a_ray_data_read_return_exactly_the_committed_messages(ray_session, bootstrap, topic_name):
    topic = topic_name("rc")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: PARTITIONS})
    rows = {name: [f"{name}-{i}".encode() for i in range(100)] for name in ("first", "aborted", "second")}
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}", "linger.ms": 2}) as producer:
        producer.init_transactions()
        for name, commit in (("first", True), ("aborted", False), ("second", True)):
            producer.begin_transaction()
            assert producer.send_batch(topic, rows[name], keys=rows[name]).result(SEND_TIMEOUT).failed == 0
            (producer.commit_transaction if commit else producer.abort_transaction)(SEND_TIMEOUT)
    committed, every = rows["first"] + rows["second"], rows["first"] + rows["aborted"] + rows["second"]

    assert sorted(read(bootstrap, topic, "read_committed")) == sorted(committed)
    assert sorted(read(bootstrap, topic, "read_uncommitted")) == sorted(every)  # tansu serves aborted records
    for isolation, expected in (("read_committed", committed), ("read_uncommitted", every)):
        config = {"bootstrap.servers": bootstrap, "isolation.level": isolation}
        got = [r["value"] for r in read_dataset(topic, config, "earliest", "latest").take_all()]
        assert sorted(got) == sorted(expected), isolation


@ray.remote(num_cpus=0)
class Log:
    """What the handlers did: (aborted?, input value) per message, in the order they did it."""

    def __init__(self):
        self.done: list[tuple[bool, bytes]] = []

    def add(self, items):
        self.done += items

    def get(self):
        return self.done


def transformer(bootstrap: str, out_topic: str, transactional_id: str, log, abort_prefix: bytes | None):
    """A handler (a class made here, so that it travels to the member by value): each batch,
    transformed, into `out_topic` in one transaction with the batch's offsets; a batch holding
    a value that starts with `abort_prefix` is aborted instead. One producer, one transaction
    at a time: the claims' threads take turns."""

    class Transform:
        def __init__(self):
            self.producer = None
            self.turn = None

        def setup(self, session):
            if self.producer is None:
                self.turn = threading.Lock()
                self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                                          "linger.ms": 2})
                self.producer.init_transactions()

        def consume_claim(self, session, claim):
            md = session.group_metadata()
            for batch in claim.batches():
                values = batch.column("value").to_pylist()
                abort = abort_prefix is not None and any(v.startswith(abort_prefix) for v in values)
                p = self.producer
                with self.turn:
                    p.begin_transaction()
                    assert p.send_batch(out_topic, [b"T:" + v for v in values]).result(SEND_TIMEOUT).failed == 0
                    p.send_offsets_to_transaction(
                        {(claim.topic, claim.partition): batch.column("offset")[-1].as_py() + 1}, md.group_id,
                        generation_id=md.generation_id, member_id=md.member_id,
                        group_instance_id=md.group_instance_id)
                    (p.abort_transaction if abort else p.commit_transaction)(SEND_TIMEOUT)
                ray.get(log.add.remote([(abort, v) for v in values]))

        def cleanup(self, session):
            pass

    return Transform()


def test_consume_transform_produce_commits_offsets_with_the_output(ray_session, bootstrap, topic_name, kit):
    source, out = topic_name("ctp-in"), topic_name("ctp-out")
    group_id, tid = f"g-{source}", f"tx-{source}"
    with Admin(bootstrap) as admin:
        admin.create_topics({source: PARTITIONS, out: PARTITIONS})
    kept = [b"keep-%d" % i for i in range(20)]
    dropped = [b"abort-%d" % i for i in range(10)]
    config = {"bootstrap.servers": bootstrap, "group.id": group_id, "isolation.level": "read_committed", **FAST}

    def committed() -> dict[TopicPartition, int]:
        with Admin(bootstrap) as admin:
            return admin.committed_offsets(group_id)

    def done(abort: bool) -> list[bytes]:
        return sorted(v for a, v in ray.get(log.get.remote()) if a is abort)

    log = Log.remote()
    kit.produce(bootstrap, source, [{"value": v, "partition": i % PARTITIONS} for i, v in enumerate(kept)])
    first = ConsumerGroup(config, [source], transformer(bootstrap, out, tid, log, b"abort-"))
    try:
        kit.wait_for(lambda: done(False) == sorted(kept), timeout=120)
        kit.wait_for(lambda: committed() == {TopicPartition(source, p): 10 for p in range(PARTITIONS)},
                     timeout=60)
        before = committed()
        # a round that aborts: its output is written and aborted, its offsets are not committed
        kit.produce(bootstrap, source, [{"value": v, "partition": i % PARTITIONS} for i, v in enumerate(dropped)])
        kit.wait_for(lambda: done(True) == sorted(dropped), timeout=120)
        first.check()
    finally:
        first.close()
    assert committed() == before, "the aborted round's offsets did not move the group"

    # a second group of the same id resumes from the committed offsets and commits the rest
    log2 = Log.remote()
    second = ConsumerGroup(config, [source], transformer(bootstrap, out, tid, log2, None))
    try:
        kit.wait_for(lambda: sorted(v for _, v in ray.get(log2.get.remote())) == sorted(dropped), timeout=120)
        kit.wait_for(lambda: committed() == {TopicPartition(source, p): 15 for p in range(PARTITIONS)}, timeout=60)
        second.check()
    finally:
        second.close()

    expected = sorted(b"T:" + v for v in kept + dropped)
    assert sorted(read(bootstrap, out, "read_committed")) == expected, "each input exactly once"
    assert sorted(read(bootstrap, out, "read_uncommitted")) == sorted(expected + [b"T:" + v for v in dropped])
