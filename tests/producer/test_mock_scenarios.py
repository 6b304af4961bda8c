"""Sarama's producer scenarios on the scripted mock cluster (faults one real broker cannot make).

A scenario about the pipeline's logic runs on two shells: `local`, the stages in this process
(`LocalProducer` over `LocalPipeline`), in the default tier, and `ray`, a `Producer`'s actors,
in the slow tier but for the few that keep the actors' wiring in the default tier. What only
Ray shows (the actors' names, `buffer.memory` blocking `Producer.send`, the object store, a
construction that fails) runs on Ray alone."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import pytest
import ray

from raykafka.actors.options import CALLS_IN_FLIGHT
from raykafka.driver.producer import Producer
from raykafka.driver.producer_pipeline import CLOSE_MIN
from raykafka.driver.producer_poller import LAST_POLL_WAIT
from raykafka.mock import MockCluster
from raykafka.wire import messages
from raykafka.wire.errors import (
    BY_NAME,
    BrokerError,
    BufferExhaustedError,
    DeliveryTimeoutError,
    OutcomeUnknownError,
)

from ..tiers import default_keeps
from .local_producer import LocalProducer

pytestmark = pytest.mark.timeout(180)

NOT_LEADER = BY_NAME["NOT_LEADER_OR_FOLLOWER"].code
REQUEST_TIMED_OUT = BY_NAME["REQUEST_TIMED_OUT"].code

LOCAL, RAY = "local", "ray"
SHELLS = (LOCAL, RAY)


def on_shells(cases: Iterable[tuple] = ((),), ray_kept: Iterable[tuple] = ()) -> list[Any]:
    """`parametrize`'s cases: each of `cases` (a tuple of the scenario's other arguments) on
    each shell, the shell last. Every `local` case runs in the default tier, and the `ray` cases
    of `ray_kept`; the other `ray` cases are slow (`default_keeps`). The `ray` cases are marked `ray`."""
    cases = list(cases)
    both = [(*case, shell) for case in cases for shell in SHELLS]
    kept = [(*case, LOCAL) for case in cases] + [(*case, RAY) for case in ray_kept]
    return [pytest.param(*p.values, marks=[*p.marks, pytest.mark.ray] if p.values[-1] == RAY else p.marks)
            for p in default_keeps(both, kept=kept)]


def shell_ids(names: Iterable[str]) -> list[str]:
    """The ids of `on_shells`'s cases, from the names of the other arguments' cases."""
    return [f"{name}-{shell}" for name in names for shell in SHELLS]


@pytest.fixture
def make_producer(shell: str, request: pytest.FixtureRequest) -> Callable[..., Producer | LocalProducer]:
    """The producer of the scenario's shell: a `Producer` (on the test run's Ray) or a `LocalProducer`."""
    if shell == RAY:
        request.getfixturevalue("ray_session")
        return Producer
    return LocalProducer


def config(cluster: MockCluster, **extra) -> dict:
    return {"bootstrap.servers": cluster.bootstrap, "retry.backoff.ms": 20, "linger.ms": 2,
            "request.timeout.ms": 5000, **extra}


def log_of(cluster: MockCluster, topic: str, partition: int) -> list[bytes]:
    return [r.value for r in cluster.records(topic, partition)]


def assert_in_order_and_complete(cluster: MockCluster, topic: str, sent: dict[int, list[bytes]]) -> None:
    for partition, values in sent.items():
        assert log_of(cluster, topic, partition) == values, f"partition {partition} differs"


# idempotent-ray keeps a leader move through the actors in the default tier; acks1-one-in-flight-ray is slow
@pytest.mark.parametrize("extra, shell", on_shells([({},), ({"acks": 1, "max.in.flight.requests.per.connection": 1},)],
                                                   ray_kept=[({},)]),
                         ids=shell_ids(["idempotent", "acks1-one-in-flight"]))
def test_leadership_moves_mid_stream_between_two_brokers(make_producer, extra):
    """Without idempotence, one request in flight per connection is what keeps the order."""
    with MockCluster(n_brokers=2, topics={"t": 2}) as cluster, make_producer(config(cluster, **extra)) as producer:
        sent: dict[int, list[bytes]] = defaultdict(list)
        futures = []
        for round_ in range(6):
            for i in range(300):
                value = f"{round_}-{i}".encode()
                partition = i % 2
                sent[partition].append(value)
                futures.append(producer.send("t", value, partition=partition))
            if round_ in (1, 3):  # move both leaders while messages are in flight
                for p in range(2):
                    cluster.move_leader("t", p, 3 - cluster.leader("t", p))
            time.sleep(0.05)
        metas = [f.result(60) for f in futures]
        assert all(m.offset >= 0 for m in metas)
        assert cluster.faults["leader_move"] == 4
        assert_in_order_and_complete(cluster, "t", sent)
        # both brokers took produce requests: the pipeline followed the leaders
        assert cluster.requests(messages.PRODUCE, 1) and cluster.requests(messages.PRODUCE, 2)


# the ray case is slow: test_retries_exhausted_fail_exactly_those_messages_with_the_cause[ray] keeps the retry path on Ray
@pytest.mark.parametrize("shell", on_shells())
def test_without_idempotence_a_failed_batch_is_not_overtaken_by_the_batch_behind_it(make_producer):
    """enable.idempotence=false, max.in.flight=1: a partition's batches queue for the connection
    (each answer takes 20 ms). A batch fails with REQUEST_TIMED_OUT, not written, while the broker
    stays the leader; the batch waiting behind it must not be written before its retry. Twice;
    the log holds every message once, in the order sent."""
    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        cluster.delay(messages.PRODUCE, 0.02)
        extra = {"enable.idempotence": False, "max.in.flight.requests.per.connection": 1,
                 "batch.size": 300, "linger.ms": 1}
        with make_producer(config(cluster, **extra)) as producer:
            producer.send("t", b"warm").result(30)
            futures = [producer.send("t", b"m%04d" % i) for i in range(400)]
            for after in (4, 12):
                cluster.wait_for_requests(messages.PRODUCE, after, timeout=30)
                cluster.fail_next(messages.PRODUCE, REQUEST_TIMED_OUT, topic="t", partition=0)
            assert all(f.result(60).offset >= 0 for f in futures)
        assert cluster.faults["error/Produce/REQUEST_TIMED_OUT"] == 2
        assert log_of(cluster, "t", 0) == [b"warm"] + [b"m%04d" % i for i in range(400)]


# the ray case keeps retries through the RetryHandler actor, to their end, in the default tier
@pytest.mark.parametrize("shell", on_shells(ray_kept=[()]))
def test_retries_exhausted_fail_exactly_those_messages_with_the_cause(make_producer):
    with MockCluster(n_brokers=1, topics={"t": 2}) as cluster:
        cluster.fail_next(messages.PRODUCE, NOT_LEADER, count=1000, topic="t", partition=0)
        with make_producer(config(cluster, retries=2)) as producer:
            doomed = [producer.send("t", b"d%d" % i, partition=0) for i in range(20)]
            fine = [producer.send("t", b"f%d" % i, partition=1) for i in range(20)]
            for f in doomed:
                with pytest.raises(BrokerError, match="NOT_LEADER_OR_FOLLOWER") as info:
                    f.result(60)
                assert info.value.code == NOT_LEADER
            assert [f.result(60).offset for f in fine] == list(range(20))
        assert log_of(cluster, "t", 0) == []
        # 1 try + 2 retries for each batch of partition 0, no more
        tries = sum(1 for r in cluster.requests(messages.PRODUCE) for t in r.topic_data
                    for p in t.partition_data if p.index == 0)
        assert 3 <= tries <= 3 * 20


# the ray case is slow: test_retries_exhausted_fail_exactly_those_messages_with_the_cause[ray] keeps the retry path on Ray
@pytest.mark.parametrize("shell", on_shells())
def test_several_retry_levels_in_flight_keep_order(make_producer):
    """Partition 0 fails again and again while new messages keep coming: retry levels 1, 2, 3
    are open at once (the retry-level logic); order and completeness must hold."""
    with MockCluster(n_brokers=2, topics={"t": 1}) as cluster, make_producer(config(cluster)) as producer:
        sent: list[bytes] = []
        futures = []
        for round_ in range(8):
            if round_ in (1, 2, 3, 5):
                cluster.fail_next(messages.PRODUCE, NOT_LEADER, count=2, topic="t", partition=0)
            if round_ == 4:
                cluster.move_leader("t", 0, 3 - cluster.leader("t", 0))
            for i in range(100):
                value = f"{round_}-{i}".encode()
                sent.append(value)
                futures.append(producer.send("t", value))
            time.sleep(0.02)
        for f in futures:
            f.result(60)
        assert log_of(cluster, "t", 0) == sent
        assert sum(v for k, v in cluster.faults.items() if k.startswith("error/Produce")) == 8


@pytest.mark.ray
def test_large_batches_retried_by_reference_keep_their_bytes_and_order(ray_session):
    """Batches large enough to travel as positions into the object store (`SharedColumn`) fail,
    go round the retry loop and follow a leader move; each comes back carrying the same
    positions, and the log holds exactly the values sent, in order."""
    from raykafka.actors.shared_column import SHARE_MIN_BYTES

    rows, size = 3000, 120
    assert rows * size >= SHARE_MIN_BYTES
    with MockCluster(n_brokers=2, topics={"t": 2}) as cluster, Producer(config(cluster)) as producer:
        sent: dict[int, list[bytes]] = defaultdict(list)
        futures = []
        for round_ in range(4):
            if round_ in (1, 2):
                cluster.fail_next(messages.PRODUCE, NOT_LEADER, count=2, topic="t", partition=round_ - 1)
            if round_ == 3:
                cluster.move_leader("t", 0, 3 - cluster.leader("t", 0))
            values = [(b"%d-%05d-" % (round_, i)).ljust(size, b"v") for i in range(rows)]
            partitions = [i % 2 for i in range(rows)]
            for v, p in zip(values, partitions, strict=True):
                sent[p].append(v)
            futures.append(producer.send_batch("t", values, partitions=partitions))
        results = [f.result(60) for f in futures]
        assert all(r.ok for r in results)
        assert sum(v for k, v in cluster.faults.items() if k.startswith("error/Produce")) == 4
        assert_in_order_and_complete(cluster, "t", sent)


# the ray case is slow: test_retries_exhausted_fail_exactly_those_messages_with_the_cause[ray] keeps the retry path on Ray
@pytest.mark.parametrize("shell", on_shells())
def test_a_broker_that_drops_the_connection_loses_and_duplicates_nothing(make_producer):
    """The connection drops right after a Produce was applied: the retry carries the same
    sequence numbers, the broker answers DUPLICATE_SEQUENCE_NUMBER, the log has each message once."""
    with MockCluster(n_brokers=1, topics={"t": 2}) as cluster, make_producer(config(cluster)) as producer:
        assert producer.producer_id >= 0  # idempotence is on by default
        futures = [producer.send("t", b"a%d" % i, key=b"k%d" % (i % 5)) for i in range(500)]
        producer.flush(30)
        cluster.drop_after_request(messages.PRODUCE, count=2, apply=True)
        futures += [producer.send("t", b"b%d" % i, key=b"k%d" % (i % 5)) for i in range(500)]
        for f in futures:
            assert f.result(60).offset >= 0
        assert cluster.faults["drop/Produce/applied"] == 2
        values = log_of(cluster, "t", 0) + log_of(cluster, "t", 1)
        assert len(values) == len(set(values)) == 1000


# the ray case is slow: test_retries_exhausted_fail_exactly_those_messages_with_the_cause[ray] keeps the retry path on Ray
@pytest.mark.parametrize("acked_before, shell", on_shells([(True,), (False,)]),
                         ids=shell_ids(["after-acked-batches", "from-log-start"]))
def test_a_duplicate_answered_without_its_offset_gets_the_offset_it_has_in_the_log(make_producer, acked_before):
    """As tansu 0.6 does, the broker answers a re-sent batch it already wrote (its first answer
    lost with a dropped connection) DUPLICATE_SEQUENCE_NUMBER with base offset -1: each message
    still ends with the offset it has in the log, found there (read from the last offset
    acknowledged on the partition, or from the log's start), never -1."""
    with MockCluster(n_brokers=1, topics={"t": 2}, duplicate_offset_unknown=True) as cluster, \
            make_producer(config(cluster)) as producer:
        futures = {}
        if acked_before:
            futures = {b"a%d" % i: producer.send("t", b"a%d" % i, key=b"k%d" % (i % 5)) for i in range(500)}
            producer.flush(30)
        cluster.drop_after_request(messages.PRODUCE, count=2, apply=True)
        futures.update({b"b%d" % i: producer.send("t", b"b%d" % i, key=b"k%d" % (i % 5)) for i in range(500)})
        metas = {value: f.result(60) for value, f in futures.items()}
        assert cluster.faults["drop/Produce/applied"] == 2
        logged = {(p, r.value): r.offset for p in range(2) for r in cluster.records("t", p)}
        assert len(logged) == len(futures)
        assert sorted(value for value, m in metas.items() if m.offset < 0) == []
        assert {value: (m.partition, m.offset) for value, m in metas.items()} == \
            {value: (p, offset) for (p, value), offset in logged.items()}


# the ray case is slow: test_retries_exhausted_fail_exactly_those_messages_with_the_cause[ray] keeps the retry path on Ray
@pytest.mark.parametrize("shell", on_shells())
def test_out_of_order_sequence_takes_a_new_producer_id_and_delivers_everything_once(make_producer):
    """A Produce answered OUT_OF_ORDER_SEQUENCE_NUMBER was not written: the partition asks for a
    new producer id (InitProducerId, not a local epoch bump) and sends the batch again under it."""
    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster, make_producer(config(cluster)) as producer:
        first = [producer.send("t", b"a%d" % i) for i in range(200)]
        for f in first:
            f.result(30)
        cluster.fail_next(messages.PRODUCE, BY_NAME["OUT_OF_ORDER_SEQUENCE_NUMBER"].code, count=1, topic="t", partition=0)
        second = [producer.send("t", b"b%d" % i) for i in range(200)]
        for f in second:
            assert f.result(60).offset >= 0
        assert log_of(cluster, "t", 0) == [b"a%d" % i for i in range(200)] + [b"b%d" % i for i in range(200)]
        assert len(cluster.requests(messages.INIT_PRODUCER_ID)) >= 2


@pytest.mark.ray
def test_a_retry_while_the_broker_reference_is_still_open(ray_session, live_actors):
    """Both partitions are led by broker 1; partition 0 fails once and retries onto the same
    broker while partition 1's leader dispatcher still holds the broker's worker: the SYN
    reopens partition 0 on the same worker, and nothing is lost or reordered."""
    with MockCluster(n_brokers=1, topics={"t": 2}) as cluster, Producer(config(cluster)) as producer:
        warm = [producer.send("t", b"w%d" % p, partition=p) for p in range(2)]
        for f in warm:
            f.result(30)
        cluster.fail_next(messages.PRODUCE, NOT_LEADER, count=1, topic="t", partition=0)
        sent = {0: [b"w0"], 1: [b"w1"]}
        futures = []
        for i in range(400):
            p = i % 2
            sent[p].append(b"m%d" % i)
            futures.append(producer.send("t", b"m%d" % i, partition=p))
        for f in futures:
            f.result(60)
        assert_in_order_and_complete(cluster, "t", sent)
        workers = [n for n in live_actors(producer.name) if "/broker_worker-" in n]
        assert len(workers) == 1  # one broker, one worker at a time


@pytest.mark.ray
def test_buffer_memory_blocks_send_then_raises_after_max_block_ms(ray_session):
    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        cluster.delay(messages.PRODUCE, 3.0)
        producer = Producer(config(cluster, **{"buffer.memory": 20_000, "max.block.ms": 400}))
        try:
            accepted = []
            started = time.monotonic()
            with pytest.raises(BufferExhaustedError, match="max.block.ms=400"):
                for _ in range(100):
                    accepted.append(producer.send("t", b"x" * 1000))
                    started = time.monotonic()
            blocked = time.monotonic() - started
            assert 0.35 <= blocked < 3.0
            assert 10 <= len(accepted) <= 20  # what 20,000 bytes hold
            cluster.delay(messages.PRODUCE, 0)
            assert all(f.result(30).offset >= 0 for f in accepted)
        finally:
            producer.close(30)
        assert len(log_of(cluster, "t", 0)) == len(accepted)


@pytest.mark.ray
def test_a_close_that_gives_up_on_a_written_message_says_its_outcome_is_unknown(ray_session, wait_for):
    """The broker writes the message and holds its answer past close's time: the message is in
    the log, so close ends it as "outcome unknown", never as "not delivered"."""
    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        cluster.delay(messages.PRODUCE, 30.0)
        producer = Producer(config(cluster, **{"request.timeout.ms": 60_000}))
        try:
            future = producer.send("t", b"written")
            wait_for(lambda: log_of(cluster, "t", 0) == [b"written"], timeout=30)
            started = time.monotonic()
            producer.close(1)
            # close's own bounds: its timeout, the shutdown's least, the results thread and the
            # last reports' waits, and the kill's; plus a margin for a loaded machine
            assert time.monotonic() - started < 1 + 2 * CLOSE_MIN + 2 * LAST_POLL_WAIT + 10
            error = future.exception(10)
            assert isinstance(error, OutcomeUnknownError) and error.possibly_written, repr(error)
            assert "closed" in str(error)
        finally:
            cluster.delay(messages.PRODUCE, 0)
            producer.close(10)


# the ray case is slow: test_retries_exhausted_fail_exactly_those_messages_with_the_cause[ray] keeps the retry path on Ray
@pytest.mark.parametrize("shell", on_shells())
def test_delivery_timeout_bounds_a_message_whose_retries_never_end(make_producer):
    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        cluster.fail_next(messages.PRODUCE, NOT_LEADER, count=10_000, topic="t", partition=0)
        # delivery.timeout.ms at its least: linger.ms + request.timeout.ms, as the Java client requires
        with make_producer(config(cluster, **{"delivery.timeout.ms": 2 + 5000, "retry.backoff.ms": 100})) as producer:
            start = time.monotonic()
            future = producer.send("t", b"never")
            with pytest.raises(DeliveryTimeoutError, match="NOT_LEADER_OR_FOLLOWER"):
                future.result(30)
            assert 1.4 <= time.monotonic() - start < 15


# slow: tests/unit/test_local_pipeline.py's test_a_new_message_waiting_behind_a_slow_chaser_... keeps
# the deadline in the default tier, test_leader_dispatcher_state.py's PartitionTimers case the
# timers both shells arm, and test_producer_units.py's test_every_timer_a_stage_arms_calls_a_method_of_its_own
# the actor's methods they call
@pytest.mark.slow
@pytest.mark.ray
def test_a_new_message_waiting_behind_a_slow_chaser_fails_at_its_deadline_through_the_actors(ray_session):
    """As the local case, through the actors: the LeaderDispatcher leaves the slow broker without
    waiting for its queue (`LeftBrokers`), and its own deadline timer ends the message as not
    delivered at its delivery.timeout.ms, before the driver's watchdog would call it "outcome
    unknown" (delivery.timeout.ms + request.timeout.ms). Partition 2 is led by the new leader
    from the start, so its BrokerWorker is up before partition 0 moves there."""
    with MockCluster(n_brokers=2, topics={"t": 3}) as cluster:
        old = cluster.leader("t", 0)
        new_leader = next(n for n in cluster.brokers if n != old)
        cluster.move_leader("t", 1, old)
        cluster.move_leader("t", 2, new_leader)
        with Producer(config(cluster, **{"linger.ms": 0, "retry.backoff.ms": 10, "request.timeout.ms": 2000,
                                         "delivery.timeout.ms": 4000, "batch.size": 64,
                                         "max.in.flight.requests.per.connection": 1})) as producer:
            assert [producer.send("t", b"first", partition=p).result(30).offset for p in (0, 2)] == [0, 0]
            # each answer there comes just within request.timeout.ms: a queue of them forms, and the
            # chaser goes behind it
            cluster.delay(messages.PRODUCE, 1.5, node_id=old)
            cluster.fail_next(messages.PRODUCE, NOT_LEADER, 1, node_id=old, topic="t", partition=0)
            cluster.move_leader("t", 0, new_leader)
            retried = producer.send("t", b"retried", partition=0)
            # seven requests of partition 1 queue behind it
            queue = [producer.send("t", b"queue", partition=1) for _ in range(7)]
            assert retried.result(30).offset == 1  # written at the new leader once its retry level opened
            sent = time.monotonic()
            with pytest.raises(DeliveryTimeoutError, match="waiting behind a retry of t/0") as failed:
                producer.send("t", b"new", partition=0).result(30)
            assert not failed.value.possibly_written and time.monotonic() - sent < 5.5  # the watchdog: 6
            for future in queue:  # partition 1's queue ends too, one way or the other
                assert future.exception(60) is None or isinstance(future.exception(), DeliveryTimeoutError)
        assert log_of(cluster, "t", 0) == [b"first", b"retried"]


@pytest.mark.ray
def test_a_slow_broker_holds_up_only_its_own_partitions(ray_session):
    """A partition whose window of calls is full (`CALLS_IN_FLIGHT` calls out to a broker slower
    than the load) keeps its batches in the LeaderDispatcher and sends them as its calls return.
    The actor does not wait for that, so a partition led by the other broker is written at once;
    every batch kept is written after, in the order sent. (Before, the actor waited on the
    partition's oldest call, and every partition of every topic waited with it.)"""
    with MockCluster(n_brokers=2, topics={"t": 2}) as cluster:
        slow = cluster.leader("t", 0)
        cluster.move_leader("t", 1, next(n for n in cluster.brokers if n != slow))
        with Producer(config(cluster, **{"linger.ms": 0, "batch.size": 64, "request.timeout.ms": 10000,
                                         "max.in.flight.requests.per.connection": 1})) as producer:
            assert [producer.send("t", b"first", partition=p).result(30).offset for p in (0, 1)] == [0, 0]
            cluster.delay(messages.PRODUCE, 2.0, node_id=slow)
            values = [b"%02d" % i + b"x" * 100 for i in range(CALLS_IN_FLIGHT + 3)]  # a batch each (batch.size)
            flood = []
            for value in values:  # a call each: the driver gathers sends for at most 50 ms
                flood.append(producer.send("t", value, partition=0))
                time.sleep(0.1)
            sent = time.monotonic()
            assert producer.send("t", b"other", partition=1).result(30).offset == 1
            took = time.monotonic() - sent
            cluster.delay(messages.PRODUCE, 0, node_id=slow)  # the rest of the flood goes at once
            assert [future.result(60).offset for future in flood] == list(range(1, len(values) + 1))
        assert took < 1.0, f"the other broker's partition waited {took:.2f}s"
        assert log_of(cluster, "t", 0) == [b"first", *values]


@pytest.mark.ray
def test_no_reachable_broker_fails_construction_with_the_cause(ray_session, wait_for):
    from raykafka.driver.embedded_broker import free_port
    from raykafka.wire.errors import BrokerConnectionError

    with pytest.raises(BrokerConnectionError, match="no bootstrap server reachable"):
        Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "socket.connection.setup.timeout.ms": 1000},
                 name="rk-unreachable")
    wait_for(lambda: not [n for n in ray.util.list_named_actors() if n.startswith("rk-unreachable/")], 10)


@pytest.mark.ray
def test_a_send_batch_larger_than_buffer_memory_goes_in_slices_that_wait_for_room(ray_session):
    """A batch five times buffer.memory is taken a quarter of buffer.memory at a time, each slice
    waiting for room; when a slice waits past max.block.ms, it and the rest fail with that cause
    and the slices already taken are delivered."""
    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        producer = Producer(config(cluster, **{"buffer.memory": 20_000, "max.block.ms": 400}))
        values = [b"%04d" % i + b"x" * 996 for i in range(100)]
        try:
            producer.send("t", b"warm").result(30)  # the pipeline's actors start outside max.block.ms
            result = producer.send_batch("t", values).result(60)
            assert result.ok and result.offsets.tolist() == list(range(1, 101))
            cluster.delay(messages.PRODUCE, 3.0)
            slow = producer.send_batch("t", values).result(60)
            assert 0 < slow.delivered < 100 and slow.delivered + slow.failed == 100
            assert all(e is None for e in slow.errors[:slow.delivered])
            assert all(isinstance(e, BufferExhaustedError) and "max.block.ms=400" in str(e)
                       for e in slow.errors[slow.delivered:])
        finally:
            cluster.delay(messages.PRODUCE, 0)
            producer.close(30)
        assert log_of(cluster, "t", 0) == [b"warm"] + values + values[:slow.delivered]


@pytest.mark.ray
def test_send_batch_calls_blocked_on_buffer_memory_wait_without_spinning(ray_session, wait_for):
    """Two send_batch calls waiting for room in buffer.memory (a Ray Data writer has two blocks in
    flight) sleep until room is made: they do not wake each other in turn, which burned a core of
    the caller's process for as long as the broker was slow."""
    import threading

    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        producer = Producer(config(cluster, **{"buffer.memory": 20_000, "max.block.ms": 20_000}))
        try:
            producer.send("t", b"warm").result(30)
            cluster.delay(messages.PRODUCE, 4.0)
            results: list = []
            callers = [threading.Thread(target=lambda: results.append(producer.send_batch(
                "t", [b"x" * 1000] * 30).result(60)), daemon=True) for _ in range(2)]
            for caller in callers:
                caller.start()
            wait_for(lambda: producer.buffer_in_use > 15_000, timeout=10, interval=0.01)  # full: both wait
            cpu, wall = time.process_time(), time.monotonic()
            time.sleep(1.0)  # a window to measure the process's CPU over, while the broker holds the answer
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            assert cpu < 0.4 * wall, f"{cpu:.2f} s of CPU in {wall:.2f} s while blocked"
            cluster.delay(messages.PRODUCE, 0)
            for caller in callers:
                caller.join(60)
            assert [r.delivered for r in results] == [30, 30]
        finally:
            cluster.delay(messages.PRODUCE, 0)
            producer.close(30)


# the ray case is slow: test_large_batches_retried_by_reference_keep_their_bytes_and_order keeps
# send_batch on Ray
@pytest.mark.parametrize("shell", on_shells())
def test_a_too_large_message_fails_alone_and_the_rest_keep_their_partitions(make_producer):
    with MockCluster(n_brokers=1, topics={"t": 2}) as cluster, \
            make_producer(config(cluster, **{"max.request.size": 10_000})) as producer:
        values = [b"a", b"y" * 20_000, b"c", b"d"]
        result = producer.send_batch("t", values, partitions=[1, 0, 1, 0]).result(30)
        assert (result.delivered, result.failed) == (3, 1)
        assert result.partitions.tolist() == [1, -1, 1, 0]
        assert "max.request.size" in str(result.errors[1])
        assert log_of(cluster, "t", 1) == [b"a", b"c"] and log_of(cluster, "t", 0) == [b"d"]


# the ray case is slow: test_retries_exhausted_fail_exactly_those_messages_with_the_cause[ray] keeps the retry path on Ray
@pytest.mark.parametrize("extra, shell", on_shells([({},), ({"acks": 1, "retries": 0},),
                                                    ({"acks": 1, "retries": 0, "max.in.flight.requests.per.connection": 1},)]),
                         ids=shell_ids(["idempotent", "acks1-retries0", "acks1-retries0-one-in-flight"]))
def test_a_batch_over_the_brokers_message_max_bytes_is_cut_in_halves_until_they_fit(make_producer, extra):
    """As the Java producer: a batch of many records refused with MESSAGE_TOO_LARGE is cut in
    two and each half sent on its own (not counted as a retry: it works with retries=0), every
    record once and in order; a record that alone is over the broker's limit fails with the
    cause, alone, and what comes after it is written (idempotent: under a new producer id, as
    the refused record left a gap in the sequence numbers)."""
    with MockCluster(n_brokers=1, topics={"t": 1}, message_max_bytes=20_000) as cluster:
        with make_producer(config(cluster, **extra)) as producer:
            idempotent = producer.producer_id >= 0
            values = [b"%04d" % i + b"v" * 196 for i in range(300)]  # one batch of about 63 KB
            result = producer.send_batch("t", values, partitions=[0] * 300).result(60)
            alone = producer.send("t", b"x" * 30_000, partition=0)
            with pytest.raises(BrokerError, match="produce to t/0: MESSAGE_TOO_LARGE") as info:
                alone.result(60)
            assert info.value.code == BY_NAME["MESSAGE_TOO_LARGE"].code and not info.value.retriable
            after = producer.send("t", b"after", partition=0).result(60)
        assert idempotent == ("acks" not in extra)
        assert (result.delivered, result.failed) == (300, 0), result
        assert result.offsets.tolist() == list(range(300))
        assert after.offset == 300
        assert log_of(cluster, "t", 0) == values + [b"after"]
        assert cluster.faults["message_too_large"] == 1 + 2 + 1  # 63 KB, its two halves, the lone record
        written = [len(p.records) for r in cluster.requests(messages.PRODUCE) for t in r.topic_data
                   for p in t.partition_data if 10_000 < len(p.records) <= 20_000]
        assert len(written) == 4  # the quarters
