"""A broker outage of a few seconds mid-stream: tansu behind the proxy, the proxy's listener shut
(every connection refused, the open ones cut) for ~3 s, then opened again on the same port.
Keyed messages at a steady rate, default config (idempotence on): the batches whose partition
has no reachable leader wait for the metadata to come back, so every message ends with its
offset, none failed with "no bootstrap server reachable"."""

from __future__ import annotations

import time

import pytest

from raykafka.driver.embedded_broker import EmbeddedBroker, free_port
from raykafka.driver.producer import Producer

pytestmark = [pytest.mark.ray, pytest.mark.broker, pytest.mark.timeout(180)]

PARTITIONS = 4
OUTAGE_S = 3.0


def test_producer_rides_a_three_second_outage(ray_session, kit, tmp_path):
    proxy_port = free_port()
    with EmbeddedBroker(advertised_port=proxy_port, log_path=tmp_path / "tansu.log") as broker:
        proxy = kit.FaultProxy(broker.port, port=proxy_port).start()
        bootstrap = f"127.0.0.1:{proxy_port}"
        kit.create_topic(bootstrap, "outage", PARTITIONS)
        producer = Producer({"bootstrap.servers": bootstrap})
        futures = []
        try:
            sent = 0

            def send_some() -> None:
                nonlocal sent
                for _ in range(20):
                    futures.append(producer.send("outage", b"v%06d" % sent, key=b"k%02d" % (sent % 13)))
                    sent += 1
                time.sleep(0.05)  # a steady rate, so messages arrive before, during and after the outage

            producer.send("outage", b"warm-up", key=b"k00").result(60)  # the pipeline is up
            for _ in range(30):
                send_some()
            proxy.close()  # the outage: nothing reachable
            down_until = time.monotonic() + OUTAGE_S
            while time.monotonic() < down_until:
                send_some()
            proxy = kit.FaultProxy(broker.port, port=proxy_port).start()
            for _ in range(30):
                send_some()
            failed, offsets = [], 0
            deadline = time.monotonic() + 60
            for f in futures:
                try:
                    f.result(max(1.0, deadline - time.monotonic()))
                    offsets += 1
                except Exception as exc:  # the cause of each failed message, for the assertion
                    failed.append(kit.cause_of(exc) + ": " + str(exc)[:120])
        finally:
            producer.close(30)
            proxy.close()
    assert failed == [], f"{len(failed)} of {len(futures)} failed, first: {failed[:3]}"
    assert offsets == len(futures)
