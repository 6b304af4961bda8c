"""Ray's metrics API for raykafka's figures: a `wire.stats.Stats` whose records also go to
`ray.util.metrics`, so they reach Ray's Prometheus export (`ray_<name>`) and its dashboard;
and what each recording role counts, each a small class its owner calls once per event
(`ProducerMetrics` for the producer's driver side, `FlusherMetrics` per broker,
`ConsumerMetrics` per consumer process; `Reports` runs a driver object's `stats_cb`), so the hooks in the pipeline stay one line each and the counting lives here.

One `Counter`, `Gauge` or `Histogram` of Ray per declared metric (`wire/stats.py` METRICS) and
process, made on its first record. Ray needs its metrics agent for the export (`ray[default]`,
which starts one per node); without it, recording costs little and the figures stay in each
`Stats` (and reach `stats_cb`).

Called by: the producer's and consumers' driver objects, the Flusher, BrokerConsumer and group
members (`ray_stats(...)`). Calls: `ray.util.metrics`.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import ray
from ray.util import metrics

from ..wire.stats import COUNTER, GAUGE, METRICS, Metric, Stats, StatsReporter, check_stats_cb, stats_reporter

log = logging.getLogger("raykafka.metrics")

_made: dict[str, Any] = {}  # metric name -> its ray.util.metrics object, in this process


def ray_stats(**common_tags: Any) -> Stats:
    """A `Stats` whose records are also handed to Ray's metrics."""
    return Stats(sink=record, **common_tags)


def record(metric: Metric, value: float, tags: dict[str, str]) -> None:
    made = _made.get(metric.name)
    if made is None:
        if not ray.is_initialized():  # a process without Ray (`raykafka consume -g`): figures stay local
            return
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
        if metric.kind == COUNTER:
            return metrics.Counter(metric.name, description=metric.description, tag_keys=metric.tags)
        if metric.kind == GAUGE:
            return metrics.Gauge(metric.name, description=metric.description, tag_keys=metric.tags)
        return metrics.Histogram(metric.name, description=metric.description, boundaries=list(metric.buckets),
                                 tag_keys=metric.tags)
    except Exception as exc:  # Ray refused it: the figures stay local
        log.warning("%s: not exported to Ray's metrics: %s", metric.name, exc)
        return False


def error_name(error: BaseException) -> str:
    """A Kafka error name (MESSAGE_TOO_LARGE) where the error carries one, else its class's name."""
    name = getattr(error, "name", None)
    return name if isinstance(name, str) else type(error).__name__


# ---------------------------------------------------------------------------- producer


class Reports:
    """`stats_cb` for a driver object (Producer, Consumer, ConsumerGroup): checked when the
    object is built, started once its actors are up, and a last report at its close."""

    def __init__(self, name: str, kind: str, config: Any, stats_cb: Any,
                 collect: Callable[[], list[dict[str, Any]]]):
        check_stats_cb(config, stats_cb)  # refused before any actor starts
        self.args = (name, kind, config, stats_cb, collect)
        self.reporter: StatsReporter | None = None

    def start(self) -> None:
        self.reporter = stats_reporter(*self.args)

    def close(self) -> None:
        if self.reporter is not None:
            self.reporter.close()


def snapshots_of(handles: Iterable[Any], owner: str) -> list[dict[str, Any]]:
    """`metrics_snapshot()` of each actor in `handles`; a dead or stuck one is left out (logged)."""
    if not ray.is_initialized():  # shut down under the owner: its actors went with it
        return []
    out = []
    for handle, ref in [(h, h.metrics_snapshot.remote()) for h in handles]:
        try:
            out.append(ray.get(ref, timeout=5))
        except Exception as exc:
            log.info("%s: the statistics of %s were not taken: %s", owner, handle, exc)
    return out


# ---------------------------------------------------------------------------- producer


class ProducerMetrics:
    """The producer's driver side: messages handed on, how they ended, buffer.memory in use and
    the time spent blocked on it, when the first message after a watch began was delivered;
    with `stats_cb`, the reports (its own figures and those of its BrokerWorkers, found by name)."""

    def __init__(self, producer: Any, stats_cb: Any):
        self.producer = producer
        self.stats = ray_stats(client=producer.name)
        self.stats.gauge("raykafka_producer_buffer_bytes", lambda: producer.buffer_in_use)
        self.reports = Reports(producer.name, "producer", producer.config, stats_cb, self.collect)
        self._published = 0.0
        self._watches = itertools.count()
        self._watch_lock = threading.Lock()
        self._awaiting: set[int] = set()  # watches that have seen no delivery yet
        self._first_delivery: dict[int, float] = {}  # watch -> when (time.time()) it saw its first

    def start(self) -> None:
        """Once the pipeline is up: the reports start."""
        self.reports.start()

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
            if n and self._awaiting:
                self._saw_delivery()
        elif n:
            self.stats.count("raykafka_producer_failed_total", n, topic=topic, error=error_name(error))

    def watch_deliveries(self) -> int:
        """Start watching for the next message delivered (any caller's); the token is for
        `first_delivery`. A node writer watches each block, to tell when a write's first message
        was acknowledged (the demo's phases)."""
        with self._watch_lock:
            token = next(self._watches)
            self._awaiting.add(token)
        return token

    def first_delivery(self, token: int) -> float | None:
        """Stop the watch `token`: when (time.time(), as the results thread heard it) the first
        message delivered after it began was; None if none was."""
        with self._watch_lock:
            self._awaiting.discard(token)
            return self._first_delivery.pop(token, None)

    def _saw_delivery(self) -> None:
        now = time.time()
        with self._watch_lock:
            for token in self._awaiting:
                self._first_delivery[token] = now
            self._awaiting.clear()

    def blocked(self, seconds: float) -> None:
        """A send waited this long for room in buffer.memory."""
        self.stats.count("raykafka_producer_blocked_seconds_total", max(seconds, 0.0))

    def collect(self) -> list[dict[str, Any]]:
        """This side's snapshot and each living BrokerWorker's."""
        if not ray.is_initialized():
            return [self.stats.snapshot()]
        prefix = self.producer.pipeline_prefix + "broker_worker"
        handles = []
        for name in ray.util.list_named_actors():
            if name.startswith(prefix):
                try:
                    handles.append(ray.get_actor(name))
                except ValueError:  # gone meanwhile
                    continue
        return [self.stats.snapshot(), *snapshots_of(handles, self.producer.name)]

    def close(self) -> None:
        """The last report: what the producer ended with (before its actors are gone)."""
        self.reports.close()


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


# ---------------------------------------------------------------------------- consumers


class ConsumerMetrics:
    """What one consumer process fetched: a PartitionConsumer or BrokerConsumer of a `Consumer`,
    or a group member (`MemberRuntime`, whose `client` is the group)."""

    def __init__(self, client: str, group: str | None = None):
        self.stats = ray_stats(client=client)
        self.group = group or ""

    async def fetch_timed(self, broker: int, request: Awaitable[Any]) -> Any:
        """`await request` (a Fetch), its time observed."""
        started = time.monotonic()
        response = await request
        self.stats.observe("raykafka_consumer_fetch_latency_seconds", time.monotonic() - started, broker=broker)
        return response

    def fetched(self, topic: str, partition: int, records: int, nbytes: int, lag: int) -> None:
        """A partition's fetched data read: `records` records from `nbytes` bytes; `lag` left."""
        self.stats.count("raykafka_consumer_records_total", records, topic=topic)
        self.stats.count("raykafka_consumer_bytes_total", nbytes, topic=topic)
        self.stats.set("raykafka_consumer_lag", max(lag, 0), topic=topic, partition=partition)

    def rebalanced(self) -> None:
        self.stats.count("raykafka_consumer_rebalances_total", group=self.group)

    def committed(self) -> None:
        self.stats.count("raykafka_consumer_commits_total", group=self.group)

    def snapshot(self) -> dict[str, Any]:
        return self.stats.snapshot()


__all__ = ["METRICS", "ConsumerMetrics", "FlusherMetrics", "ProducerMetrics", "Reports", "error_name",
           "ray_stats", "record", "snapshots_of"]
