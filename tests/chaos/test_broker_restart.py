"""Broker restart mid-stream: tansu is stopped while messages are in flight and started again on
the same port. Its storage is in memory, so what was written before is gone (expected) and the
topic is created again. The producer must end every message (delivered, or failed with its
cause) and deliver everything sent after the restart; a consumer assigned before the restart
reconnects and reads what is written after it."""

from __future__ import annotations

import time

import pytest

from raykafka.driver.consumer import Consumer
from raykafka.driver.embedded_broker import EmbeddedBroker, free_port
from raykafka.driver.producer import Producer

pytestmark = [pytest.mark.ray, pytest.mark.broker, pytest.mark.timeout(300)]

PARTITIONS = 2


def test_broker_restart_mid_stream(ray_session, kit, ledger, record, tmp_path, chaos_full):
    """2 partitions; 2000 messages before, 1000 in flight at the stop, 6000 after the restart.

    A consumer cannot tell a replaced log from the old one by offsets: it resumes at its old
    position, so what the new log holds below that position is skipped; everything at or past
    the old end ((before + during) / 2 per partition) must be read."""
    port = free_port()
    broker = EmbeddedBroker(port=port, log_path=tmp_path / "tansu-1.log").start()
    bootstrap = broker.bootstrap
    before, during, after = (2000, 1000, 6000) if not chaos_full else (20000, 10000, 60000)
    kit.create_topic(bootstrap, "r", PARTITIONS)
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "request.timeout.ms": 2000, "retry.backoff.ms": 100,
              "delivery.timeout.ms": 8000, "reconnect.backoff.ms": 100}
    try:
        producer = Producer(config, on_delivery=ledger.on_delivery)
    except Exception:
        config.pop("reconnect.backoff.ms")
        producer = Producer(config, on_delivery=ledger.on_delivery)
    consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
    read_after: set[bytes] = set()
    try:
        for i in range(before):
            ledger.send(producer, "r", b"b%06d" % i, partition=i % 2)
        assert producer.flush(60) == 0
        consumer.assign_topic("r", "earliest")
        first = sum(b.num_rows for b in consumer.batches(timeout=10, until_end=True))
        for i in range(during):
            ledger.send(producer, "r", b"d%06d" % i, partition=i % 2)
        broker.stop()  # mid-stream: some of `during` are in flight or not yet sent
        t_stop = time.monotonic()
        broker = EmbeddedBroker(port=port, log_path=tmp_path / "tansu-2.log").start()
        kit.create_topic(bootstrap, "r", PARTITIONS)
        t_restart = time.monotonic()
        n_after_start = len(ledger.futures)
        for i in range(after):
            ledger.send(producer, "r", b"a%06d" % i, partition=i % 2)
        figures = ledger.settle(timeout=60)
        first_after = min((f.result(0).offset, j) for j, f in enumerate(ledger.futures[n_after_start:])
                          if f.exception(0) is None) if figures["delivered"] else None
        recovered = time.monotonic() - t_restart
        old_end = (before + during) // PARTITIONS
        want = {ledger.values[i] for i, (p, off) in ledger.delivered.items()
                if ledger.values[i].startswith(b"a") and off >= old_end}
        deadline = time.monotonic() + 60
        while not want <= read_after and time.monotonic() < deadline:  # the consumer reconnects
            for batch in consumer.batches(timeout=3):
                read_after.update(v for v in batch.column("value").to_pylist() if v.startswith(b"a"))
                if want <= read_after:
                    break
        # what the restarted broker holds, judged for the messages sent after the restart (what
        # was written before it went with the in-memory log)
        after_checks = ledger.check_log(kit.read_back(bootstrap, "r", PARTITIONS, after, timeout=60),
                                        only=range(n_after_start, n_after_start + after))
    finally:
        producer.close(30)
        try:
            consumer.close()
        finally:
            broker.stop()
    idx_after = range(before + during, before + during + after)
    after_delivered = sum(1 for i in idx_after if i in ledger.delivered)
    during_idx = range(before, before + during)
    record(**figures, faults={"broker_restart": 1}, actors_killed=[], **after_checks,
           checked_against_the_log="messages sent after the restart",
           before_restart_delivered=sum(1 for i in range(before) if i in ledger.delivered),
           in_flight_delivered=sum(1 for i in during_idx if i in ledger.delivered),
           in_flight_failed=sum(1 for i in during_idx if i in ledger.failed),
           after_restart_sent=after, after_restart_delivered=after_delivered,
           consumer_read_before=first, consumer_must_read_after=len(want), consumer_read_after=len(read_after & want),
           consumer_read_after_any=len(read_after),
           seconds_down=round(t_restart - t_stop, 1), seconds_to_settle_after_restart=round(recovered, 1),
           first_after=str(first_after),
           sample_causes=sorted({str(e).splitlines()[0][:300] for e in ledger.failed.values()})[:3],
           failed_partitions=sorted({i % 2 for i in ledger.failed}))
    assert figures["unresolved"] == 0
    assert ledger.callbacks == len(ledger.futures)
    for e in ledger.failed.values():
        assert str(e), "a failure names its cause"
    assert after_delivered == after, "everything sent after the restart is delivered"
    assert after_checks["lost"] == 0 and after_checks["duplicated"] == 0 and after_checks["reordered"] == 0
    assert len(want) >= after // 2 - PARTITIONS
    assert want <= read_after, f"the consumer read {len(read_after & want)} of {len(want)} after reconnecting"
