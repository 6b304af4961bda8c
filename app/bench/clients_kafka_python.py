"""kafka-python's rows: `send` and `poll`."""

from __future__ import annotations

import time
from typing import Any

from .rows import Settings
from .workload import PARTITIONS, new_topic, value_of


def produce_kafka_python(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    from kafka import KafkaProducer

    value, times = value_of(size), []
    for _ in range(s.runs):
        t = new_topic(admin, "kafka-python")
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5,
                                 compression_type=None if codec == "none" else codec)
        producer.send(t, b"warm").get(30)
        start = time.perf_counter()
        futures = [producer.send(t, value) for _ in range(s.messages)]
        producer.flush(300)
        times.append(time.perf_counter() - start)
        assert all(f.succeeded() for f in futures[:: max(1, s.messages // 100)])
        producer.close()
    return times


def consume_kafka_python(bootstrap: str, t: str, s: Settings) -> list[float]:
    from kafka import KafkaConsumer, TopicPartition

    times = []
    for _ in range(s.runs):
        start = time.perf_counter()
        c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        tps = [TopicPartition(t, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        got = 0
        while got < s.messages:
            got += sum(len(v) for v in c.poll(timeout_ms=1000, max_records=10000).values())
        times.append(time.perf_counter() - start)
        c.close()
    return times
