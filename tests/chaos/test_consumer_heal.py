"""Consumer actors killed mid-read, as a process crash or a lost node kills them
(`ray.kill(no_restart=False)`), against tansu while a producer writes: a `PartitionConsumer`
hosting several partitions (the `Consumer` replaces it, each partition at the offset after the
last record of it handed out) and a `BrokerConsumer` (Ray restarts it; its partitions subscribe
again from their own positions). Every offset of every partition is handed out once, in order,
across both kills; the seconds from each kill to the next record of the partitions it stopped
are recorded (time to heal)."""

from __future__ import annotations

import threading
import time

import pytest
import ray

from raykafka.driver.consumer import Consumer
from raykafka.driver.producer import Producer

pytestmark = [pytest.mark.ray, pytest.mark.broker, pytest.mark.timeout(300)]

PARTITIONS = 4
PARTITION_CONSUMERS = 2  # each hosts 2 of the partitions: one kill stops two, the other two read on
CHUNK, PACE = 50, 0.02  # messages written per step, seconds between steps


def test_killed_partition_and_broker_consumers_heal_with_no_gap_and_no_repeat(
        ray_session, bootstrap, topic_name, record, kit):
    """A producer writes 4 partitions (~2,000 msg/s) until both kills have healed; the partition
    consumer hosting partition 0 (and another) is killed once 1,000 records of partition 0 were
    handed out, then the broker consumer once 3,000 records were in all; then everything written
    is read."""
    topic = topic_name("heal")
    kit.create_topic(bootstrap, topic, PARTITIONS)
    sent: list[bytes] = []
    futures: list = []
    stop = threading.Event()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def write() -> None:
        while not stop.is_set():
            for _ in range(CHUNK):
                value = b"h%07d" % len(sent)
                futures.append(producer.send(topic, value, partition=len(sent) % PARTITIONS))
                sent.append(value)
            stop.wait(PACE)

    writer = threading.Thread(target=write, daemon=True)
    offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    read: list[tuple[int, bytes]] = []
    kills: list[tuple[str, float, set[int]]] = []  # (what, when, the partitions it stopped)
    healed: dict[str, float] = {}
    with Consumer({"bootstrap.servers": bootstrap, "fetch.max.wait.ms": 100,
                   "partition.consumer.actors": PARTITION_CONSUMERS}) as consumer:
        consumer.assign_topic(topic, "earliest")
        writer.start()
        try:
            for batch in consumer.batches(timeout=30):
                partition = batch.column("partition")[0].as_py()
                offsets[partition] += batch.column("offset").to_pylist()
                read += kit.rows(batch)
                now = time.monotonic()
                for what, when, stopped in kills:
                    if what not in healed and partition in stopped:
                        healed[what] = round(now - when, 3)
                if not kills and len(offsets[0]) >= 1000:
                    hosted = {p for (_, p), slot in consumer._slots.items() if slot == consumer._slots[(topic, 0)]}
                    ray.kill(consumer._host_of(topic, 0), no_restart=False)
                    kills.append(("partition_consumer", time.monotonic(), hosted))
                elif len(kills) == 1 and "partition_consumer" in healed and len(read) >= 3000:
                    (broker_consumer,) = consumer._brokers.values()
                    ray.kill(broker_consumer, no_restart=False)
                    kills.append(("broker_consumer", time.monotonic(), set(range(PARTITIONS))))
                if len(healed) == 2 and not stop.is_set():
                    stop.set()
                    writer.join(30)
                    producer.flush(60)
                if stop.is_set() and len(read) >= len(sent):
                    break
        finally:
            stop.set()
            writer.join(30)
            producer.close()
        not_written = sum(1 for f in futures if f.exception(1) is not None)
        heals = dict(consumer.heals_per_partition)
        failed = dict(consumer.failed)
    figures = kit.consumed_figures(read, sent)
    assert not_written == 0, "the producer wrote everything"
    record(sent=len(sent), delivered=len(read), failed=len(failed), **figures,
           actors_killed=[what for what, _, _ in kills], seconds_to_heal=healed,
           partition_consumers_replaced=sum(heals.values()))
    assert [what for what, _, _ in kills] == ["partition_consumer", "broker_consumer"], "both kills happened"
    assert set(healed) == {"partition_consumer", "broker_consumer"}, healed
    assert not failed, failed
    for p in range(PARTITIONS):
        assert offsets[p] == list(range(len(sent[p::PARTITIONS]))), f"partition {p}: every offset once, in order"
    assert figures == {"lost": 0, "duplicated": 0, "reordered": 0}
    (_, _, hosted), _ = kills
    assert len(hosted) == PARTITIONS // PARTITION_CONSUMERS, f"the killed actor hosted {sorted(hosted)}"
    assert heals == {(topic, p): 1 for p in hosted}, "each partition it hosted healed once, the others never"
