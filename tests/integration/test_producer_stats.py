"""The producer's statistics callback on the real broker: its figures are what was sent."""

from __future__ import annotations

import threading

import pytest

from raykafka.driver.admin import Admin
from raykafka.driver.producer import Producer
from raykafka.wire.errors import ConfigError
from raykafka.wire.stats import total

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(300)]


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
