"""The process budget (DESIGN.md): a producer's processes do not grow with the topics it writes.
A new topic adds a partitioner in the PartitionDispatcher and state machines in the
LeaderDispatcher, never a process. Counted on tansu (one broker) from Ray's actor table."""

from __future__ import annotations

import pytest

from raykafka.driver.admin import Admin
from raykafka.driver.producer import Producer

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(300)]

# the processes of a producer on one broker (4 + B): the TopicDispatcher, the PartitionDispatcher,
# the LeaderDispatcher, the RetryHandler, and the broker's BrokerWorker
ONE_BROKER_PROCESSES = 5


def _processes(prefix: str) -> set[int]:
    """The pids of the live actors whose names start with `prefix`."""
    import ray._private.state

    return {a["Pid"] for a in ray._private.state.actors().values()
            if (a.get("Name") or "").startswith(prefix) and a["State"] == "ALIVE" and a.get("Pid")}


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
    assert counts[1] == counts[4] == counts[12] <= ONE_BROKER_PROCESSES, counts
