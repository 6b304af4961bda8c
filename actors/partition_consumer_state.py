"""One assigned partition's consumer state: dispatcher and feeder of Sarama's partitionConsumer.

Cardinality: one `PartitionConsumerState` per partition a `Consumer` reads, hosted (many to one)
in a `PartitionConsumer` actor (`actors/partition_consumer.py`), which routes each call to its
partition's state. Calls: the cluster (metadata, ListOffsets) and, through the `BrokerConsumers`
its host gives it, the leader's `BrokerConsumer`. No Ray here.

The dispatcher finds the leader and subscribes to that broker's consumer at the next offset;
when the broker says the partition moved, or its broker cannot be reached, it looks the leader
up again (after `retry.backoff.ms`) and resubscribes there, from the same offset, so nothing is
lost or repeated. It keeps trying for as long as it runs, as librdkafka does: through a broker
outage each connection attempt waits the cluster's reconnect backoff (`reconnect.backoff.ms`
doubling up to `reconnect.backoff.max.ms`). Only a fatal error (`errors.is_fatal`:
authentication, authorization) fails the partition; so does data it cannot read (a corrupt
batch) and an offset out of range with `auto.offset.reset` none: the driver raises each as a
`ConsumerError` naming the partition. The feeder turns each fetched chunk into one Arrow batch,
keeps at most `MAX_BUFFERED` of them, and acks the broker consumer only once the buffer has room
for the batch (then reads it while the next fetch is on its way): a partition nobody polls stops
being fetched, and only it. Every subscription has an id; data or errors from an older
subscription (before a seek or a move) are ignored.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import pyarrow as pa

from ..wire.cluster import Cluster
from ..wire.config import Config
from ..wire.errors import BrokerError, KafkaError, is_fatal
from ..wire.fetch import OFFSET_OUT_OF_RANGE, RESET_POLICIES, resolve_offsets
from ..wire.fetch_round import back_off
from ..wire.fetcher import bad_data, decode_until_bad
from .metrics import ConsumerMetrics

log = logging.getLogger("raykafka.actors.partition_consumer")

MAX_BUFFERED = 8  # Arrow batches held per partition (Sarama's ChannelBufferSize, in batches)
LEADER_NOT_AVAILABLE = 5  # Kafka's error code, for a partition whose metadata names no leader


class BrokerConsumerGone(Exception):
    """The leader's broker consumer did not answer a (un)subscription: it died and Ray is
    restarting it; the dispatcher asks again after `retry.backoff.ms`."""


class BrokerConsumers(Protocol):
    """What a partition's state asks of the broker consumers; its host implements it."""

    async def subscribe(self, node_id: int, topic: str, partition: int, offset: int, sub_id: int) -> None: ...

    async def unsubscribe(self, node_id: int, topic: str, partition: int, sub_id: int) -> None: ...


class PartitionPoll(NamedTuple):
    """One partition's part of a poll: what was buffered, the offset after it, the end last
    seen, the error that failed the partition (reported once), and the seek count."""

    topic: str
    partition: int
    batches: list[pa.RecordBatch]
    position: int
    high_watermark: int
    error: str | None
    seeks: int


@dataclass
class PartitionContext:
    """What the partitions of one host share: config, cluster, broker consumers, the condition
    every change of any of them is announced on, the deserializers and the metrics."""

    config: Config
    cluster: Cluster
    brokers: BrokerConsumers
    changed: asyncio.Condition
    deserialize: Any  # wire.serde.Deserializers
    metrics: ConsumerMetrics


class PartitionConsumerState:
    """Consumes `topic`/`partition` from the offset its host starts it at."""

    def __init__(self, ctx: PartitionContext, topic: str, partition: int):
        self.ctx = ctx
        self.config = ctx.config
        self.topic = topic
        self.partition = partition
        self.offset = -1  # the next offset to hand out
        self.high_watermark = -1
        self.sub_id = 0
        self.seeks = 0  # bumped by every seek: poll answers carry it, so stale ones can be told apart
        self.leader = -1
        self.paused = False
        self.closed = False
        self.error: str | None = None
        self.error_reported = False
        self.buffer: deque[pa.RecordBatch] = deque()
        self.reading = 0  # fed batches acked but not yet read into the buffer
        self._retries: set[asyncio.Task] = set()  # dispatches retried in the background (`_dispatch_or_retry`)

    @property
    def has_news(self) -> bool:
        """Something for the next poll: batches, or an error not yet reported."""
        return bool(self.buffer) or (self.error is not None and not self.error_reported)

    # -- the dispatcher ------------------------------------------------------

    async def dispatch(self, refresh: bool = True) -> None:
        """Subscribe to the leader's broker consumer at `self.offset` (a new subscription id);
        `refresh=False` when the host has just refreshed this topic's metadata."""
        self.sub_id += 1
        if self.paused or self.closed:
            return
        if refresh:
            await self.ctx.cluster.refresh_metadata([self.topic])
        leader = self.ctx.cluster.metadata.leader(self.topic, self.partition)
        if leader < 0:
            raise BrokerError(LEADER_NOT_AVAILABLE, f"{self.topic}/{self.partition}")
        if leader != self.leader:
            log.info("consumer/%s/%d leader is broker %d", self.topic, self.partition, leader)
        self.leader = leader
        await self.ctx.brokers.subscribe(leader, self.topic, self.partition, self.offset, self.sub_id)

    async def _unsubscribe(self) -> None:
        if self.leader >= 0:
            try:
                await self.ctx.brokers.unsubscribe(self.leader, self.topic, self.partition, self.sub_id)
            except BrokerConsumerGone as exc:  # nothing to undo
                log.debug("unsubscribe %s/%d: %s", self.topic, self.partition, exc)
        self.sub_id += 1

    async def redispatch(self, sub_id: int, offset: int, reason: str) -> None:
        """The leader moved or its connection failed: find it again and resubscribe.

        It resumes at its own position (what it has buffered or handed out), not at the broker
        consumer's `offset`: data in flight from the old subscription is dropped and refetched.
        """
        if sub_id != self.sub_id:
            return
        log.info("consumer/%s/%d redispatching at %d (%s; broker consumer was at %d)", self.topic,
                 self.partition, self.offset, reason, offset)
        self.sub_id += 1  # nothing more from the old subscription counts
        await self._retry(self.dispatch, "dispatch")

    async def _retry(self, step: Any, what: str) -> None:
        """`step()` after `retry.backoff.ms`, again and again until it succeeds, the partition is
        closed or paused, or a fatal error fails it. Reconnecting waits the reconnect backoff; a
        broker consumer that Ray is restarting is asked again until it answers."""
        expected = self.sub_id  # a seek, pause or close meanwhile changes it: this retry then stops
        failures = 0
        while True:
            await back_off(self.config)
            if self.closed or self.paused or self.sub_id != expected:
                return
            try:
                await step()
                return
            except (KafkaError, OSError, BrokerConsumerGone) as exc:
                expected = self.sub_id  # dispatch took a new subscription id before it failed
                if is_fatal(exc):
                    await self.fail(self.sub_id, -1, f"{what} failed: {type(exc).__name__}: {exc}")
                    return
                failures += 1
                log.log(logging.WARNING if failures in (1, 10, 100) else logging.INFO,
                        "consumer/%s/%d %s failed %d time(s), retrying: %s", self.topic, self.partition, what,
                        failures, exc)

    async def offset_out_of_range(self, sub_id: int, offset: int) -> None:
        if sub_id != self.sub_id:
            return
        reset = self.config["auto.offset.reset"]
        if reset not in RESET_POLICIES:
            await self.fail(sub_id, OFFSET_OUT_OF_RANGE,
                            f"{self.topic}/{self.partition} offset {offset} (auto.offset.reset={reset})")
            return
        log.warning("consumer/%s/%d offset %d out of range: resetting to %s", self.topic, self.partition,
                    offset, reset)
        self.sub_id += 1

        async def reset_and_dispatch() -> None:
            self.offset = (await resolve_offsets(self.ctx.cluster, self.topic, [self.partition], reset))[self.partition]
            await self.dispatch()

        await self._retry(reset_and_dispatch, "offset reset")

    async def fail(self, sub_id: int, code: int, context: str) -> None:
        if sub_id != self.sub_id:
            return
        self.error = str(BrokerError(code, context)) if code >= 0 else context
        log.error("consumer/%s/%d failed: %s", self.topic, self.partition, self.error)
        async with self.ctx.changed:
            self.ctx.changed.notify_all()

    # -- the feeder ------------------------------------------------------------

    async def feed(self, sub_id: int, data: Any, fetch_offset: int, high_watermark: int, position: int) -> None:
        """Data to read from `fetch_offset` on, every offset before `position` decided (under
        read_committed a fetch may bring no data to hand out and still move the position past
        aborted records and markers); returns (acks) once the buffer has room for its batch.

        The batch is read into Arrow after the ack, so the broker consumer's next fetch overlaps
        the decoding. Feeds come one at a time (the next after this ack) and their reads run in
        the order they were started, so batches stay in offset order."""
        if sub_id != self.sub_id or self.closed or self.error is not None:
            return
        self.high_watermark = max(self.high_watermark, high_watermark)
        cond = self.ctx.changed
        async with cond:
            if (data is None or not len(data)) and position <= self.offset:  # bytes, a uint8 array, or nothing
                cond.notify_all()
                return
            await cond.wait_for(lambda: len(self.buffer) + self.reading < MAX_BUFFERED or self.closed
                                or sub_id != self.sub_id)
            if sub_id != self.sub_id or self.closed:
                return
            self.reading += 1
        asyncio.get_running_loop().create_task(self._read(sub_id, data, fetch_offset, position))

    async def _read(self, sub_id: int, data: Any, fetch_offset: int, position: int) -> None:
        """Fetched bytes to one Arrow batch, buffered unless a seek or move came meanwhile; the
        position moves past it (and past what read_committed dropped), in the order feeds came.
        A corrupt batch ends what is handed out: the records before it are, then the partition
        fails, its position at the bad batch."""
        cond = self.ctx.changed
        start = max(fetch_offset, self.offset)
        try:
            batch, after, bad = decode_until_bad(data, self.topic, self.partition, start, self.config)
            batch = self.ctx.deserialize(batch)
        except Exception as exc:  # undecodable or not deserializable: this partition fails, visibly, alone
            batch, after, bad = None, start, exc
        async with cond:
            self.reading -= 1
            if batch is not None and sub_id == self.sub_id and not self.closed and self.error is None:
                if batch.num_rows:
                    self.buffer.append(batch)
                self.offset = max(self.offset, after) if bad is not None else max(self.offset, after, position)
                self.ctx.metrics.fetched(self.topic, self.partition, batch.num_rows,
                                         0 if data is None else len(data), self.high_watermark - self.offset)
            if bad is not None and self.error is None:
                self.error = bad_data(after, bad)
                log.error("consumer/%s/%d failed: %s", self.topic, self.partition, self.error)
            cond.notify_all()

    def take(self) -> PartitionPoll:
        """What is buffered, handed out (the host holds `changed`): the position is then the
        offset after it; an error is reported once."""
        batches = list(self.buffer)
        self.buffer.clear()
        if self.error is not None:
            self.error_reported = True
        return PartitionPoll(self.topic, self.partition, batches, self.offset, self.high_watermark, self.error,
                             self.seeks)

    # -- control ---------------------------------------------------------------

    async def pause(self) -> None:
        if not self.paused:
            self.paused = True
            await self._unsubscribe()

    async def resume(self) -> None:
        if self.paused:
            self.paused = False
            await self._dispatch_or_retry("resume")

    async def seek(self, offset: Any) -> tuple[int, int]:
        """Drop what is buffered and continue from `offset` (anything `start` accepts); return the
        offset and the seek count that later poll answers carry. A target that cannot be looked
        up raises, and changes nothing."""
        target = (await resolve_offsets(self.ctx.cluster, self.topic, [self.partition], offset))[self.partition]
        await self._unsubscribe()  # reads of the old subscription buffer nothing from here on
        cond = self.ctx.changed  # shared with the host's other partitions: not held across the look-ups
        async with cond:
            self.buffer.clear()
            self.seeks += 1
            self.offset = target
            cond.notify_all()
            offset, seeks = self.offset, self.seeks
        await self._dispatch_or_retry("seek")
        return offset, seeks

    async def _dispatch_or_retry(self, what: str) -> None:
        """Subscribe again after a resume or a seek, which are the caller's and take effect at
        once, as Java's do: a dispatch that fails for now (no leader, no broker reachable) goes
        on in the background as a redispatch does (`_retry`), rather than raising with the
        partition left subscribed nowhere; a fatal error fails the partition."""
        try:
            await self.dispatch()
        except (KafkaError, OSError, BrokerConsumerGone) as exc:
            if is_fatal(exc):
                await self.fail(self.sub_id, -1, f"dispatch after {what} failed: {type(exc).__name__}: {exc}")
                return
            log.warning("consumer/%s/%d dispatch after %s failed, retrying: %s", self.topic, self.partition, what, exc)
            task = asyncio.get_running_loop().create_task(self._retry(self.dispatch, f"dispatch after {what}"))
            self._retries.add(task)
            task.add_done_callback(self._retries.discard)

    async def close(self) -> None:
        self.closed = True
        await self._unsubscribe()
        async with self.ctx.changed:
            self.ctx.changed.notify_all()
