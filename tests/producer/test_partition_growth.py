"""A topic that grows while a producer writes it: within `metadata.max.age.ms` the producer sees
the new partitions, and its keyed messages go over all of them (Java's refresh). On the mock
cluster, since tansu 0.6 cannot add partitions."""

from __future__ import annotations

import time

import pytest

from raykafka.driver.producer import Producer
from raykafka.mock import MockCluster, PartitionState
from raykafka.wire.partitioners import get_partitioner

pytestmark = [pytest.mark.ray, pytest.mark.timeout(120)]

KEYS = [b"key-%d" % i for i in range(64)]
REFRESH_MS = 300


def test_a_grown_topic_gets_keyed_messages_on_its_new_partitions(ray_session):
    with MockCluster(1, {"t": 2}) as mock:
        with Producer({"bootstrap.servers": mock.bootstrap, "linger.ms": 2,
                       "metadata.max.age.ms": REFRESH_MS}) as producer:
            before = [producer.send("t", b"before", key=k) for k in KEYS]
            assert producer.flush(30) == 0
            assert {f.result(0).partition for f in before} == {0, 1}
            with mock.lock:
                mock.topics["t"].partitions += [PartitionState(leader=1) for _ in range(2)]
            time.sleep(3 * REFRESH_MS / 1000)  # a refresh or more
            after = [producer.send("t", b"after", key=k) for k in KEYS]
            assert producer.flush(30) == 0
    partitioner = get_partitioner("murmur2_random", 0)
    assert [f.result(0).partition for f in after] == [partitioner.partition(k, 4) for k in KEYS]
    assert {f.result(0).partition for f in after} == {0, 1, 2, 3}
    assert sum(len(mock.records("t", p)) for p in (2, 3)) == sum(1 for f in after if f.result(0).partition >= 2)
