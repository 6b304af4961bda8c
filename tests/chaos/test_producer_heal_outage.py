"""A producer heals on a bad day, against tansu behind the outage proxy: an actor killed while
the broker is unreachable (the new pipeline cannot start until the broker is back: the heal
tries again, and nothing fails), two deaths one after the other (two heals), a close while a
heal cannot finish (close ends in its bound, every message ends, no actor is left), and futures
cancelled by their caller while the pipeline heals (their messages still go, once)."""

from __future__ import annotations

import time

import pytest
from outage import Outage  # tests/chaos/, on the path (conftest.py)

from raykafka.driver.producer import Producer

pytestmark = [pytest.mark.ray, pytest.mark.broker, pytest.mark.timeout(300)]

PARTITIONS = 3


def _send(ledger, producer, topic, lo, hi):
    for i in range(lo, hi):
        ledger.send(producer, topic, b"v%07d" % i, key=b"k%02d" % (i % 17))


def test_a_broker_worker_killed_during_an_outage_heals_once_the_broker_is_back(ray_session, kit, ledger, record, tmp_path,
                                                                         wait_for, live_actors):
    outage = Outage("unreachable", None, tmp_path)
    try:
        kit.create_topic(outage.bootstrap, "heal", PARTITIONS)
        producer = Producer({"bootstrap.servers": outage.bootstrap, "linger.ms": 5, "request.timeout.ms": 2000,
                             "delivery.timeout.ms": 120_000}, on_delivery=ledger.on_delivery)
        try:
            _send(ledger, producer, "heal", 0, 3000)
            assert producer.flush(60) == 0
            cut = outage.cut()
            _send(ledger, producer, "heal", 3000, 6000)  # waiting in the pipeline for the broker
            killed = kit.kill_by_role(producer.name + "/", "broker_worker")
            wait_for(lambda: producer.heal_failures >= 2, timeout=60)
            assert producer.healed == 0
            back = outage.restore()
            _send(ledger, producer, "heal", 6000, 9000)
            figures = ledger.settle(timeout=120)
            settled_after_back = time.monotonic() - back
        finally:
            producer.close(30)
        log = kit.read_back(outage.bootstrap, "heal", PARTITIONS, figures["delivered"], timeout=60)
        checks = ledger.check_log(log)
        record(**figures, **checks, outage_s=round(back - cut, 1), settled_after_back_s=round(settled_after_back, 1),
               heals=kit.heal_figures(producer), actors_killed=[killed], faults={"outage/unreachable": 1})
        assert producer.healed == 1
        assert figures["failed"] == figures["unresolved"] == 0
        assert checks == {"lost": 0, "duplicated": 0, "reordered": 0, "failed_but_written": 0, "without_offset": 0}
        assert live_actors(producer.name) == []
    finally:
        outage.close()


@pytest.mark.slow  # 12 s; the default tier keeps a death during an outage and a heal that cannot finish
def test_two_deaths_one_after_the_other_heal_twice(ray_session, bootstrap, topic_name, kit, ledger, record,
                                                   live_actors):
    topic = topic_name("heal2")
    kit.create_topic(bootstrap, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}, on_delivery=ledger.on_delivery)
    try:
        _send(ledger, producer, topic, 0, 2000)
        assert producer.flush(60) == 0
        _send(ledger, producer, topic, 2000, 4000)
        first = kit.kill_by_role(producer.name + "/", "leader_dispatcher")
        _send(ledger, producer, topic, 4000, 6000)
        assert producer.flush(60) == 0 and producer.healed == 1
        assert producer.pipeline_prefix == producer.name + "~1/"
        _send(ledger, producer, topic, 6000, 8000)
        second = kit.kill_by_role(producer.pipeline_prefix, "broker_worker")
        _send(ledger, producer, topic, 8000, 10_000)
        figures = ledger.settle(timeout=90)
    finally:
        producer.close(30)
    log = kit.read_back(bootstrap, topic, PARTITIONS, figures["delivered"], timeout=60)
    checks = ledger.check_log(log)
    record(**figures, **checks, heals=kit.heal_figures(producer), actors_killed=[first, second])
    assert producer.healed == 2
    assert figures["failed"] == figures["unresolved"] == 0
    assert checks == {"lost": 0, "duplicated": 0, "reordered": 0, "failed_but_written": 0, "without_offset": 0}
    assert live_actors(producer.name) == []


def test_close_while_a_heal_cannot_finish_ends_and_leaves_no_actor(ray_session, kit, ledger, tmp_path, wait_for,
                                                                    live_actors):
    outage = Outage("unreachable", None, tmp_path)
    try:
        kit.create_topic(outage.bootstrap, "healclose", PARTITIONS)
        producer = Producer({"bootstrap.servers": outage.bootstrap, "linger.ms": 5, "request.timeout.ms": 2000},
                            on_delivery=ledger.on_delivery)
        _send(ledger, producer, "healclose", 0, 1000)
        assert producer.flush(60) == 0
        outage.cut()
        _send(ledger, producer, "healclose", 1000, 2000)
        kit.kill_by_role(producer.name + "/", "broker_worker")
        wait_for(lambda: producer.heal_failures >= 1, timeout=60)
        _send(ledger, producer, "healclose", 2000, 2100)  # gathered while the heal waits for the broker
        t0 = time.monotonic()
        producer.close(10)
        close_s = time.monotonic() - t0
        figures = ledger.settle(timeout=5)
        assert close_s < 20
        assert figures["unresolved"] == 0 and figures["delivered"] + figures["failed"] == 2100
        assert figures["failed"] == 1100  # the messages sent during the outage, named as closed
        errors = {str(e) for e in ledger.failed.values()}
        assert all("closed" in e for e in errors), errors
        assert any("before its pipeline healed" in e for e in errors), errors  # those the sender held
        assert live_actors(producer.name) == []
    finally:
        outage.close()


def test_cancelled_futures_messages_go_once_through_a_heal(ray_session, bootstrap, topic_name, kit, live_actors):
    """A caller that gives up on its futures (cancels them) while the pipeline heals: the
    messages go all the same, once each, and `on_delivery` hears of every one with its offset."""
    topic = topic_name("healcancel")
    kit.create_topic(bootstrap, topic, PARTITIONS)
    values = [b"c%06d" % i for i in range(6000)]
    delivered: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5},
                        on_delivery=lambda meta, error: delivered.append((meta, error)))
    try:
        first = [producer.send(topic, v, key=v[-2:]) for v in values[:2000]]
        assert producer.flush(60) == 0
        rest = [producer.send(topic, v, key=v[-2:]) for v in values[2000:]]
        cancelled = [f for f in rest[::3] if f.cancel()]
        kit.kill_by_role(producer.name + "/", "broker_worker")
        assert producer.flush(90) == 0
    finally:
        producer.close(30)
    assert producer.healed >= 1 and cancelled
    assert all(f.result(0).offset >= 0 for f in first + [f for f in rest if not f.cancelled()])
    assert len(delivered) == len(values) and all(error is None and meta.offset >= 0 for meta, error in delivered)
    log = kit.read_back(bootstrap, topic, PARTITIONS, len(values), timeout=60)
    logged = [value for entries in log.values() for _, value in entries]
    assert sorted(logged) == values  # each once, the cancelled ones too
    assert live_actors(producer.name) == []
