"""Producer chaos on the scripted mock cluster: three brokers, leaders moving every few hundred
milliseconds, ~5% of Produce requests failing with retriable errors, ~2% of connections dropped
after the request was written.

Idempotence on (`test_producer_under_leader_moves_errors_and_drops_loses_nothing`): nothing lost,
reordered or duplicated, every message accounted for. Idempotence off with one request in flight
per connection (`test_without_idempotence_one_in_flight_keeps_each_keys_order`): nothing lost or
reordered; duplicates are allowed (a batch whose answer was lost is written again) and counted.
Then deaths: a BrokerWorker killed with its requests written and unanswered
(`test_a_heal_ends_what_the_dead_broker_worker_wrote_at_its_offsets`), and one hosting two of
four brokers killed mid-stream
(`test_a_killed_broker_worker_hosting_several_brokers_heals_exactly_once_in_order`).
"""

from __future__ import annotations

import math
import random
import threading
import time

import pytest
import ray

from raykafka.driver.producer import Producer
from raykafka.mock import MockCluster
from raykafka.wire import messages
from raykafka.wire.errors import BY_NAME

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

RETRIABLE = tuple(BY_NAME[name].code for name in ("NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT", "NOT_ENOUGH_REPLICAS"))
TOPIC = "chaos"
PARTITIONS = 6
SEED = 20261121


class ProduceFaults:
    """A wrapper around the default Produce handler: ~5% of requests fail (the rule is taken by the
    first partition of the request, and counted in `cluster.faults`), and ~2% schedule a dropped
    connection for the next Produce request: applied and not applied in turn, or always applied
    (`applied_only`: the request is written, then the connection drops unanswered)."""

    def __init__(self, cluster: MockCluster, seed: int, error_rate: float = 0.05, drop_rate: float = 0.02,
                 applied_only: bool = False):
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.error_rate, self.drop_rate = error_rate, drop_rate
        self.applied_only = applied_only
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
        elif drop:
            self.cluster.drop_after_request(messages.PRODUCE, 1, apply=self.applied_only or self.drops % 2 == 1)
        return self.default(version, body, broker)


CHUNK_PAUSE_S = 0.02  # between chunks of 500 sends
MOVES_IN_STREAM = 5  # the sends span at least this many leader moves (the checks ask for 3)


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


def run_chaos(n: int, extra: dict, ledger, record, *, applied_only: bool = False, latency: float = 0.0,
              seed: int = SEED) -> tuple[dict, dict, dict]:
    """Send `n` keyed messages (97 keys), paced, through a 3-broker mock cluster under the faults
    above, with the producer config `extra`; settle every future, read the log back, record the
    figures. Returns (figures, checks of the log, faults injected)."""
    move_every = 0.3
    with MockCluster(n_brokers=3, topics={TOPIC: PARTITIONS}) as cluster:
        faults = ProduceFaults(cluster, seed, applied_only=applied_only)
        cluster.set_handler(messages.PRODUCE, faults)
        if latency:
            cluster.delay(messages.PRODUCE, latency)
        mover = LeaderMover(cluster, move_every, seed + 1)
        config = {"bootstrap.servers": cluster.bootstrap, "retry.backoff.ms": 20, "request.timeout.ms": 3000,
                  "delivery.timeout.ms": 300_000, **extra}
        producer = Producer(config, on_delivery=ledger.on_delivery)
        try:
            mover.start()
            t0 = time.monotonic()
            chunk = 500
            # paced, so that the faults land all along the stream, and the stream outlasts
            # MOVES_IN_STREAM leader moves however fast the machine sends
            pause = max(CHUNK_PAUSE_S, MOVES_IN_STREAM * move_every / max(1, math.ceil(n / chunk) - 1))
            for start in range(0, n, chunk):
                if start:
                    time.sleep(pause)
                for i in range(start, min(start + chunk, n)):
                    ledger.send(producer, TOPIC, b"v%07d" % i, key=b"k%03d" % (i % 97))
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
               throughput_msg_s=round(n / elapsed), config=dict(extra),
               latency_ms=round(latency * 1000))
    assert figures["unresolved"] == 0, "every future resolves"
    assert ledger.callbacks == n, "each message ends exactly once"
    assert figures["delivered"] + figures["failed"] == n
    assert all(str(e) for e in ledger.failed.values()), "a failure names its cause"
    assert checks["lost"] == 0
    # the faults did happen, of every kind asked for
    assert injected.get("leader_move", 0) >= 3
    assert sum(v for k, v in injected.items() if k.startswith("error/Produce")) > 0
    assert sum(v for k, v in injected.items() if k.startswith("drop/Produce")) > 0
    return figures, checks, injected


def test_producer_under_leader_moves_errors_and_drops_loses_nothing(ray_session, chaos_full, ledger, record):
    """Mock cluster of 3 brokers; leaders move every 300 ms; ~5% retriable Produce errors; ~2%
    connections dropped after the request (half of them applied first); keyed messages, idempotence on."""
    n = 100_000 if chaos_full else 10_000
    _, checks, _ = run_chaos(n, {"linger.ms": 2, "batch.size": 4096, "enable.idempotence": True}, ledger, record)
    assert checks["reordered"] == 0
    assert checks["duplicated"] == 0


@pytest.mark.slow  # 9 s; the default tier keeps the order without idempotence in tests/producer/test_mock_scenarios.py
def test_without_idempotence_one_in_flight_keeps_each_keys_order(ray_session, chaos_full, ledger, record):
    """Mock cluster of 3 brokers; leaders move every 300 ms; ~5% of Produce requests answered with
    a retriable error, not written; ~2% of connections dropped after the request was written;
    20 ms added to every Produce answer; small batches (batch.size 1,500 bytes, linger.ms 1);
    enable.idempotence=false, max.in.flight.requests.per.connection=1, retries on. As the Java
    producer promises: one batch in flight per partition, so nothing reordered; a batch whose
    answer was lost is written again (duplicates allowed, counted)."""
    n = 40_000 if chaos_full else 8_000
    extra = {"enable.idempotence": False, "max.in.flight.requests.per.connection": 1,
             "batch.size": 1500, "linger.ms": 1}
    _, checks, injected = run_chaos(n, extra, ledger, record, applied_only=True, latency=0.02)
    assert injected.get("delay/Produce", 0) > 0
    assert checks["reordered"] == 0


def test_a_heal_ends_what_the_dead_broker_worker_wrote_at_its_offsets(ray_session, ledger, record, kill_actor):
    """With the timing held: the mock writes each Produce request at once and answers it 1.5 s
    later, so 2,000 keyed messages with headers are in the log, unanswered, when their BrokerWorker is
    killed. The heal bumps the old producer id's epoch (KIP-360: the same id, the next epoch,
    as Kafka answers), reads the log, and ends every one of them delivered at the offset the log
    holds it, matched by partition and sequence; none is sent again, none written twice."""
    with MockCluster(n_brokers=1, topics={TOPIC: PARTITIONS}) as cluster:
        config = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "request.timeout.ms": 3000,
                  "delivery.timeout.ms": 30_000, "enable.idempotence": True}
        producer = Producer(config, on_delivery=ledger.on_delivery)
        try:
            warm = producer.send(TOPIC, b"warm-up")
            assert warm.result(60).offset >= 0  # the pipeline is up
            cluster.delay(messages.PRODUCE, 1.5)
            for i in range(2000):
                ledger.send(producer, TOPIC, b"v%07d" % i, key=b"k%03d" % (i % 97),
                            headers=[("msg-id", b"%d" % i)])
            wait_until = time.monotonic() + 30
            while sum(len(cluster.records(TOPIC, p)) for p in range(PARTITIONS)) < 2001:  # written, unanswered
                assert time.monotonic() < wait_until, "the requests reached the mock"
                time.sleep(0.02)
            worker = next(n for n in ray.util.list_named_actors()
                          if n.startswith(producer.pipeline_prefix + "broker_worker"))
            kill_actor(worker)
            cluster.delay(messages.PRODUCE, 0)
            figures = ledger.settle(timeout=60)
            # every message can end (from the log) before the heal has started its new pipeline;
            # a close then would end the heal there (nothing is left to send), and this test is
            # about the heal, not about a close during one
            wait_until = time.monotonic() + 60
            while not producer.heals_done:
                assert time.monotonic() < wait_until, "the heal ended, with its new pipeline"
                time.sleep(0.02)
        finally:
            producer.close(30)
        checks, heals = _judge_heal(cluster, ledger, producer, figures, record, worker)
    assert producer.healed == 1
    assert figures["delivered"] == 2000, figures["failed_by_cause"]
    assert checks == {"lost": 0, "duplicated": 0, "reordered": 0, "failed_but_written": 0, "without_offset": 0}
    # those the BrokerWorker had not had answered (some answers came before it died) were in the log
    assert heals[0]["found_in_log"] > 0 and heals[0]["sent_again"] == 0
    assert heals[0]["bumped"], "the mock bumps the old producer id's epoch"
    assert heals[0]["producer_ids"][0] == heals[0]["producer_ids"][1], "the same id, its next epoch"


def test_a_killed_broker_worker_hosting_several_brokers_heals_exactly_once_in_order(ray_session, ledger, record,
                                                                                    kill_actor):
    """Four brokers on two BrokerWorkers (`broker.worker.actors` 2): one worker, with two brokers'
    batches lingering and in flight, killed mid-stream. With idempotence the producer heals and
    every message is delivered once, in order per key; none lost, none written twice."""
    brokers, n = 4, 8000
    with MockCluster(n_brokers=brokers, topics={TOPIC: PARTITIONS}) as cluster:
        config = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "request.timeout.ms": 3000,
                  "delivery.timeout.ms": 60_000, "enable.idempotence": True, "broker.worker.actors": 2}
        producer = Producer(config, on_delivery=ledger.on_delivery)
        try:
            for i in range(n // 4):
                ledger.send(producer, TOPIC, b"v%07d" % i, key=b"k%03d" % (i % 97))
            assert producer.flush(60) == 0  # every broker placed: two workers, two brokers each
            workers = sorted(name for name in ray.util.list_named_actors()
                             if name.startswith(producer.pipeline_prefix + "broker_worker"))
            assert len(workers) == 2, workers
            for i in range(n // 4, 3 * n // 4):
                ledger.send(producer, TOPIC, b"v%07d" % i, key=b"k%03d" % (i % 97))
            kill_actor(workers[0])
            for i in range(3 * n // 4, n):
                ledger.send(producer, TOPIC, b"v%07d" % i, key=b"k%03d" % (i % 97))
            figures = ledger.settle(timeout=90)
        finally:
            producer.close(30)
        checks, heals = _judge_heal(cluster, ledger, producer, figures, record, workers[0])
    assert producer.healed >= 1
    assert figures["unresolved"] == figures["failed"] == 0, figures["failed_by_cause"]
    assert checks == {"lost": 0, "duplicated": 0, "reordered": 0, "failed_but_written": 0, "without_offset": 0}


def _judge_heal(cluster, ledger, producer, figures: dict, record, killed: str) -> tuple[dict, list[dict]]:
    """The mock's log checked against what the ledger sent, and the producer's heals; both
    recorded with the figures and the actor killed."""
    log = {p: [(r.offset, r.value) for r in cluster.records(TOPIC, p)] for p in range(PARTITIONS)}
    checks = ledger.check_log(log)
    heals = [{**h._asdict(), "seconds": round(h.seconds, 2)} for h in producer.heals_done]
    record(**figures, **checks, actors_killed=[killed], heals=heals, handler_errors=len(cluster.handler_errors))
    return checks, heals
