"""A topic's first message while the broker is unreachable: tansu behind the proxy, the proxy's
listener shut (every connection refused, the open ones cut) before the first send to a topic the
producer has not written yet.

- Restored after ~3 s: the topic's batches wait in the TopicDispatcher for its partition count,
  then flow in the order they were sent; every message ends with its offset, each in the log
  once.
- Never restored: the batches fail at delivery.timeout.ms with `DeliveryTimeoutError` naming
  the look-up's last error, in bounded time.
"""

from __future__ import annotations

import time

import pytest

from raykafka.driver.embedded_broker import EmbeddedBroker, free_port
from raykafka.driver.producer import Producer
from raykafka.wire.errors import DeliveryTimeoutError

pytestmark = [pytest.mark.ray, pytest.mark.broker, pytest.mark.timeout(180)]

PARTITIONS = 4
OUTAGE_S = 3.0


def test_first_message_to_a_topic_rides_an_outage(ray_session, kit, ledger, tmp_path):
    proxy_port = free_port()
    with EmbeddedBroker(advertised_port=proxy_port, log_path=tmp_path / "tansu.log") as broker:
        proxy = kit.FaultProxy(broker.port, port=proxy_port).start()
        bootstrap = f"127.0.0.1:{proxy_port}"
        kit.create_topic(bootstrap, "warm", 1)
        producer = Producer({"bootstrap.servers": bootstrap})
        try:
            producer.send("warm", b"warm-up").result(60)  # the pipeline is up
            kit.create_topic(bootstrap, "fresh", PARTITIONS)  # created now: no actor has its metadata
            proxy.close()  # the outage starts before the topic's first message
            down_until = time.monotonic() + OUTAGE_S
            sent = 0
            while time.monotonic() < down_until:
                for _ in range(20):
                    ledger.send(producer, "fresh", b"v%06d" % sent, key=b"k%02d" % (sent % 13))
                    sent += 1
                time.sleep(0.05)  # a steady rate through the outage
            proxy = kit.FaultProxy(broker.port, port=proxy_port).start()
            for _ in range(20):
                for _ in range(20):
                    ledger.send(producer, "fresh", b"v%06d" % sent, key=b"k%02d" % (sent % 13))
                    sent += 1
                time.sleep(0.05)
            figures = ledger.settle(90)
        finally:
            producer.close(30)
        log = kit.read_back(bootstrap, "fresh", PARTITIONS, len(ledger.values))
        proxy.close()
    failed = [kit.cause_of(e) + ": " + str(e)[:160] for e in ledger.failed.values()]
    assert figures["failed"] == 0, f"{len(failed)} of {figures['sent']} failed, first: {failed[:3]}"
    assert figures["unresolved"] == 0
    assert figures["delivered"] == figures["sent"]
    checked = ledger.check_log(log)
    assert checked["lost"] == 0 and checked["duplicated"] == 0, checked
    assert checked["reordered"] == 0, checked  # idempotence on: the held batches keep their order


def test_topic_never_reachable_fails_at_delivery_timeout(ray_session, kit, ledger, tmp_path):
    delivery_timeout_ms = 4000
    proxy_port = free_port()
    with EmbeddedBroker(advertised_port=proxy_port, log_path=tmp_path / "tansu.log") as broker:
        proxy = kit.FaultProxy(broker.port, port=proxy_port).start()
        bootstrap = f"127.0.0.1:{proxy_port}"
        producer = Producer({"bootstrap.servers": bootstrap, "request.timeout.ms": 3000,
                             "delivery.timeout.ms": delivery_timeout_ms})
        try:
            kit.create_topic(bootstrap, "gone", PARTITIONS)  # after the producer: it has no metadata for it
            proxy.close()  # and never opened again
            started = time.monotonic()
            for i in range(50):
                ledger.send(producer, "gone", b"g%04d" % i, key=b"k%02d" % (i % 7))
            figures = ledger.settle(60)
            elapsed = time.monotonic() - started
        finally:
            producer.close(30)
    assert figures["unresolved"] == 0 and figures["delivered"] == 0, figures
    assert figures["failed"] == 50, figures
    for error in ledger.failed.values():
        assert isinstance(error, DeliveryTimeoutError), repr(error)
        assert "'gone'" in str(error) and "no bootstrap server reachable" in str(error), str(error)
    # not before delivery.timeout.ms; the cause in the text says the pipeline, not the driver's
    # watchdog (request.timeout.ms later, naming no cause), ended them
    assert delivery_timeout_ms / 1000 <= elapsed < delivery_timeout_ms / 1000 + 20, elapsed
