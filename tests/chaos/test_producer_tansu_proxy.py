"""Producer chaos against tansu behind the fault-injecting proxy: tansu advertises the proxy's
port, so every connection the producer makes goes through it; the proxy drops connections right
after forwarding a request, and delays requests, a bounded number of times. Read back with
confluent-kafka (faults off): nothing lost, reordered or duplicated, idempotence on."""

from __future__ import annotations

import time

import proxy as proxy_mod  # tests/chaos/, on the path (conftest.py)
import pytest

from raykafka.driver.embedded_broker import EmbeddedBroker, free_port
from raykafka.driver.producer import Producer

pytestmark = [pytest.mark.ray, pytest.mark.broker, pytest.mark.timeout(600)]


PARTITIONS = 4


@pytest.mark.slow  # 46 s; the default tier keeps dropped connections on the mock cluster and a broker restart on tansu
def test_producer_through_a_dropping_delaying_proxy_loses_nothing(ray_session, chaos_full, ledger, record, kit,
                                                                 tmp_path):
    """tansu behind the proxy (drops ~8% of connections after a forwarded request, delays ~8% of
    requests by 100 ms, at most 40 faults); keyed messages, idempotence on."""
    n = 100_000 if chaos_full else 10_000
    proxy_port = free_port()
    with EmbeddedBroker(advertised_port=proxy_port, log_path=tmp_path / "tansu.log") as broker, \
            proxy_mod.FaultProxy(broker.port, port=proxy_port, drop_rate=0.08, delay_rate=0.08, delay_s=0.1, spare_first=1,
                                 max_faults=40 if not chaos_full else 150, seed=7) as proxy:
        bootstrap = f"127.0.0.1:{proxy_port}"
        proxy.enabled = False
        kit.create_topic(bootstrap, "chaos", PARTITIONS)
        proxy.enabled = True
        config = {"bootstrap.servers": bootstrap, "linger.ms": 2, "batch.size": 2048, "retry.backoff.ms": 50,
                  "request.timeout.ms": 3000, "delivery.timeout.ms": 120_000, "enable.idempotence": True}
        producer = Producer(config, on_delivery=ledger.on_delivery)
        try:
            t0 = time.monotonic()
            for start in range(0, n, 500):
                for i in range(start, min(start + 500, n)):
                    ledger.send(producer, "chaos", b"v%07d" % i, key=b"k%03d" % (i % 89))
                time.sleep(0.02)  # paced, so the faults land all along the stream
            figures = ledger.settle(timeout=240)
            elapsed = time.monotonic() - t0
        finally:
            proxy.enabled = False
            producer.close(60)
        log = kit.read_back(bootstrap, "chaos", PARTITIONS, figures["delivered"])
        checks = ledger.check_log(log)
        injected = {f"proxy/{k}": v for k, v in proxy.faults.items()}
        record(**figures, **checks, faults=injected, actors_killed=[], seconds=round(elapsed, 1),
               callbacks=ledger.callbacks, throughput_msg_s=round(n / elapsed))
    assert figures["unresolved"] == 0
    assert ledger.callbacks == n
    assert figures["delivered"] + figures["failed"] == n
    assert checks["lost"] == 0
    assert checks["duplicated"] == 0
    assert proxy.faults["drop"] > 0 and proxy.faults["delay"] > 0
    assert checks["reordered"] == 0
