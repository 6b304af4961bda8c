"""Pattern subscriptions (a topic name that starts with `^`, wire/subscription.py) on the mock
cluster: the rule alone; a group member run in-process (`MemberRuntime`, no Ray), a
`ConsumerGroup` and a `Consumer`, each reading a topic created after it subscribed, every record
once, and dropping a topic that goes away."""

from __future__ import annotations

import threading
import time

import pytest
import ray

from raykafka.actors.group_member_state import MemberRuntime
from raykafka.driver.consumer import Consumer
from raykafka.driver.consumer_group import ConsumerGroup
from raykafka.mock import MockCluster
from raykafka.wire.errors import ConfigError
from raykafka.wire.subscription import TopicSubscription

pytestmark = pytest.mark.timeout(120)

LOOK_MS = 200  # metadata.max.age.ms: how soon a topic that comes to match is picked up
PICKED_UP_S = 20  # bound on waiting for it here, for a busy machine
PER_TOPIC = 20
QUIET_S = 3.0  # `batches` with no data for this long returns: many looks at the patterns

GROUP = {"heartbeat.interval.ms": 100, "session.timeout.ms": 6000, "auto.offset.reset": "earliest",
         "fetch.max.wait.ms": 50, "auto.commit.interval.ms": 200, "retry.backoff.ms": 20,
         "metadata.max.age.ms": LOOK_MS}


def values(topic: str) -> list[bytes]:
    return [f"{topic}-{i}".encode() for i in range(PER_TOPIC)]


class Seen:
    """Every value a handler got, in order of arrival (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: list[bytes] = []

    def add(self, batch) -> None:
        with self.lock:
            self.values.extend(batch.column("value").to_pylist())

    def of(self, topic: str) -> list[bytes]:
        with self.lock:
            return [v for v in self.values if v.startswith(topic.encode() + b"-")]


def test_a_name_that_starts_with_a_caret_is_a_pattern_matched_whole():
    sub = TopicSubscription.of(["plain", "^orders-.*", "^x\\d"])
    assert sub.names == ("plain",) and sub.has_patterns
    assert sub.topics(["orders-a", "orders-b", "my-orders-c", "x1", "x12", "plain-2"]) == [
        "orders-a", "orders-b", "plain", "x1"]
    assert not TopicSubscription.of("plain").has_patterns
    with pytest.raises(ConfigError, match="not a regular expression"):
        TopicSubscription.of("^orders-(")


def test_a_member_subscribed_to_a_pattern_reads_a_topic_created_later_and_drops_one_deleted(kit):
    seen = Seen()
    with MockCluster(n_brokers=1, topics={"orders-a": 2, "other": 1}) as cluster:
        kit.mock_produce(cluster, "orders-a", 0, values("orders-a"), per_batch=5)
        kit.mock_produce(cluster, "other", 0, values("other"))
        runtime = MemberRuntime({"bootstrap.servers": cluster.bootstrap, "group.id": "pattern", **GROUP},
                                ["^orders-.*"], seen.add)
        runtime.start()
        try:
            kit.wait_for(lambda: len(seen.of("orders-a")) == PER_TOPIC, PICKED_UP_S, 0.02, "orders-a read")
            assert runtime.topics == ["orders-a"]
            cluster.create_topic("orders-b", 1)
            kit.mock_produce(cluster, "orders-b", 0, values("orders-b"), per_batch=5)
            kit.wait_for(lambda: len(seen.of("orders-b")) == PER_TOPIC, PICKED_UP_S, 0.02, "orders-b read")
            cluster.delete_topic("orders-a")
            kit.wait_for(lambda: runtime.status()["claims"] == {"orders-b": [0]}, PICKED_UP_S, 0.02,
                         "orders-a dropped at the next rebalance")
            assert runtime.topics == ["orders-b"]
        finally:
            runtime.stop(30)
    assert seen.of("orders-a") == values("orders-a"), "every record once, across the rebalances"
    assert seen.of("orders-b") == values("orders-b")
    assert seen.of("other") == [], "a topic the pattern does not match is not read"
    assert runtime.fatal is None


@pytest.mark.ray
def test_a_consumer_group_subscribed_to_a_pattern_reads_a_topic_created_later(ray_session, kit):
    """One member: the mock refuses an OffsetCommit while its group prepares a rebalance (Kafka
    takes it), so a second member's join would repeat what the first read, pattern or not."""
    @ray.remote(num_cpus=0)
    class Tally:
        def __init__(self):
            self.values = []

        def add(self, values):
            self.values += values

        def get(self):
            return self.values

    tally = Tally.remote()

    def handle(batch):
        ray.get(tally.add.remote(batch.column("value").to_pylist()))

    with MockCluster(n_brokers=1, topics={"orders-a": 2}) as cluster:
        kit.mock_produce(cluster, "orders-a", 1, values("orders-a"), per_batch=5)
        group = ConsumerGroup({"bootstrap.servers": cluster.bootstrap, "group.id": "pattern-group", **GROUP},
                              ["^orders-.*"], handle, members=1)  # see below
        try:
            kit.wait_for(lambda: len(ray.get(tally.get.remote())) == PER_TOPIC, PICKED_UP_S, 0.1, "orders-a read")
            cluster.create_topic("orders-b", 2)
            kit.mock_produce(cluster, "orders-b", 0, values("orders-b"), per_batch=5)
            kit.wait_for(lambda: len(ray.get(tally.get.remote())) == 2 * PER_TOPIC, PICKED_UP_S, 0.1,
                         "orders-b read")
            group.check()
        finally:
            group.close()
        got = ray.get(tally.get.remote())
    assert sorted(got) == sorted(values("orders-a") + values("orders-b")), "every record once"


@pytest.mark.ray
def test_a_consumer_assigned_a_pattern_reads_a_topic_created_later_and_drops_one_deleted(ray_session, kit):
    with MockCluster(n_brokers=1, topics={"orders-a": 2, "other": 1}) as cluster, \
            Consumer({"bootstrap.servers": cluster.bootstrap, "fetch.max.wait.ms": 50,
                      "metadata.max.age.ms": LOOK_MS}) as consumer:
        kit.mock_produce(cluster, "orders-a", 0, values("orders-a"), per_batch=5)
        kit.mock_produce(cluster, "other", 0, values("other"))
        started = consumer.assign_topic("^orders-.*", "earliest")
        assert started == {("orders-a", 0): 0, ("orders-a", 1): 0}
        cluster.create_topic("orders-b", 1)
        kit.mock_produce(cluster, "orders-b", 0, values("orders-b"), per_batch=5)
        got: list[bytes] = []
        for batch in consumer.batches(timeout=PICKED_UP_S):
            got += batch.column("value").to_pylist()
            if len(got) == 2 * PER_TOPIC:
                break
        assert sorted(consumer.assignment()) == [("orders-a", 0), ("orders-a", 1), ("orders-b", 0)]
        assert [v for v in got if v.startswith(b"orders-a")] == values("orders-a")
        assert [v for v in got if v.startswith(b"orders-b")] == values("orders-b"), "every record once, in order"
        cluster.delete_topic("orders-a")
        assert list(consumer.batches(timeout=QUIET_S)) == [], "nothing more: every record came once"
        assert consumer.assignment() == [("orders-b", 0)], "a topic that went away is dropped"


@pytest.mark.ray
def test_until_end_is_not_held_by_a_topic_that_comes_to_match_meanwhile(ray_session, kit):
    """`batches(until_end=True)` ends at the ends its partitions had when it began: a topic the
    pattern comes to match meanwhile had none, and does not keep it waiting for one."""
    with MockCluster(n_brokers=1, topics={"orders-a": 1}) as cluster, \
            Consumer({"bootstrap.servers": cluster.bootstrap, "fetch.max.wait.ms": 50,
                      "metadata.max.age.ms": LOOK_MS}) as consumer:
        kit.mock_produce(cluster, "orders-a", 0, values("orders-a"), per_batch=5)
        consumer.assign_topic("^orders-.*", "earliest")
        cluster.create_topic("orders-b", 1)
        kit.mock_produce(cluster, "orders-b", 0, values("orders-b"), per_batch=5)
        time.sleep(2 * LOOK_MS / 1000)  # the first round of `batches` looks the topics up again
        began = time.monotonic()
        got = [v for batch in consumer.batches(timeout=PICKED_UP_S, until_end=True)
               for v in batch.column("value").to_pylist()]
        assert time.monotonic() - began < PICKED_UP_S / 2, "ended at the ends, not after the timeout"
        assert ("orders-b", 0) in consumer.assignment(), "orders-b was matched meanwhile"
        assert [v for v in got if v.startswith(b"orders-a")] == values("orders-a")
