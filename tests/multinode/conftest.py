"""A Ray cluster of three nodes on this one machine (`ray.cluster_utils.Cluster`): a head and two
worker nodes of one CPU each, each with its own raylet and object store, so objects really move
between nodes and a node can be removed mid-run. One per test module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


class ThreeNodes:
    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        self.workers = [self.cluster.add_node(num_cpus=1) for _ in range(2)]
        self.cluster.wait_for_nodes()

    @property
    def head_id(self) -> str:
        return self.cluster.head_node.node_id

    def worker_ids(self) -> list[str]:
        return [w.node_id for w in self.workers]


@pytest.fixture(scope="module")
def three_nodes(ray_stopper) -> Iterator[Any]:
    import ray

    ray_stopper()  # the run's Ray: this module needs a cluster of its own
    nodes = ThreeNodes()
    ray.init(address=nodes.cluster.address, log_to_driver=False)
    yield nodes
    from raykafka.spark_bridge.node_writers import POOLS

    POOLS.close_all()  # while Ray is up, so the pipelines' actors stop cleanly
    ray.shutdown()
    nodes.cluster.shutdown()


@pytest.fixture(scope="module")
def filled_topic(three_nodes: Any, bootstrap: str) -> str:
    """6 partitions of 5,000 records each; record i of partition p holds the value r<p>-<i>."""
    import uuid

    from raykafka.driver.admin import Admin

    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = f"multinode-read-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 6})
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for p in range(6):
        for i in range(5000):
            producer.produce(topic, value=b"r%d-%d" % (p, i), partition=p)
    assert producer.flush(60) == 0
    return topic


@pytest.fixture()
def signal(three_nodes: Any) -> Any:
    """An actor on the head node (never removed) that tasks tell where they reached a point: the
    first node to claim it is the one chosen (`claim`), and `wait` tells which."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    class Signal:
        def __init__(self) -> None:
            import threading

            self.event = threading.Event()
            self.chosen: str | None = None

        def claim(self, where: str) -> bool:
            """Whether `where` is the chosen node: the first to claim."""
            if self.chosen is None:
                self.chosen = where
                self.event.set()
            return where == self.chosen

        def wait(self, timeout: float) -> str | None:
            self.event.wait(timeout)
            return self.chosen

    return Signal.options(max_concurrency=4, scheduling_strategy=NodeAffinitySchedulingStrategy(
        three_nodes.head_id, soft=False)).remote()
