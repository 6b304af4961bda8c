"""Ray's metrics API for raykafka's figures: a `wire.stats.Stats` whose records also go to
`ray.util.metrics`, so they reach Ray's Prometheus export (`ray_<name>`) and its dashboard;
and what each recording role counts, each a small class its owner calls once per event
(`ProducerMetrics` for the producer's driver side, `FlusherMetrics` per broker; consumers'
below), so the hooks in the pipeline stay one line each and the counting lives here.

One `Counter`, `Gauge` or `Histogram` of Ray per declared metric (`wire/stats.py` METRICS) and
process, made on its first record. Ray needs its metrics agent for the export (`ray[default]`,
which starts one per node); without it, recording costs little and the figures stay in each
`Stats` (and reach `stats_cb`).

Called by: the producer's and consumers' driver objects, the Flusher, BrokerConsumer and group
members (`ray_stats(...)`). Calls: `ray.util.metrics`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from ..wire.stats import COUNTER, GAUGE, METRICS, Metric, Stats, StatsReporter, check_stats_cb, stats_reporter

log = logging.getLogger("raykafka.metrics")

_made: dict[str, Any] = {}  # metric name -> its ray.util.metrics object, in this process


def ray_stats(**common_tags: Any) -> Stats:
    """A `Stats` whose records are also handed to Ray's metrics."""
    return Stats(sink=record, **common_tags)


def record(metric: Metric, value: float, tags: dict[str, str]) -> None:
    made = _made.get(metric.name)
    if made is None:
        made = _made[metric.name] = _make(metric)
    if made is False:
        return
    if metric.kind == COUNTER:
        made.inc(value, tags=tags)
    elif metric.kind == GAUGE:
        made.set(value, tags=tags)
    else:
        made.observe(value, tags=tags)


def _make(metric: Metric) -> Any:
    try:
        from ray.util import metrics

        if metric.kind == COUNTER:
            return metrics.Counter(metric.name, description=metric.description, tag_keys=metric.tags)
        if metric.kind == GAUGE:
            return metrics.Gauge(metric.name, description=metric.description, tag_keys=metric.tags)
        return metrics.Histogram(metric.name, description=metric.description, boundaries=list(metric.buckets),
                                 tag_keys=metric.tags)
    except Exception as exc:  # e.g. Ray not initialized in this process: keep the figures local
        log.warning("%s: not exported to Ray's metrics: %s", metric.name, exc)
        return False


def error_name(error: BaseException) -> str:
    """A Kafka error name (MESSAGE_TOO_LARGE) where the error carries one, else its class's name."""
    name = getattr(error, "name", None)
    return name if isinstance(name, str) else type(error).__name__


# ---------------------------------------------------------------------------- producer


class ProducerMetrics:
    """The producer's driver side: messages handed on, how they ended, buffer.memory in use and
    the time spent blocked on it; with `stats_cb`, the reports (its own figures and those of its
    Flushers, asked by name)."""

    def __init__(self, producer: Any, stats_cb: Any):
        self.producer = producer
        self.stats = ray_stats(client=producer.name)
        self.stats.gauge("raykafka_producer_buffer_bytes", lambda: producer._unresolved_bytes)
        self.reporter: StatsReporter | None = None
        self.stats_cb = stats_cb
        check_stats_cb(producer.config, stats_cb)  # refused before any actor starts
        self._published = 0.0

    def start(self) -> None:
        """Once the pipeline is up: the reports start."""
        self.reporter = stats_reporter(self.producer.name, "producer", self.producer.config, self.stats_cb,
                                       self.collect)

    def handed(self, batches: Iterable[Any]) -> None:
        """MessageBatches handed to the pipeline (the sender thread)."""
        for batch in batches:
            self.stats.count("raykafka_producer_messages_total", len(batch.ids), topic=batch.topic)
            self.stats.count("raykafka_producer_bytes_total", batch.nbytes, topic=batch.topic)
        now = time.monotonic()
        if now - self._published > 1.0:  # the pulled gauge, for Ray, about once a second
            self._published = now
            self.stats.publish()

    def resolved(self, topic: str, n: int, error: BaseException | None) -> None:
        """`n` messages of `topic` ended (the results thread; one call per reported batch)."""
        if error is None:
            self.stats.count("raykafka_producer_delivered_total", n, topic=topic)
        elif n:
            self.stats.count("raykafka_producer_failed_total", n, topic=topic, error=error_name(error))

    def blocked(self, seconds: float) -> None:
        """A send waited this long for room in buffer.memory."""
        self.stats.count("raykafka_producer_blocked_seconds_total", max(seconds, 0.0))

    def collect(self) -> list[dict[str, Any]]:
        """This side's snapshot and each living Flusher's."""
        import ray

        snapshots = [self.stats.snapshot()]
        if not ray.is_initialized():  # shut down under the producer: its actors went with it
            return snapshots
        prefix = self.producer.name + "/flusher"
        refs = []
        for name in ray.util.list_named_actors():
            if name.startswith(prefix):
                try:
                    refs.append(ray.get_actor(name).stats.remote())
                except ValueError:  # gone meanwhile
                    continue
        for ref in refs:
            try:
                snapshots.append(ray.get(ref, timeout=5))
            except Exception as exc:  # a dead or stuck Flusher: the others are reported
                log.info("%s: a flusher's statistics were not taken: %s", self.producer.name, exc)
        return snapshots

    def close(self) -> None:
        """The last report: what the producer ended with (before its actors are gone)."""
        if self.reporter is not None:
            self.reporter.close()


class FlusherMetrics:
    """One broker's Produce requests: batches and bytes sent, requests in flight, the broker's
    error answers by name, retries, and each acknowledged batch's latency from its send."""

    def __init__(self, client: str, node_id: int):
        self.stats = ray_stats(client=client, broker=node_id)
        self.in_flight = 0

    def request_sent(self, encoded: list[tuple[Any, tuple]]) -> None:
        """A Produce request of `encoded` (batch, record batch parts) is on the wire."""
        self.in_flight += 1
        self.stats.count("raykafka_producer_requests_total")
        self.stats.count("raykafka_producer_batches_total", len(encoded))
        self.stats.count("raykafka_producer_request_bytes_total",
                         sum(len(part) for _, records in encoded for part in records))
        self.stats.set("raykafka_producer_requests_in_flight", self.in_flight)

    def request_answered(self) -> None:
        """The oldest request in flight has its answer (or its failure)."""
        self.in_flight -= 1
        self.stats.set("raykafka_producer_requests_in_flight", self.in_flight)

    def broker_error(self, error: BaseException) -> None:
        self.stats.count("raykafka_producer_errors_total", error=error_name(error))

    def retried(self, batch: Any) -> None:
        if not batch.is_control:
            self.stats.count("raykafka_producer_retries_total", len(batch.ids))

    def acked(self, batch: Any) -> None:
        if batch.created_ms:
            self.stats.observe("raykafka_producer_ack_latency_seconds",
                               max(time.time() * 1000 - batch.created_ms, 0.0) / 1000)


__all__ = ["METRICS", "FlusherMetrics", "ProducerMetrics", "error_name", "ray_stats", "record"]
