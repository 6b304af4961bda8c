"""Producer chaos on the scripted mock cluster: three brokers, leaders moving every few hundred
milliseconds, ~5% of Produce requests failing with retriable errors, ~2% of connections dropped
after the request was written (applied or not). Idempotence on: nothing lost, reordered or
duplicated, every message accounted for."""

from __future__ import annotations

import random
import threading
import time

import pytest

from raykafka.driver.producer import Producer
from raykafka.wire import messages
from raykafka.wire.mock_broker import MockCluster

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

RETRIABLE = (6, 7, 19)  # NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS
TOPIC = "chaos"
PARTITIONS = 6


class ProduceFaults:
    """A wrapper around the default Produce handler: ~5% of requests fail (the rule is taken by the
    first partition of the request, and counted in `cluster.faults`), and ~2% schedule a dropped
    connection for the next Produce request."""

    def __init__(self, cluster: MockCluster, seed: int, error_rate: float = 0.05, drop_rate: float = 0.02):
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.error_rate, self.drop_rate = error_rate, drop_rate
        self.on = True
        self.drops = 0
        self.default = cluster.default_handlers[messages.PRODUCE.key]

    def __call__(self, version, body, broker):
        with self.lock:
            roll, code = self.rng.random(), self.rng.choice(RETRIABLE)
            drop = self.on and self.error_rate <= roll < self.error_rate + self.drop_rate
            if drop:
                self.drops += 1
        if self.on and roll < self.error_rate:
            self.cluster.fail_next(messages.PRODUCE, code, 1, node_id=broker.node_id)
        elif drop:  # applied and not applied in turn
            self.cluster.drop_after_request(messages.PRODUCE, 1, apply=self.drops % 2 == 1)
        return self.default(version, body, broker)


class LeaderMover(threading.Thread):
    def __init__(self, cluster: MockCluster, every: float, seed: int):
        super().__init__(daemon=True, name="leader-mover")
        self.cluster, self.every, self.rng = cluster, every, random.Random(seed)
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.every):
            p = self.rng.randrange(PARTITIONS)
            others = [n for n in self.cluster.brokers if n != self.cluster.leader(TOPIC, p)]
            self.cluster.move_leader(TOPIC, p, self.rng.choice(others))


def test_producer_under_leader_moves_errors_and_drops_loses_nothing(ray_session, chaos_full, ledger, record):
    """Mock cluster of 3 brokers; leaders move every 300 ms; ~5% retriable Produce errors; ~2%
    connections dropped after the request (half of them applied first); keyed messages, idempotence on."""
    n = 100_000 if chaos_full else 10_000
    seed = 20261121
    move_every = 0.3
    with MockCluster(n_brokers=3, topics={TOPIC: PARTITIONS}) as cluster:
        faults = ProduceFaults(cluster, seed)
        cluster.set_handler(messages.PRODUCE, faults)
        mover = LeaderMover(cluster, move_every, seed + 1)
        config = {"bootstrap.servers": cluster.bootstrap, "retry.backoff.ms": 20, "linger.ms": 2, "batch.size": 4096,
                  "request.timeout.ms": 3000, "delivery.timeout.ms": 300_000, "enable.idempotence": True}
        producer = Producer(config, on_delivery=ledger.on_delivery)
        try:
            mover.start()
            t0 = time.monotonic()
            chunk = 500
            for start in range(0, n, chunk):  # paced, so that the faults land all along the stream
                for i in range(start, min(start + chunk, n)):
                    ledger.send(producer, TOPIC, b"v%07d" % i, key=b"k%03d" % (i % 97))
                time.sleep(0.02)
            figures = ledger.settle(timeout=240)
            elapsed = time.monotonic() - t0
        finally:
            mover.halt.set()
            mover.join(5)
            faults.on = False
            producer.close(60)
        log = {p: [(r.offset, r.value) for r in cluster.records(TOPIC, p)] for p in range(PARTITIONS)}
        checks = ledger.check_log(log)
        injected = dict(cluster.faults)
        record(**figures, **checks, faults=injected, move_every_s=move_every, actors_killed=[], seconds=round(elapsed, 1),
               handler_errors=len(cluster.handler_errors), callbacks=ledger.callbacks,
               throughput_msg_s=round(n / elapsed))
    assert figures["unresolved"] == 0, "every future resolves"
    assert ledger.callbacks == n, "each message ends exactly once"
    assert figures["delivered"] + figures["failed"] == n
    assert all(str(e) for e in ledger.failed.values()), "a failure names its cause"
    assert checks["lost"] == 0
    # the faults did happen, of every kind asked for
    assert injected.get("leader_move", 0) >= 3
    assert sum(v for k, v in injected.items() if k.startswith("error/Produce")) > 0
    assert sum(v for k, v in injected.items() if k.startswith("drop/Produce")) > 0
    assert checks["reordered"] == 0
    assert checks["duplicated"] == 0
