"""A producer's process budget (DESIGN.md, "The process budget"), counted on tansu: every
producer actor is a Ray worker process (about 125 MiB), named `<producer>/<role>[-key]`.
Writing one topic through one broker starts the topic, partition and leader dispatchers, one
BrokerWorker (the broker's aggregator and flusher in one process), the RetryHandler and the
ProducerResults: six."""

from __future__ import annotations

import pytest
import ray

from raykafka.driver.admin import Admin
from raykafka.driver.producer import Producer

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(300)]

# one topic, one broker (tansu reports a single broker)
MAX_PROCESSES_ONE_TOPIC = 6


def test_a_producer_writing_one_topic_on_one_broker_runs_at_most_six_processes(
        ray_session, bootstrap, topic_name, live_actors):
    topic = topic_name("budget")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 3})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    try:
        futures = [producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 7)) for i in range(500)]
        batch = producer.send_batch(topic, [b"b%d" % i for i in range(500)])
        assert producer.flush(60) == 0
        assert all(f.result(0).offset >= 0 for f in futures) and batch.result(0).ok
        prefix = producer.name + "/"
        named = sorted(n for n in ray.util.list_named_actors() if n.startswith(prefix))
        roles = sorted({n[len(prefix):].split("-", 1)[0] for n in named})
        assert roles == ["broker_worker", "leader_dispatcher", "partition_dispatcher", "producer_results",
                         "retry_handler", "topic_dispatcher"], named
        assert len(named) <= MAX_PROCESSES_ONE_TOPIC, named
        assert sorted(live_actors(prefix)) == named, "every live actor of the producer is named"
    finally:
        producer.close(30)
    assert live_actors(producer.name) == []
