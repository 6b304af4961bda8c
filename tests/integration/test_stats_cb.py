"""stats_cb (`statistics.interval.ms`) on the real broker: the producer's figures are what was
sent, the consumer's and the consumer group's what was read."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from raykafka.driver.admin import Admin
from raykafka.driver.consumer import Consumer
from raykafka.driver.consumer_group import ConsumerGroup
from raykafka.driver.producer import Producer
from raykafka.wire.errors import ConfigError
from raykafka.wire.stats import total

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def filler(ray_session, bootstrap) -> Iterator[Producer]:
    """One default producer that fills the consumer tests' topics: each test fills a fresh topic
    of its own, and what they count is their consumer's or group's figures, never this
    producer's, so sharing it (one start of its actors for the module) changes no count. The
    producer's own stats test builds its own."""
    with Producer({"bootstrap.servers": bootstrap}) as shared:
        yield shared


def test_stats_cb_counts_what_was_produced(bootstrap, ray_session, topic_name):
    topic = topic_name("stats")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 3})
    reports: list[dict] = []
    first = threading.Event()

    def stats_cb(stats: dict) -> None:
        reports.append(stats)
        first.set()

    values = [b"v%06d" % i for i in range(20_000)]
    with Producer({"bootstrap.servers": bootstrap, "statistics.interval.ms": 200}, stats_cb=stats_cb,
                  name=f"stats-{topic}") as producer:
        assert producer.send_batch(topic, values).result(60).ok
        futures = [producer.send(topic, b"x" * 10) for _ in range(500)]
        assert all(f.result(60).offset >= 0 for f in futures)
        assert first.wait(10)  # a report while it runs, from its own thread
    last = reports[-1]["metrics"]  # the one close gave
    assert reports[-1]["type"] == "producer" and reports[-1]["name"] == f"stats-{topic}"
    assert total(last, "raykafka_producer_messages_total", topic=topic) == 20_500
    assert total(last, "raykafka_producer_delivered_total", topic=topic) == 20_500
    assert total(last, "raykafka_producer_failed_total") == 0
    assert total(last, "raykafka_producer_bytes_total") >= sum(map(len, values)) + 500 * 10
    assert total(last, "raykafka_producer_buffer_bytes") == 0
    requests = total(last, "raykafka_producer_requests_total")
    batches = total(last, "raykafka_producer_batches_total")
    assert 1 <= requests <= batches
    assert total(last, "raykafka_producer_ack_latency_seconds") == batches  # one per batch acknowledged
    assert total(last, "raykafka_producer_requests_in_flight") == 0
    assert total(last, "raykafka_producer_retries_total") == 0
    assert total(last, "raykafka_producer_request_bytes_total") > sum(map(len, values))


def test_stats_cb_without_an_interval_is_refused_before_any_actor_starts(bootstrap, ray_session, live_actors):
    with pytest.raises(ConfigError, match="statistics.interval.ms"):
        Producer({"bootstrap.servers": bootstrap}, stats_cb=print, name="stats-refused")
    assert live_actors("stats-refused/") == []


def _filled_topic(bootstrap: str, producer: Producer, topic: str, partitions: int, n: int) -> int:
    """`n` messages of 100 bytes in `topic`, sent by `producer`; returns their value bytes."""
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: partitions})
    assert producer.send_batch(topic, [b"%0100d" % i for i in range(n)],
                               partitions=[i % partitions for i in range(n)]).result(60).ok
    return 100 * n


def test_consumer_stats_cb_counts_what_was_consumed(bootstrap, ray_session, topic_name, filler):
    topic = topic_name("cstats")
    value_bytes = _filled_topic(bootstrap, filler, topic, 2, 30_000)
    reports: list[dict] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "statistics.interval.ms": 100}, stats_cb=reports.append)
    try:
        consumer.assign_topic(topic, "earliest")
        read = sum(b.num_rows for b in consumer.batches(timeout=30, until_end=True))
    finally:
        consumer.close()
    assert read == 30_000
    last = reports[-1]
    assert last["type"] == "consumer" and last["name"] == consumer.id
    m = last["metrics"]
    assert total(m, "raykafka_consumer_records_total", topic=topic) == 30_000
    assert total(m, "raykafka_consumer_bytes_total", topic=topic) > value_bytes  # record batches as fetched
    assert total(m, "raykafka_consumer_lag", topic=topic) == 0  # read to the end of both partitions
    assert {item["tags"]["partition"] for item in m["raykafka_consumer_lag"]} == {"0", "1"}
    # at least one fetch timed: one Fetch asks for both partitions of the broker, and when the
    # producer packed each partition into one record batch, one answer carries them all
    assert total(m, "raykafka_consumer_fetch_latency_seconds") >= 1


def test_group_stats_cb_counts_records_rebalances_and_commits(bootstrap, ray_session, topic_name, wait_for,
                                                             filler):
    import ray

    topic = topic_name("gstats")
    _filled_topic(bootstrap, filler, topic, 2, 10_000)

    @ray.remote(num_cpus=0)
    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def add(self, n: int) -> int:
            self.n += n
            return self.n

    counter = Counter.remote()
    reports: list[dict] = []
    config = {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
              "session.timeout.ms": 10_000, "statistics.interval.ms": 500}
    group = ConsumerGroup(config, [topic], lambda batch: ray.get(counter.add.remote(batch.num_rows)),
                          members=1, stats_cb=reports.append)
    try:
        wait_for(lambda: ray.get(counter.add.remote(0)) >= 10_000, timeout=120)
    finally:
        group.close()
    last = reports[-1]
    assert last["type"] == "consumer_group" and last["name"] == f"g-{topic}"
    m = last["metrics"]
    assert total(m, "raykafka_consumer_records_total", topic=topic) == 10_000
    assert total(m, "raykafka_consumer_rebalances_total", group=f"g-{topic}") == 1
    assert total(m, "raykafka_consumer_commits_total") >= 1  # at least the one as it left
    assert total(m, "raykafka_consumer_lag", topic=topic) == 0
