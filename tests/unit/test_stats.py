"""wire/stats.py without Ray: counters, gauges and histograms by name and tags, snapshots that
add up across processes, the stats_cb reporter, and `statistics.interval.ms` in the config."""

from __future__ import annotations

import json
import threading

import pytest

from raykafka.wire.config import parse_config
from raykafka.wire.errors import ConfigError
from raykafka.wire.stats import METRICS, Stats, StatsReporter, merge, stats_reporter, total


def test_counts_gauges_histograms_by_tags_and_snapshot_is_json():
    sunk = []
    stats = Stats(sink=lambda m, v, t: sunk.append((m.name, v, t)), client="p1")
    stats.count("raykafka_producer_messages_total", 1000, topic="a")
    stats.count("raykafka_producer_messages_total", 500, topic="a")
    stats.count("raykafka_producer_messages_total", 7, topic="b")
    stats.set("raykafka_producer_requests_in_flight", 3, broker=1)
    stats.observe("raykafka_producer_ack_latency_seconds", 0.003, broker=1)
    stats.observe("raykafka_producer_ack_latency_seconds", 100.0, broker=1)
    held = [42]
    stats.gauge("raykafka_producer_buffer_bytes", lambda: held[0])
    held[0] = 99
    snap = json.loads(json.dumps(stats.snapshot()))
    assert total(snap, "raykafka_producer_messages_total") == 1507
    assert total(snap, "raykafka_producer_messages_total", topic="a") == 1500
    assert total(snap, "raykafka_producer_messages_total", client="p1", topic="b") == 7
    assert total(snap, "raykafka_producer_buffer_bytes") == 99
    (hist,) = snap["raykafka_producer_ack_latency_seconds"]
    assert hist["tags"] == {"client": "p1", "broker": "1"}
    assert hist["value"]["count"] == 2 and hist["value"]["sum"] == pytest.approx(100.003)
    assert hist["value"]["buckets"]["0.005"] == 1 and hist["value"]["buckets"]["+Inf"] == 1
    assert ("raykafka_producer_messages_total", 7, {"client": "p1", "topic": "b"}) in sunk
    assert len(sunk) == 6  # the pulled gauge reaches the sink only when published


def test_an_undeclared_name_or_wrong_kind_is_refused():
    stats = Stats()
    with pytest.raises(KeyError, match="raykafka_nope"):
        stats.count("raykafka_nope")
    with pytest.raises(KeyError, match="not a counter"):
        stats.count("raykafka_producer_requests_in_flight")


def test_merge_adds_processes_up():
    a, b = Stats(client="p"), Stats(client="p")
    a.count("raykafka_producer_retries_total", 2, broker=1)
    b.count("raykafka_producer_retries_total", 3, broker=1)
    b.count("raykafka_producer_retries_total", 4, broker=2)
    a.observe("raykafka_producer_ack_latency_seconds", 0.01, broker=1)
    b.observe("raykafka_producer_ack_latency_seconds", 0.02, broker=1)
    merged = merge([a.snapshot(), b.snapshot()])
    assert total(merged, "raykafka_producer_retries_total", broker=1) == 5
    assert total(merged, "raykafka_producer_retries_total") == 9
    assert total(merged, "raykafka_producer_ack_latency_seconds") == 2


def test_every_metric_is_documented_in_the_metrics_page():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    missing = [name for name in METRICS if f"`{name}`" not in page]
    assert not missing, f"docs/metrics.md's table lacks {missing}"


def test_statistics_interval_is_checked():
    assert parse_config({"bootstrap.servers": "h:1"})["statistics.interval.ms"] == 0
    assert parse_config({"bootstrap.servers": "h:1", "statistics.interval.ms": "1000"})["statistics.interval.ms"] == 1000
    for bad in (-1, 86_400_001, "often", 1.5, True):
        with pytest.raises(ConfigError, match="statistics.interval.ms"):
            parse_config({"bootstrap.servers": "h:1", "statistics.interval.ms": bad})


def test_one_without_the_other_is_refused():
    config = parse_config({"bootstrap.servers": "h:1"})
    with pytest.raises(ConfigError, match="statistics.interval.ms: 0"):
        stats_reporter("p", "producer", config, print, list)
    on = parse_config({"bootstrap.servers": "h:1", "statistics.interval.ms": 100})
    with pytest.raises(ConfigError, match="no stats_cb"):
        stats_reporter("p", "producer", on, None, list)
    with pytest.raises(TypeError, match="stats_cb must be callable"):
        stats_reporter("p", "producer", on, 5, list)
    assert stats_reporter("p", "producer", config, None, list) is None


def test_reporter_calls_back_each_interval_and_at_close_and_survives_a_raising_callback():
    stats = Stats(client="p")
    got: list[dict] = []
    twice = threading.Event()

    def callback(report: dict) -> None:
        got.append(report)
        if len(got) == 1:
            raise RuntimeError("a user's bug")
        twice.set()

    reporter = StatsReporter("p", "producer", 20, lambda: [stats.snapshot()], callback)
    stats.count("raykafka_producer_messages_total", 5, topic="t")
    assert twice.wait(10)
    stats.count("raykafka_producer_messages_total", 5, topic="t")
    reporter.close()
    last = got[-1]
    assert last["name"] == "p" and last["type"] == "producer" and isinstance(last["ts"], int)
    assert total(last["metrics"], "raykafka_producer_messages_total") == 10
    json.dumps(last)
    n = len(got)
    reporter.close()  # once only
    assert len(got) == n
