"""LocalPipeline: a producer's stages in this process, on one asyncio loop, without Ray: what
`raykafka produce` runs when there is no Ray cluster to join (starting a whole local Ray for a
terminal command costs seconds).

Called by `app/cli_produce.py` (`send_batch`, `take_outcomes`, `wait_outcomes`, `close`), from
one thread; so are `tests/producer/local_producer.py` (the mock-cluster scenarios) and the Spark
write's experiment `benchmarks/in_process_writer.py`. Calls the Ray-free state the pipeline's
actors are thin shells over, so that every decision is the pipeline's own:
- a `TopicPartitioner` per topic (actors/partition_dispatcher.py): which partition, the
  Producer's partitioner, so keyed messages land where a `Producer` puts them;
- a `LeaderDispatcherState` per partition (actors/leader_dispatcher.py): the leader
  (`find_leader`), Sarama's retry levels and chasers, batches held while there is no leader,
  and with idempotence the sequence numbers (the producer id from InitProducerId, as the
  TopicDispatcher asks it);
- a `BrokerProducer` per broker (actors/broker_worker.py): `AggregatorState` (`linger.ms`,
  `batch.size`) and its `Flusher` over `FlusherState` (encoding, requests in flight, the
  produce-response table, retries counted against `retries` and `delivery.timeout.ms`);
- a `RetryQueue` (actors/retry_queue.py) for `retry.backoff.ms`, and one `Mailbox`
  (actors/producer_results.py) where every outcome goes.
The Flushers run on a `LoopThread` (wire/loop.py) with the metadata look-ups. The state
machines run under one lock, one call at a time, as the LeaderDispatcher actor runs them: the
caller's new messages, the retries a forwarding thread takes from the `RetryQueue`, and the
actor's two timers (`PartitionTimers`): the held batches tried again, and the new batches
waiting behind a retry failed at their delivery.timeout.ms. In place of the RetryHandler, the
Flushers get `LocalRetryHandler`: `retry` puts into the queue, `unref` has nothing to release.

Every message ends once, in the mailbox: written at its offset, or failed with its cause.
`buffer.memory` bounds what is sent and not yet ended: `send_batch` waits for room.

What it does not do, unlike a `Producer`: transactions (`transactional.id` takes the Ray
path); healing (no actor can die; a lost connection is retried by the Flusher as in the
pipeline); a topic's look-up is asked once per `send_batch` until it answers, and one that
fails fails that batch's messages with the cause at once, rather than holding them up to
`delivery.timeout.ms` (a terminal command says a wrong address or a missing topic at once);
topics are not looked up again every `metadata.max.age.ms`; no Ray metrics, no
`on_delivery` callbacks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..actors.batch import MessageBatch
from ..actors.broker_worker import BrokerProducer
from ..actors.hold import HoldBackoff, Wake
from ..actors.leader_dispatcher import LeaderDispatcherState, PartitionTimers, fail_waiting, find_leader
from ..actors.options import PipelineContext
from ..actors.partition_dispatcher import TopicPartitioner
from ..actors.producer_results import Mailbox, Outcome, report_failed
from ..actors.retry_queue import RetryQueue
from ..wire.cluster import Cluster
from ..wire.config import parse_config
from ..wire.errors import KafkaError
from ..wire.loop import LoopThread
from ..wire.producer_id import NO_PRODUCER_ID, init_producer_id
from ..wire.serde import get_serializer, serialize_many
from .producer_input import (
    batch_columns,
    check_lengths,
    oversized,
    packed,
    partition_column,
    raw_arrow,
    record_sizes,
    timestamp_column,
    too_large_error,
)

log = logging.getLogger("raykafka.producer.local")

PREFIX = "raykafka-local/"  # the name prefix of the in-process pipeline (its log lines, its metrics)
CLOSE_GRACE = 5.0  # s past request.timeout.ms a broker gets to answer its last requests at close


class LocalRetryHandler:
    """What a Flusher asks of the RetryHandler, in this process: `retry.remote(batches)` puts
    them into the pipeline's `RetryQueue` (returning None: nothing to await),
    `drop_retry_writer.remote()` has no broker reference to release."""

    class _Call:
        def __init__(self, fn: Any):
            self.remote = fn

    def __init__(self, queue: RetryQueue):
        self.retry = self._Call(lambda batches: queue.put(batches))
        self.drop_retry_writer = self._Call(self._nothing)

    @staticmethod
    async def _nothing(*_: Any) -> None:
        return None


class LocalRoute:
    """One partition's `LeaderBackend` (actors/leader_dispatcher.py) in this process: its
    leader's `BrokerProducer`, metadata and producer ids through the pipeline's cluster."""

    def __init__(self, pipeline: LocalPipeline, topic: str, partition: int):
        self.pipeline = pipeline
        self.topic = topic
        self.partition = partition
        self.broker: BrokerProducer | None = None

    def update_leader(self) -> None:
        p = self.pipeline
        leader = find_leader(p.loop, p.cluster, self.topic, self.partition, p.ctx.timeout)
        self.broker = p.broker(leader.node_id, leader.host, leader.port)

    def new_producer_id(self) -> tuple[int, int]:
        return self.pipeline.loop.run(init_producer_id(self.pipeline.cluster), self.pipeline.ctx.timeout)

    def first_unresolved(self, producer_id: int, numbering: int) -> int:
        return self.pipeline.mailbox.first_unresolved(self.topic, self.partition, producer_id, numbering)

    def send(self, batch: MessageBatch) -> None:
        self.pipeline.outbox.append((self.broker, batch))

    def abandon(self) -> None:
        self.broker = None  # the broker stays, for the partitions it still leads, until close

    def return_errors(self, batches: list[MessageBatch], error: Exception) -> None:
        for batch in batches:
            batch.partition = self.partition
        report_failed(self.pipeline.mailbox.report, batches, error)


class LocalPipeline:
    """The producer's stages in this process (see the module's docstring)."""

    def __init__(self, config: Mapping[str, Any]):
        self.config = parse_config(config, role="producer")
        if self.config["transactional.id"] is not None:
            raise KafkaError("transactional.id: the in-process pipeline has no transactions")
        self.key_serializer = get_serializer(self.config["key.serializer"])
        self.raw_arrow = raw_arrow(self.config)
        self.value_serializer = get_serializer(self.config["value.serializer"])
        self.buffer_memory = self.config["buffer.memory"]
        self.retries = RetryQueue(self.config["retry.backoff.ms"] / 1000)
        self.ctx = PipelineContext(self.config, PREFIX, retry_handler=LocalRetryHandler(self.retries),
                                   warm_up=False)
        self.mailbox = Mailbox(notes=False)  # no heal here: no notes to keep
        self.loop = LoopThread("raykafka-local-pipeline")
        self.cluster = Cluster(self.config)
        self.lock = threading.RLock()  # the state machines, one call at a time
        self.topics: dict[str, TopicPartitioner] = {}
        self.partitions: dict[tuple[str, int], LeaderDispatcherState] = {}
        self.brokers: dict[int, BrokerProducer] = {}
        self.outbox: list[tuple[BrokerProducer, MessageBatch]] = []  # sends of the state machines' current call
        # the held batches' next try, and the deadline of new batches waiting behind a retry
        self.timers = PartitionTimers(HoldBackoff(self.config["retry.backoff.ms"]),
                                      Wake(lambda: self._retry_held), Wake(lambda: self._expire_waiting))
        self.next_id = 0
        self.ended = 0
        self.buffered = 0  # bytes sent and not yet ended
        self.chunks: dict[int, list[int]] = {}  # first id of each send_batch -> [messages not ended, bytes]
        self.starts: list[int] = []  # the first id of every send_batch, in order
        self.closed = False
        try:
            self.producer_id, self.producer_epoch = NO_PRODUCER_ID
            if self.config["enable.idempotence"]:
                self.producer_id, self.producer_epoch = self.loop.run(init_producer_id(self.cluster),
                                                                      2 * self.ctx.timeout)
        except BaseException:
            self._stop()
            raise
        self.forwarder = threading.Thread(target=self._forward_retries, name="raykafka-local-retries", daemon=True)
        self.forwarder.start()

    # -- new messages ----------------------------------------------------------------

    def send_batch(self, topic: str, values: Any, keys: Any = None, partitions: Any = None, *,
                   headers: Any = None, timestamps: Any = None) -> list[Outcome]:
        """Hand these messages on, once `buffer.memory` has room for them (waiting as long as
        that takes); the outcomes taken while waiting. Every message ends in the outcomes of this
        or a later call, or of `wait_outcomes`.

        The columns are a `Producer.send_batch`'s (`batch_columns`): lists, or a pyarrow table
        with Kafka sink columns; one topic a call (a `topic` column is refused). A column that
        is wrong is raised before any of its messages is counted."""
        columns = batch_columns(values, keys, headers, partitions, timestamps, self.raw_arrow)
        values, keys, headers, partitions, timestamps, topics = columns
        if topics is not None:
            raise ValueError("the in-process pipeline takes one topic a send_batch: give topic, not a topic column")
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, not {topic!r}")
        n = len(values)
        check_lengths(n, keys, headers, partitions, timestamps)
        if n == 0:
            return []
        values = packed(serialize_many(self.value_serializer, values, "values"))
        if keys is not None:
            keys = packed(serialize_many(self.key_serializer, keys, "keys"))
        sizes = record_sizes(values, keys, headers)
        total = int(sizes.sum())
        now_ms = int(time.time() * 1000)
        stamps = now_ms if timestamps is None else timestamp_column(timestamps, now_ms)
        explicit = None if partitions is None else partition_column(partitions)
        taken: list[Outcome] = []
        while self.buffered and self.buffered + total > self.buffer_memory:
            taken += self.wait_outcomes(self.ctx.timeout)
        start, self.next_id = self.next_id, self.next_id + n
        self.chunks[start] = [n, total]
        self.starts.append(start)
        self.buffered += total
        batch = MessageBatch(topic=topic, ids=range(start, start + n), values=values, keys=keys, timestamps=stamps,
                             headers=headers, partitions=explicit, created_ms=now_ms, nbytes=total)
        bad = oversized(sizes, self.config["max.request.size"])
        if bad.any():  # failed here alone, as a Producer fails them
            self.mailbox.report([Outcome.failed(batch.take(np.flatnonzero(bad).tolist()).ids,
                                                too_large_error(self.config["max.request.size"]), topic)])
            keep = np.flatnonzero(~bad)
            if not len(keep):
                return taken + self.take_outcomes()
            batch = batch.take(keep.tolist())
        partitioner = self._partitioner(topic, batch)
        if partitioner is not None:
            with self.lock:
                for partition, part in partitioner.partition(batch, self.mailbox.report):
                    self._state(topic, partition).dispatch(part)
                self._send_outbox()
                self._arm_timer()
        return taken + self.take_outcomes()

    def _partitioner(self, topic: str, batch: MessageBatch) -> TopicPartitioner | None:
        """The topic's partitioner, looked up on its first messages; None when the look-up
        failed (the batch's messages failed with its cause)."""
        partitioner = self.topics.get(topic)
        if partitioner is None:
            try:
                info = self.loop.run(self.cluster.topic(topic), self.ctx.timeout)
            except Exception as exc:  # UnknownTopicError, no broker reachable, a timeout
                error = exc if isinstance(exc, KafkaError) else KafkaError(f"metadata for {topic!r}: {exc}")
                self.mailbox.report([Outcome.failed(batch.ids, error, topic)])
                return None
            partitioner = self.topics[topic] = TopicPartitioner(
                topic, len(info.partitions), self.config["partitioner"], self.config["sticky.partitioning.linger.ms"])
        return partitioner

    # -- outcomes --------------------------------------------------------------------

    def take_outcomes(self) -> list[Outcome]:
        """The outcomes reported since the last take; their bytes leave `buffer.memory`."""
        return self._settle(self.mailbox.take().outcomes)

    def wait_outcomes(self, timeout: float) -> list[Outcome]:
        """`take_outcomes`, after waiting up to `timeout` s for the first."""
        return self._settle(self.mailbox.poll(timeout).outcomes)

    def pending(self) -> int:
        """Messages handed on and not ended yet."""
        return self.next_id - self.ended

    def _settle(self, outcomes: list[Outcome]) -> list[Outcome]:
        if not outcomes:
            return outcomes
        ids = np.concatenate([np.asarray(o.ids, dtype=np.int64) for o in outcomes])
        self.ended += len(ids)
        starts = np.asarray(self.starts, dtype=np.int64)
        which = np.searchsorted(starts, ids, side="right") - 1
        for index, count in zip(*np.unique(which, return_counts=True), strict=True):
            start = int(starts[index])
            chunk = self.chunks[start]
            chunk[0] -= int(count)
            if chunk[0] <= 0:
                self.buffered -= chunk[1]
                del self.chunks[start]
        if len(self.starts) > 2 * len(self.chunks) + 64:  # forget the ended ones
            self.starts = [s for s in self.starts if s in self.chunks]
        return outcomes

    # -- the state machines' calls ------------------------------------------------------

    def broker(self, node_id: int, host: str, port: int) -> BrokerProducer:
        """The broker's `BrokerProducer`, made on the loop the first time it is led to."""
        broker = self.brokers.get(node_id)
        if broker is None:
            async def make() -> BrokerProducer:
                return BrokerProducer(self.ctx, node_id, host, port, self.mailbox)

            broker = self.brokers[node_id] = self.loop.run(make(), self.ctx.timeout)
        return broker

    def _state(self, topic: str, partition: int) -> LeaderDispatcherState:
        state = self.partitions.get((topic, partition))
        if state is None:
            state = self.partitions[(topic, partition)] = LeaderDispatcherState(
                topic, partition, LocalRoute(self, topic, partition), producer_id=self.producer_id,
                producer_epoch=self.producer_epoch, delivery_timeout_ms=self.config["delivery.timeout.ms"])
        return state

    def _send_outbox(self) -> None:
        """What the state machines sent in this call, to each broker in order, one `add` per
        broker (on the loop, in the order they are called: a partition's order holds)."""
        pending, self.outbox = self.outbox, []
        calls: dict[int, tuple[BrokerProducer, list[MessageBatch]]] = {}
        for broker, batch in pending:
            calls.setdefault(id(broker), (broker, []))[1].append(batch)
        for broker, batches in calls.values():
            self.loop.loop.call_soon_threadsafe(broker.add, batches)

    def _forward_retries(self) -> None:
        """The forwarding thread: each retry, once its `retry.backoff.ms` is out, back to its
        partition's state machine (the RetryHandler's forwarding, in this process)."""
        while (batches := self.retries.take()) is not None:
            try:
                with self.lock:
                    for batch in batches:
                        self._state(batch.topic, batch.partition).dispatch(batch)
                    self._send_outbox()
                    self._arm_timer()
            except Exception as exc:  # a bug: the retries fail with why, nothing is forgotten
                log.exception("%s retries could not be forwarded", PREFIX)
                report_failed(self.mailbox.report, batches, KafkaError(f"retry not forwarded: {exc}"))

    def _retry_held(self) -> None:
        """The timer: try the leaders of the partitions holding batches."""
        with self.lock:
            self.timers.held.fired()
            if self.closed:
                return
            self.timers.retry_held(self.partitions.values(), time.time() * 1000)
            self._send_outbox()
            self._arm_timer()

    def _expire_waiting(self) -> None:
        """The deadline timer: fail the new batches that waited behind a retry past their
        delivery.timeout.ms."""
        with self.lock:
            self.timers.deadline.fired()
            if self.closed:
                return
            self.timers.expire_waiting(self.partitions.values(), time.time() * 1000)
            self._arm_timer()

    def _arm_timer(self) -> None:
        if not self.closed:
            self.timers.arm(self.partitions.values(), time.time() * 1000)

    # -- the end -----------------------------------------------------------------------

    def close(self) -> None:
        """Flush every broker and shut its Flusher down after its last response, then stop.
        Messages not ended by then (close before every outcome came) fail as not delivered."""
        with self.lock:
            self.closed = True
            self.timers.cancel()
            fail_waiting(self.partitions.values())
        try:
            for broker in self.brokers.values():
                self.loop.run(broker.close(), self.ctx.timeout + CLOSE_GRACE)
        finally:
            self._stop()

    def _stop(self) -> None:
        self.retries.close()
        try:
            self.loop.run(self.cluster.close(), CLOSE_GRACE)
        except Exception as exc:  # closing anyway
            log.info("%s cluster close: %s", PREFIX, exc)
        self.loop.stop()

    def __enter__(self) -> LocalPipeline:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
