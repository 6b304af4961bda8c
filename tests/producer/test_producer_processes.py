"""A producer's process budget (DESIGN.md, "The process budget"): every producer actor is a
Ray worker process (about 125 MiB), named `<producer>/<role>[-key]`. On tansu, writing one
topic through one broker starts the topic, partition and leader dispatchers, one BrokerWorker
(the broker's aggregator and flusher in one process) and the RetryHandler: five (4 + B, B = 1;
there is no results actor: the driver polls the RetryHandler and the BrokerWorker). On the
mock cluster's 8 brokers, `broker.worker.actors` caps the BrokerWorkers: the brokers share them,
and the other roles stay 4. Writing 12 topics runs as many processes as writing 1: a new topic
adds a partitioner in the PartitionDispatcher and state machines in the LeaderDispatcher."""

from __future__ import annotations

import pytest
import ray

from raykafka.driver.admin import Admin
from raykafka.driver.producer import Producer
from raykafka.mock import MockCluster

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

# one topic, one broker (tansu reports a single broker)
MAX_PROCESSES_ONE_TOPIC = 5
# on 8 brokers with broker.worker.actors=2: the BrokerWorkers, and every other role of one topic
MAX_BROKER_WORKERS = 2
MAX_OTHER_PROCESSES = MAX_PROCESSES_ONE_TOPIC - 1


@pytest.mark.broker
def test_a_producer_writing_one_topic_on_one_broker_runs_at_most_five_processes(
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
        assert roles == ["broker_worker", "leader_dispatcher", "partition_dispatcher", "retry_handler",
                         "topic_dispatcher"], named
        assert len(named) <= MAX_PROCESSES_ONE_TOPIC, named
        assert sorted(live_actors(prefix)) == named, "every live actor of the producer is named"
    finally:
        producer.close(30)
    assert live_actors(producer.name) == []


def test_eight_brokers_share_the_capped_broker_workers(ray_session, live_actors):
    """On the mock cluster's 8 brokers, with `broker.worker.actors` 2 (the default on a 2-CPU
    node: its CPUs): two BrokerWorker processes host the 8 brokers, every message arrives once
    and in order, and close leaves no actor."""
    partitions = 8  # partition p is led by broker p % 8 + 1: one per broker
    with MockCluster(n_brokers=8, topics={"t": partitions}) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 2, "broker.worker.actors": 2})
        try:
            sent: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
            futures = []
            for i in range(800):
                p = i % partitions
                sent[p].append(b"m%d" % i)
                futures.append(producer.send("t", b"m%d" % i, partition=p))
            assert producer.flush(60) == 0
            assert all(f.result(0).offset >= 0 for f in futures)
            prefix = producer.name + "/"
            named = sorted(n for n in ray.util.list_named_actors() if n.startswith(prefix))
            workers = [n for n in named if n[len(prefix):].startswith("broker_worker")]
            assert len(workers) == MAX_BROKER_WORKERS, named
            assert len(named) - len(workers) == MAX_OTHER_PROCESSES, named
        finally:
            producer.close(30)
        for p in range(partitions):
            assert [r.value for r in cluster.records("t", p)] == sent[p]
    assert live_actors(producer.name) == []


def _processes(prefix: str) -> set[int]:
    """The pids of the live actors whose names start with `prefix`."""
    import ray._private.state

    return {a["Pid"] for a in ray._private.state.actors().values()
            if (a.get("Name") or "").startswith(prefix) and a["State"] == "ALIVE" and a.get("Pid")}


@pytest.mark.broker
def test_a_producer_runs_as_many_processes_for_12_topics_as_for_1(ray_session, bootstrap, topic_name):
    topics = [topic_name(f"budget{i}") for i in range(12)]
    with Admin(bootstrap) as admin:
        admin.create_topics({t: 3 for t in topics})
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        counts = {}
        written = 0
        for upto in (1, 4, 12):
            futures = [producer.send(t, b"m", key=b"%d" % i) for t in topics[written:upto] for i in range(20)]
            assert producer.flush(60) == 0 and all(f.result(0).offset >= 0 for f in futures)
            written = upto
            counts[upto] = len(_processes(producer.name + "/"))
    assert counts[1] == counts[4] == counts[12] <= MAX_PROCESSES_ONE_TOPIC, counts
