"""Named counters, gauges and histograms, and the periodic statistics callback, without Ray.

Every metric raykafka records is declared once, in `METRICS` (its name, kind, unit, tags and
meaning; docs/metrics.md's table lists the same). A `Stats` holds one process's figures: the
producer's driver side, a Flusher, a consumer's driver side, a group member. Each records into
its own `Stats` at most a few calls per batch or per request, never per message. A `Stats` may
have a `sink`, called with every record as well: `actors/metrics.py` gives one that hands them
to Ray's metrics API (`ray.util.metrics`), so they reach Ray's Prometheus export.

`snapshot()` is a JSON-able dict of one `Stats`; `merge` adds snapshots of several processes up
(counters, gauges and histograms summed per name and tags), and `total` reads a figure from one.
`StatsReporter` calls a user's `stats_cb` every `statistics.interval.ms` with a merged snapshot,
as librdkafka does, and once more as its owner closes.

Called by: `driver/producer.py`, `driver/consumer.py`, `driver/consumer_group.py` (a `Stats`
and a `StatsReporter` each), the Flusher, BrokerConsumer and group members (a `Stats` each).
Calls: nothing of ours.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("raykafka.stats")

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"
# latency bounds in seconds: from a loopback round trip to a request timeout
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str  # COUNTER, GAUGE or HISTOGRAM
    unit: str
    tags: tuple[str, ...]
    description: str
    buckets: tuple[float, ...] = ()


def _declare(*metrics: Metric) -> dict[str, Metric]:
    return {m.name: m for m in metrics}


# Every metric, once. Prometheus (through Ray) shows each with Ray's prefix: `ray_<name>`.
METRICS: dict[str, Metric] = _declare(
    # producer, driver side: what `send` / `send_batch` hand to the pipeline and how it ends
    Metric("raykafka_producer_messages_total", COUNTER, "messages", ("client", "topic"),
           "messages handed to the producer's pipeline"),
    Metric("raykafka_producer_bytes_total", COUNTER, "bytes", ("client", "topic"),
           "bytes of those messages (key, value, headers and record overhead)"),
    Metric("raykafka_producer_delivered_total", COUNTER, "messages", ("client", "topic"),
           "messages acknowledged by the broker"),
    Metric("raykafka_producer_failed_total", COUNTER, "messages", ("client", "topic", "error"),
           "messages that ended in an error, by the error's name (a Kafka error name such as "
           "MESSAGE_TOO_LARGE, else the exception's class)"),
    Metric("raykafka_producer_buffer_bytes", GAUGE, "bytes", ("client",),
           "buffer.memory in use: bytes sent and not yet resolved"),
    Metric("raykafka_producer_blocked_seconds_total", COUNTER, "seconds", ("client",),
           "time send and send_batch spent waiting for room in buffer.memory"),
    # producer, per broker (its Flusher): requests and what the broker answered
    Metric("raykafka_producer_batches_total", COUNTER, "batches", ("client", "broker"),
           "record batches sent in Produce requests"),
    Metric("raykafka_producer_requests_total", COUNTER, "requests", ("client", "broker"),
           "Produce requests sent"),
    Metric("raykafka_producer_request_bytes_total", COUNTER, "bytes", ("client", "broker"),
           "record batch bytes sent, as encoded (compressed) on the wire"),
    Metric("raykafka_producer_requests_in_flight", GAUGE, "requests", ("client", "broker"),
           "Produce requests sent and not yet answered"),
    Metric("raykafka_producer_retries_total", COUNTER, "messages", ("client", "broker"),
           "messages sent round the retry loop (a retriable error, a lost connection, a muted partition)"),
    Metric("raykafka_producer_errors_total", COUNTER, "batches", ("client", "broker", "error"),
           "batches the broker answered with an error, retried or not, by Kafka error name"),
    Metric("raykafka_producer_ack_latency_seconds", HISTOGRAM, "seconds", ("client", "broker"),
           "per batch: from the first message's send to the broker's acknowledgement", LATENCY_BUCKETS),
    # consumer: partition consumers and broker consumers (Consumer) or group members (ConsumerGroup)
    Metric("raykafka_consumer_records_total", COUNTER, "records", ("client", "topic"),
           "records fetched and handed out"),
    Metric("raykafka_consumer_bytes_total", COUNTER, "bytes", ("client", "topic"),
           "record batch bytes fetched, as they came off the wire"),
    Metric("raykafka_consumer_fetch_latency_seconds", HISTOGRAM, "seconds", ("client", "broker"),
           "Fetch request to response (a long poll waits up to fetch.max.wait.ms)", LATENCY_BUCKETS),
    Metric("raykafka_consumer_lag", GAUGE, "records", ("client", "topic", "partition"),
           "high watermark minus the next offset to read, as of the last fetch"),
    Metric("raykafka_consumer_rebalances_total", COUNTER, "rebalances", ("client", "group"),
           "generations joined (a JoinGroup and SyncGroup that completed)"),
    Metric("raykafka_consumer_commits_total", COUNTER, "commits", ("client", "group"),
           "OffsetCommit requests the coordinator accepted"),
)

Sink = Callable[[Metric, float, dict[str, str]], None]


class Stats:
    """One process's figures, by metric name and tags. Not thread-safe on its own beyond what
    the GIL gives one dict update; each owner records from one thread or one event loop."""

    def __init__(self, sink: Sink | None = None, **common_tags: str):
        self.sink = sink
        self.common = {k: str(v) for k, v in common_tags.items()}
        self.values: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
        self.pulled: dict[tuple[str, tuple[tuple[str, str], ...]], Callable[[], float]] = {}

    def count(self, name: str, n: float = 1, **tags: Any) -> None:
        """Add `n` to counter `name`."""
        metric, key, tags = self._key(name, COUNTER, tags)
        self.values[key] = self.values.get(key, 0) + n
        if self.sink is not None and n > 0:
            self.sink(metric, n, tags)

    def set(self, name: str, value: float, **tags: Any) -> None:
        """Gauge `name` is `value` now."""
        metric, key, tags = self._key(name, GAUGE, tags)
        self.values[key] = value
        if self.sink is not None:
            self.sink(metric, value, tags)

    def gauge(self, name: str, read: Callable[[], float], **tags: Any) -> None:
        """Gauge `name` is whatever `read()` returns when a snapshot is taken (and `publish` runs)."""
        _, key, _ = self._key(name, GAUGE, tags)
        self.pulled[key] = read

    def observe(self, name: str, value: float, **tags: Any) -> None:
        """One observation of histogram `name`."""
        metric, key, tags = self._key(name, HISTOGRAM, tags)
        hist = self.values.get(key)
        if hist is None:
            hist = self.values[key] = [0, 0.0, [0] * (len(metric.buckets) + 1)]
        hist[0] += 1
        hist[1] += value
        hist[2][bisect.bisect_left(metric.buckets, value)] += 1
        if self.sink is not None:
            self.sink(metric, value, tags)

    def publish(self) -> None:
        """Read the pulled gauges and hand them to the sink (called on the owner's own rhythm)."""
        for (name, tags), read in list(self.pulled.items()):
            value = read()
            self.values[(name, tags)] = value
            if self.sink is not None:
                self.sink(METRICS[name], value, dict(tags))

    def snapshot(self) -> dict[str, Any]:
        """{name: [{"tags": {...}, "value": v}]}: a counter's or gauge's value is a number, a
        histogram's {"count", "sum", "buckets": {upper bound or "+Inf": count in that bucket}}."""
        for key, read in list(self.pulled.items()):
            self.values[key] = read()
        out: dict[str, list[dict[str, Any]]] = {}
        for (name, tags), value in list(self.values.items()):
            metric = METRICS[name]
            if metric.kind == HISTOGRAM:
                bounds = [str(b) for b in metric.buckets] + ["+Inf"]
                value = {"count": value[0], "sum": value[1], "buckets": dict(zip(bounds, value[2], strict=True))}
            out.setdefault(name, []).append({"tags": dict(tags), "value": value})
        return out

    def _key(self, name: str, kind: str, tags: Mapping[str, Any]) -> tuple[Metric, tuple, dict[str, str]]:
        metric = METRICS.get(name)
        if metric is None or metric.kind != kind:
            raise KeyError(f"{name}: not a {kind} declared in wire/stats.py METRICS")
        full = {**self.common, **{k: str(v) for k, v in tags.items()}}
        return metric, (name, tuple(sorted(full.items()))), full


def merge(snapshots: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Several processes' snapshots as one: the figures of equal name and tags added up."""
    sums: dict[str, dict[tuple, Any]] = {}
    for snap in snapshots:
        for name, series in snap.items():
            into = sums.setdefault(name, {})
            for item in series:
                key = tuple(sorted(item["tags"].items()))
                value, have = item["value"], into.get(key)
                if have is None:
                    into[key] = _copy(value)
                elif isinstance(value, dict):
                    have["count"] += value["count"]
                    have["sum"] += value["sum"]
                    for bound, n in value["buckets"].items():
                        have["buckets"][bound] = have["buckets"].get(bound, 0) + n
                else:
                    into[key] = have + value
    return {name: [{"tags": dict(key), "value": v} for key, v in into.items()] for name, into in sums.items()}


def total(snapshot: Mapping[str, Any], name: str, **tags: Any) -> float:
    """The sum of `name` over the series whose tags include `tags` (a histogram: its count)."""
    want = {k: str(v) for k, v in tags.items()}
    out: float = 0
    for item in snapshot.get(name, ()):
        if want.items() <= item["tags"].items():
            value = item["value"]
            out += value["count"] if isinstance(value, dict) else value
    return out


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {"count": value["count"], "sum": value["sum"], "buckets": dict(value["buckets"])}
    return value


class StatsReporter:
    """Calls `callback(stats)` every `interval_ms` from a thread of its own, and once more at
    `close()`, with `{"name", "type", "ts" (ms since the epoch), "metrics": merged snapshot}`:
    librdkafka's `stats_cb` every `statistics.interval.ms`, as a dict rather than JSON text.
    `collect()` gathers the snapshots (the driver's own and its actors'). A callback or a
    collection that raises is logged, and the next interval comes all the same."""

    def __init__(self, name: str, kind: str, interval_ms: int, collect: Callable[[], list[Mapping[str, Any]]],
                 callback: Callable[[dict[str, Any]], Any]):
        self.name, self.kind = name, kind
        self.interval = interval_ms / 1000
        self.collect, self.callback = collect, callback
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one report at a time: the thread's and close's
        self._thread = threading.Thread(target=self._run, name=f"{name}-stats", daemon=True)
        self._thread.start()

    def report(self) -> None:
        with self._lock:
            try:
                stats = {"name": self.name, "type": self.kind, "ts": int(time.time() * 1000),
                         "metrics": merge(self.collect())}
            except Exception:
                log.exception("%s: statistics could not be collected", self.name)
                return
            try:
                self.callback(stats)
            except Exception:
                log.exception("%s: stats_cb raised", self.name)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.report()

    def close(self) -> None:
        """Stop the thread and report the last figures once more (the figures at close)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(self.interval + 5)
        self.report()


def check_stats_cb(config: Mapping[str, Any], stats_cb: Any) -> None:
    """A ConfigError when `statistics.interval.ms` and `stats_cb` come one without the other
    (neither would be used); a TypeError for a stats_cb that is not callable."""
    from .errors import ConfigError

    interval = config["statistics.interval.ms"]
    if stats_cb is not None and not callable(stats_cb):
        raise TypeError(f"stats_cb must be callable as stats_cb(stats: dict), not {type(stats_cb).__name__}")
    if stats_cb is not None and not interval:
        raise ConfigError("statistics.interval.ms: 0 (off), but a stats_cb was given: set it to how often "
                          "(ms) to call it")
    if interval and stats_cb is None:
        raise ConfigError(f"statistics.interval.ms: {interval}, but no stats_cb was given to call")


def stats_reporter(name: str, kind: str, config: Mapping[str, Any], stats_cb: Any,
                   collect: Callable[[], list[Mapping[str, Any]]]) -> StatsReporter | None:
    """The reporter (started) an object with `config` and `stats_cb` runs, or None when
    `statistics.interval.ms` is 0; checked as `check_stats_cb` does."""
    check_stats_cb(config, stats_cb)
    interval = config["statistics.interval.ms"]
    return StatsReporter(name, kind, interval, collect, stats_cb) if interval else None
