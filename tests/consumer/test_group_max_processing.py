"""`max.processing.time.ms` in a group member, run in-process (`MemberRuntime`, no Ray) against
the mock cluster: a claim whose handler leaves a batch untaken past it is left out of fetches
until the handler takes one, so a slow partition pauses itself while its neighbour's records go
on flowing, and every record is handled once."""

from __future__ import annotations

import threading
import time

import pytest

from raykafka.actors.group_member_state import MemberRuntime
from raykafka.mock import MockCluster

pytestmark = pytest.mark.timeout(90)

MAX_PROCESSING_MS = 30
TRICKLE_INTERVAL_S = 0.1  # one record to each partition this often: slower than max.processing.time.ms
TRICKLED = 12
QUEUED_AT_MOST = 2  # batches the slow claim may hold: the one that waits, one fetch already out
SAMPLE_S = 0.005

CONFIG = {"heartbeat.interval.ms": 100, "session.timeout.ms": 6000, "auto.offset.reset": "earliest",
          "fetch.max.wait.ms": 50, "auto.commit.interval.ms": 200, "retry.backoff.ms": 20,
          "max.processing.time.ms": MAX_PROCESSING_MS}


class SlowFirstPartition:
    """Handles batches by partition; partition 0's first batch holds its handler until `release`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[int, list[bytes]] = {0: [], 1: []}
        self.release = threading.Event()
        self.held = threading.Event()

    def __call__(self, batch) -> None:
        p = batch.column("partition")[0].as_py()
        if p == 0 and not self.held.is_set():
            self.held.set()
            assert self.release.wait(60), "released"
        with self.lock:
            self.values[p].extend(batch.column("value").to_pylist())

    def count(self, p: int) -> int:
        with self.lock:
            return len(self.values[p])


def test_a_slow_partition_pauses_itself_while_its_neighbour_flows(kit):
    handler = SlowFirstPartition()
    with MockCluster(n_brokers=1, topics={"t": 2}) as cluster:
        kit.mock_produce(cluster, "t", 0, [b"0-first"])
        runtime = MemberRuntime({"bootstrap.servers": cluster.bootstrap, "group.id": "slow", **CONFIG}, ["t"],
                                handler)
        runtime.start()
        try:
            kit.wait_for(handler.held.is_set, 30, 0.01, "partition 0's handler holding its first batch")
            slow_claim = runtime.session._claims[("t", 0)]
            queued: list[int] = []
            for i in range(TRICKLED):
                tick = time.monotonic()
                for p in (0, 1):
                    kit.mock_produce(cluster, "t", p, [f"{p}-{i}".encode()])
                while time.monotonic() - tick < TRICKLE_INTERVAL_S:
                    queued.append(slow_claim._queue.qsize())
                    time.sleep(SAMPLE_S)
            kit.wait_for(lambda: handler.count(1) == TRICKLED, 20, 0.01, "partition 1 read while 0 is held")
            assert handler.count(0) == 0, "partition 0's handler is still held"
            assert max(queued) <= QUEUED_AT_MOST, f"the slow claim kept being fetched: {max(queued)} queued"
            handler.release.set()
            kit.wait_for(lambda: handler.count(0) == TRICKLED + 1, 20, 0.01, "partition 0 read once released")
        finally:
            handler.release.set()
            runtime.stop(30)
    assert handler.values[0] == [b"0-first"] + [f"0-{i}".encode() for i in range(TRICKLED)]
    assert handler.values[1] == [f"1-{i}".encode() for i in range(TRICKLED)]
    assert runtime.fatal is None
