"""raykafka's metrics read back from Ray's own Prometheus export (`ray.init(_metrics_export_port=)`,
served by Ray's metrics agent, which comes with `ray[default]`): what a Prometheus server or
Ray's dashboard would scrape, with Ray's prefix (`ray_raykafka_...`)."""

from __future__ import annotations

import importlib.util
import socket
import urllib.request
from collections.abc import Iterator

import pytest

from raykafka.driver.admin import Admin
from raykafka.driver.consumer import Consumer
from raykafka.driver.producer import Producer

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def metrics_port(ray_stopper) -> Iterator[int]:
    """A Ray of this module's own, exporting its metrics on a free port every second."""
    import ray

    if importlib.util.find_spec("prometheus_client") is None or importlib.util.find_spec("aiohttp") is None:
        pytest.skip("Ray's metrics agent needs ray[default] (in the test extra)")
    ray_stopper()  # the run's Ray: this module needs one of its own
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _metrics_export_port=port,
             _system_config={"metrics_report_interval_ms": 1000})
    yield port
    ray.shutdown()


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every `ray_raykafka_*` sample on Ray's Prometheus endpoint: name -> [(labels, value)]."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:  # the agent is not up yet
        return {}
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("ray_raykafka_"):
                out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def exported(port: int, name: str, **labels: str) -> float:
    return sum(v for got, v in scrape(port).get(name, []) if labels.items() <= got.items())


def test_figures_reach_rays_prometheus_export(bootstrap, metrics_port, topic_name, wait_for):
    topic = topic_name("prom")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 2})
    name = f"prom-{topic}"
    with Producer({"bootstrap.servers": bootstrap}, name=name) as producer:
        assert producer.send_batch(topic, [b"m%05d" % i for i in range(5000)]).result(60).ok
        # the driver's figures and its Flushers', while they run
        wait_for(lambda: exported(metrics_port, "ray_raykafka_producer_delivered_total", client=name) == 5000,
                 timeout=60)
        wait_for(lambda: exported(metrics_port, "ray_raykafka_producer_batches_total", client=name) >= 1, timeout=60)
        assert exported(metrics_port, "ray_raykafka_producer_messages_total", client=name, topic=topic) == 5000
        assert exported(metrics_port, "ray_raykafka_producer_ack_latency_seconds_count", client=name) >= 1
    consumer = Consumer({"bootstrap.servers": bootstrap})
    try:
        consumer.assign_topic(topic, "earliest")
        assert sum(b.num_rows for b in consumer.batches(timeout=30, until_end=True)) == 5000
        wait_for(lambda: exported(metrics_port, "ray_raykafka_consumer_records_total", client=consumer.id,
                                  topic=topic) == 5000, timeout=60)
        wait_for(lambda: exported(metrics_port, "ray_raykafka_consumer_fetch_latency_seconds_count") >= 1, timeout=60)
    finally:
        consumer.close()
