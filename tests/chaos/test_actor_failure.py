"""Actor failure mid-stream, against tansu: `ray.kill` one producer actor (each role in turn)
while messages are in flight. The producer rebuilds its pipeline: with idempotence every
message is delivered exactly once and in order per key; without it, at least once. Then the consumer side: a
killed partition consumer is reported for its partition; a killed group member's partitions go
to the living members and every message is processed at least once."""

from __future__ import annotations

import time

import pytest
import ray

from raykafka.driver.producer import Producer

from ..tiers import default_keeps

pytestmark = [pytest.mark.ray, pytest.mark.broker, pytest.mark.timeout(300)]

PARTITIONS = 4


ROLES = ["leader_dispatcher", "broker_worker", "retry_handler", "topic_dispatcher", "partition_dispatcher"]


# the default tier keeps a data-carrying stage here, and a dispatcher killed while it hosts several
# topics (test_killed_dispatcher_hosting_several_topics_heals_exactly_once_on_each); the others heal alike
@pytest.mark.parametrize("role", default_keeps(ROLES, kept=["broker_worker"]))
def test_killed_producer_actor_heals_exactly_once_in_order(ray_session, bootstrap, topic_name, kit, ledger, record,
                                                           role, chaos_full, live_actors):
    """ray.kill one producer actor while a third of the stream is in flight, with idempotence:
    the producer rebuilds its pipeline and every message is delivered once, in order per key."""
    topic = topic_name("kill")
    kit.create_topic(bootstrap, topic, PARTITIONS)
    n = 45_000 if chaos_full else 15_000
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "request.timeout.ms": 3000,
              "delivery.timeout.ms": 60_000, "enable.idempotence": True}
    producer = Producer(config, on_delivery=ledger.on_delivery)
    killed = None
    try:
        for i in range(n // 3):
            ledger.send(producer, topic, b"v%07d" % i, key=b"k%02d" % (i % 31))
        assert producer.flush(60) == 0  # the pipeline is up: every actor exists
        for i in range(n // 3, 2 * n // 3):  # in flight and queued when the actor dies
            ledger.send(producer, topic, b"v%07d" % i, key=b"k%02d" % (i % 31))
        second = ledger.futures[n // 3:]
        kit.wait_for(lambda: sum(f.done() for f in second) >= n // 30, timeout=60)  # mid-stream: requests in flight
        killed = kit.kill_by_role(producer.name + "/", role)
        t_kill = time.monotonic()
        for i in range(2 * n // 3, n):
            ledger.send(producer, topic, b"v%07d" % i, key=b"k%02d" % (i % 31))
        # a death no message meets (the TopicDispatcher's: a written topic goes straight to its
        # dispatcher) is healed all the same: the watchdog sees it in the actor table
        kit.wait_for(lambda: producer.healed >= 1, timeout=60)
        figures = ledger.settle(timeout=90)
        healed_s = time.monotonic() - t_kill
    finally:
        closing = time.monotonic()
        producer.close(30)
        close_s = time.monotonic() - closing
    log = kit.read_back(bootstrap, topic, PARTITIONS, figures["delivered"], timeout=60)
    checks = ledger.check_log(log)
    causes = {str(e).splitlines()[0][:300] for e in ledger.failed.values()}
    record(**figures, **checks, faults={}, actors_killed=[killed], heals=kit.heal_figures(producer),
           seconds_to_settle_after_kill=round(healed_s, 1), close_seconds=round(close_s, 1),
           sample_causes=sorted(causes)[:3], callbacks=ledger.callbacks)
    assert producer.healed >= 1, "the pipeline was rebuilt"
    assert figures["unresolved"] == 0, "no future pending"
    assert figures["failed"] == 0, sorted(causes)[:3]
    assert ledger.callbacks == n
    assert checks == {"lost": 0, "duplicated": 0, "reordered": 0, "failed_but_written": 0, "without_offset": 0}
    assert close_s < 25, "close() ends within its bound"
    assert live_actors(producer.name) == [], "close() leaves no actor of the producer alive, of any pipeline"


HOSTED_TOPICS = 3


@pytest.mark.parametrize("role", default_keeps(["partition_dispatcher", "leader_dispatcher"],
                                                kept=["partition_dispatcher"]))
def test_killed_dispatcher_hosting_several_topics_heals_exactly_once_on_each(
        ray_session, bootstrap, topic_name, kit, ledger, record, role, live_actors):
    """One PartitionDispatcher and one LeaderDispatcher host every topic: killed mid-stream while
    three topics are written, every message of each topic is delivered once, in order per key."""
    topics = [topic_name(f"killhost{i}") for i in range(HOSTED_TOPICS)]
    for topic in topics:
        kit.create_topic(bootstrap, topic, PARTITIONS)
    ledgers = {topic: type(ledger)() for topic in topics}
    n = 6_000  # per topic
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "request.timeout.ms": 3000,
              "delivery.timeout.ms": 60_000, "enable.idempotence": True}
    producer = Producer(config)

    def send(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            for topic in topics:
                ledgers[topic].send(producer, topic, b"v%07d" % i, key=b"k%02d" % (i % 31))

    try:
        send(0, n // 3)
        assert producer.flush(60) == 0
        send(n // 3, 2 * n // 3)
        second = [f for led in ledgers.values() for f in led.futures[n // 3:]]
        kit.wait_for(lambda: sum(f.done() for f in second) >= len(second) // 10, timeout=60)
        killed = kit.kill_by_role(producer.name + "/", role)
        send(2 * n // 3, n)
        figures = {topic: led.settle(timeout=90) for topic, led in ledgers.items()}
    finally:
        producer.close(30)
    checks = {topic: ledgers[topic].check_log(kit.read_back(bootstrap, topic, PARTITIONS, figures[topic]["delivered"]))
              for topic in topics}
    record(topics=figures, checks=checks, actors_killed=[killed], heals=kit.heal_figures(producer))
    assert producer.healed >= 1
    assert [f["delivered"] for f in figures.values()] == [n] * HOSTED_TOPICS, figures
    clean = {"lost": 0, "duplicated": 0, "reordered": 0, "failed_but_written": 0, "without_offset": 0}
    assert list(checks.values()) == [clean] * HOSTED_TOPICS, checks
    assert live_actors(producer.name) == []


def test_killed_broker_worker_without_idempotence_heals_at_least_once(ray_session, bootstrap, topic_name, kit, ledger,
                                                                record, live_actors):
    """Without idempotence the log cannot say whose records are whose: what the dead BrokerWorker had
    in flight is sent again (at least once); nothing fails, nothing is lost."""
    topic = topic_name("killnoidem")
    kit.create_topic(bootstrap, topic, PARTITIONS)
    n = 15_000
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": False, "acks": "all",
              "max.in.flight.requests.per.connection": 1}
    producer = Producer(config, on_delivery=ledger.on_delivery)
    try:
        for i in range(n // 3):
            ledger.send(producer, topic, b"v%07d" % i, key=b"k%02d" % (i % 31))
        assert producer.flush(60) == 0
        for i in range(n // 3, n):
            ledger.send(producer, topic, b"v%07d" % i, key=b"k%02d" % (i % 31))
            if i == n // 2:
                killed = kit.kill_by_role(producer.name + "/", "broker_worker")
        figures = ledger.settle(timeout=90)
    finally:
        producer.close(30)
    log = kit.read_back(bootstrap, topic, PARTITIONS, figures["delivered"], timeout=60)
    checks = ledger.check_log(log)
    record(**figures, **checks, actors_killed=[killed], heals=kit.heal_figures(producer))
    assert producer.healed >= 1
    assert figures["failed"] == figures["unresolved"] == 0
    assert checks["lost"] == 0
    assert live_actors(producer.name) == []


def test_no_message_written_during_a_heal_is_reported_not_delivered(ray_session, bootstrap, topic_name, kit, ledger,
                                                                  record, live_actors):
    """The BrokerWorker killed with 2,000 messages in flight, and more sent every 0.25 s while the
    producer sees the death, reads the log and sends again what it does not hold, with a
    delivery.timeout.ms (2 s) that runs out in the middle of it. A message the
    log holds is never failed as not delivered: it ends delivered at its offset, or failed with
    an error that says it may have been written (`possibly_written`). The re-send through the
    healed pipeline is given request.timeout.ms to finish before anything is failed."""
    topic = topic_name("healtruth")
    kit.create_topic(bootstrap, topic, PARTITIONS)
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "request.timeout.ms": 1500,
              "delivery.timeout.ms": 2000, "enable.idempotence": True}
    producer = Producer(config, on_delivery=ledger.on_delivery)
    sent = 0

    def send(n: int) -> None:
        nonlocal sent
        for i in range(sent, sent + n):
            ledger.send(producer, topic, b"v%07d" % i, key=b"k%02d" % (i % 31))
        sent += n

    try:  # the pipeline up first, outside the ledger: a cold start may take longer than 2 s
        kit.wait_for(lambda: producer.send(topic, b"warm-up").exception(10) is None, timeout=120)
        send(2000)
        killed = kit.kill_by_role(producer.pipeline_prefix, "broker_worker")
        for _ in range(40):  # 10 s: deadlines fall before, during and after the heal
            send(100)
            time.sleep(0.25)
        figures = ledger.settle(timeout=90)
    finally:
        producer.close(30)
    log = kit.read_back(bootstrap, topic, PARTITIONS, figures["delivered"], timeout=60)
    checks = ledger.check_log(log)
    written = {value for entries in log.values() for _, value in entries}
    said_not_written = sum(1 for i, e in ledger.failed.items()
                           if ledger.values[i] in written and not getattr(e, "possibly_written", False))
    record(**figures, **checks, actors_killed=[killed], heals=kit.heal_figures(producer),
           failed_in_log_said_not_written=said_not_written)
    assert producer.healed >= 1
    assert figures["unresolved"] == 0
    assert said_not_written == 0, "a message in the log was reported not delivered"
    assert checks["lost"] == checks["duplicated"] == 0
    assert live_actors(producer.name) == []


def test_killed_partition_consumer_is_replaced_and_its_partition_read_once(ray_session, bootstrap, topic_name, kit,
                                                                           record, live_actors_of):
    """Consumer with 3 assigned partitions, all hosted by its one PartitionConsumer actor, which
    is killed mid-stream: the Consumer replaces it, each partition at the offset after the last
    record of it handed out."""
    from raykafka.driver.consumer import Consumer

    topic = topic_name("pckill")
    kit.create_topic(bootstrap, topic, 3)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        fs = [producer.send(topic, b"m%05d" % i, partition=i % 3) for i in range(3000)]
        [f.result(60) for f in fs]
    consumer = Consumer({"bootstrap.servers": bootstrap})
    read: list[tuple[int, bytes]] = []  # (partition, value) in the order handed out
    try:
        consumer.assign_topic(topic, "earliest")
        victim = consumer._host_of(topic, 1)
        ray.kill(victim, no_restart=True)
        t0 = time.monotonic()
        for batch in consumer.batches(timeout=20, until_end=True):
            read += kit.rows(batch)
        read_s = time.monotonic() - t0
        heals, failed = dict(consumer.heals_per_partition), dict(consumer.failed)
    finally:
        closing = time.monotonic()
        unclean = consumer.close()
        close_s = time.monotonic() - closing
    sent = [b"m%05d" % i for i in range(3000)]
    figures = kit.consumed_figures(read, sent)
    record(sent=3000, delivered=len(read), failed=len(failed), **figures, faults={},
           actors_killed=["partition_consumer " + topic + "/1"], partition_consumers_replaced=sum(heals.values()),
           seconds_to_read_all=round(read_s, 1), close_reported=unclean, close_seconds=round(close_s, 1))
    assert figures == {"lost": 0, "duplicated": 0, "reordered": 0}
    assert heals == {(topic, p): 1 for p in range(3)} and not failed, (heals, failed)
    assert unclean == {}, unclean
    assert live_actors_of() == [], "close leaves no consumer actor, dead or alive"


@pytest.mark.slow  # 11 s; the default tier keeps a dead member replaced by the group (tests/consumer/test_group_tansu.py)
def test_killed_group_member_partitions_go_to_the_living(ray_session, bootstrap, topic_name, kit, record, tmp_path,
                                                         live_actors_of):
    """ConsumerGroup of 3 members on 6 partitions; one member is killed mid-stream; the group
    replaces it and, with session.timeout.ms=6000, rebalances: every message is processed at
    least once."""
    from raykafka.driver.consumer_group import ConsumerGroup

    topic = topic_name("gkill")
    kit.create_topic(bootstrap, topic, 6)
    n = 6000
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        fs = [producer.send(topic, b"g%05d" % i, partition=i % 6) for i in range(n)]
        [f.result(60) for f in fs]
    sink = tmp_path / "seen"
    sink.mkdir()

    def handle(batch, _dir=str(sink)):  # runs in the member actors: append what it saw to a file
        import os

        values = batch.column("value").to_pylist()
        with open(os.path.join(_dir, f"{os.getpid()}.txt"), "ab") as fh:
            fh.write(b"\n".join(values) + b"\n")
        import time as _t

        _t.sleep(0.05)  # slow enough that a kill lands mid-stream

    def seen() -> set[bytes]:
        out: set[bytes] = set()
        for f in sink.iterdir():
            out.update(v for v in f.read_bytes().split(b"\n") if v)
        return out

    config = {"bootstrap.servers": bootstrap, "group.id": f"chaos-{topic}", "auto.offset.reset": "earliest",
              "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    group = ConsumerGroup(config, topic, handle, members=3)
    t_kill = None
    try:
        kit.wait_for(lambda: len(seen()) > 0, timeout=60, what="first messages processed")
        victim = group.members[0]
        ray.kill(victim, no_restart=True)
        t_kill = time.monotonic()
        kit.wait_for(lambda: len(seen()) >= n, timeout=90, what="every message processed")
        recovered = time.monotonic() - t_kill
        errors = group.errors()
    finally:
        closing = time.monotonic()
        ended = group.close()
        close_s = time.monotonic() - closing
    got = seen()
    sent = {b"g%05d" % i for i in range(n)}
    processed = sum(len([v for v in f.read_bytes().split(b"\n") if v]) for f in sink.iterdir())
    # at least once: a batch a member handled before the rebalance may be handled again, so what
    # is handled twice is a figure of its own; the handler sees no log order to judge
    record(sent=n, delivered=len(got & sent), failed=None, lost=len(sent - got), reordered=None, duplicated=None,
           processed_more_than_once=processed - len(got), faults={}, actors_killed=["group member 0 of 3"],
           seconds_to_recover=round(recovered, 1), close_seconds=round(close_s, 1),
           close_reported=[e["fatal"] for e in ended])
    assert sent <= got
    assert [e.where for e in errors if e.kind in ("fatal", "replaced")] == ["member 0"], errors
    assert "died" in errors[0].cause and errors[0].kind == "replaced", errors
    assert [e["fatal"] for e in ended] == [None, None, None], ended  # the replacement stopped as the others did
    assert live_actors_of() == [], "close leaves no member actor, dead or alive"
