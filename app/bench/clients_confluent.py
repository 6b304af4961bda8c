"""confluent-kafka's rows (`produce`, keyed and not; `consume`; paced latency), and the topic
every consume row reads, which confluent-kafka writes (`fill_topic`)."""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

from .rows import Settings
from .workload import KEYS, PARTITIONS, new_topic, paced, percentiles, value_of


def produce_confluent(bootstrap: str, admin: Any, s: Settings, size: int, codec: str,
                      keyed: bool = False) -> list[float]:
    from confluent_kafka import Producer

    value, times, keys = value_of(size), [], KEYS if keyed else [None]
    for _ in range(s.runs):
        t = new_topic(admin, "confluent")
        producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "compression.type": codec})
        producer.produce(t, b"warm")
        producer.flush(30)
        start = time.perf_counter()
        confluent_produce(producer, t, value, s.messages, keys)
        times.append(time.perf_counter() - start)
    return times


def confluent_produce(producer: Any, t: str, value: bytes, n: int, keys: list[Any]) -> None:
    """`n` messages through confluent-kafka's `produce()`, keys in turn, waiting for room when its
    queue is full, then flushed. No callback a message (a Python callback would be most of the
    cost): `flush` returning 0 is what vouches for the delivery."""
    for i in range(n):
        while True:
            try:
                producer.produce(t, value, key=keys[i % len(keys)])
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0


def produce_confluent_keyed(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    return produce_confluent(bootstrap, admin, s, size, codec, keyed=True)


def fill_topic(bootstrap: str, admin: Any, n: int, size: int, codec: str, per_batch: int = 10_000) -> str:
    """A topic of `n` messages written by confluent-kafka, `per_batch` records per record batch at
    most; message i to partition i % PARTITIONS. Each partition's last message goes alone, in a
    batch of its own, so that tansu's ListOffsets(latest), the last batch's base offset + 1, is the
    partition's end: Ray Data's `read_kafka` ends each partition there (an end offset it is given
    is clamped to that answer), and would otherwise stop at the last batch's first record."""
    from confluent_kafka import Producer

    t = new_topic(admin, f"consume-{size}-{codec}-{per_batch}")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20 if per_batch > 1 else 0,
                         "batch.num.messages": per_batch, "queue.buffering.max.messages": 1_000_000,
                         "compression.type": codec})
    value = value_of(size)
    alone = min(n, PARTITIONS)  # the last message of each partition
    for i in range(n - alone):
        while True:
            try:
                producer.produce(t, value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    for i in range(n - alone, n):
        producer.produce(t, value, partition=i % PARTITIONS)
        assert producer.flush(30) == 0  # a batch of its own
    return t


def consume_confluent(bootstrap: str, t: str, s: Settings) -> list[float]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    times = []
    for _ in range(s.runs):
        start = time.perf_counter()
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                      "enable.auto.commit": False})
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got = 0
        while got < s.messages:
            got += sum(1 for m in c.consume(num_messages=10000, timeout=1.0) if not m.error())
        times.append(time.perf_counter() - start)
        c.close()
    return times


def latency_confluent(bootstrap: str, admin: Any, s: Settings, rate: int, keyed: bool = False) -> tuple[float, float]:
    from confluent_kafka import Producer

    t, lat, keys, sent = new_topic(admin, "lat-confluent"), [], KEYS if keyed else [None], itertools.count()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    producer.produce(t, b"warm")
    producer.flush(30)
    value = value_of(100)

    def send(t0: float) -> None:
        producer.produce(t, value, key=keys[next(sent) % len(keys)],
                         on_delivery=lambda err, msg, t0=t0: lat.append(time.perf_counter() - t0))
        producer.poll(0)

    paced(int(rate * s.latency_seconds), rate, send, lambda d: producer.poll(min(d, 0.0005)))
    assert producer.flush(60) == 0
    return percentiles(lat)
