"""PartitionConsumer: one per assigned partition; dispatcher and feeder of Sarama's partitionConsumer.

Called by: the driver's `Consumer` (`start`, `poll`, `pause`, `resume`, `seek`, `close`) and
the `BrokerConsumer` of its partition's leader (`feed`, `redispatch`, `offset_out_of_range`,
`fail`). Calls: the cluster (metadata, ListOffsets) and the leader's `BrokerConsumer`, which
it finds or creates by name, one per broker per consumer.

The dispatcher finds the leader and subscribes to that broker's consumer at the next offset;
when the broker says the partition moved, or its broker cannot be reached, it looks the leader
up again (after `retry.backoff.ms`) and resubscribes there, from the same offset, so nothing is
lost or repeated. It keeps trying for as long as it runs, as librdkafka does: through a broker
outage each connection attempt waits the cluster's reconnect backoff (`reconnect.backoff.ms`
doubling up to `reconnect.backoff.max.ms`). Only a fatal error (`errors.is_fatal`:
authentication, authorization) fails the partition; so does data it cannot read (a corrupt
batch) and an offset out of range with `auto.offset.reset` none: the driver raises each as a
`ConsumerError` naming the partition. The feeder turns each fetched chunk into one Arrow batch, keeps at most
`MAX_BUFFERED` of them, and acks the broker consumer only once the buffer has room for the
batch (then reads it while the next fetch is on its way): a partition nobody polls stops
being fetched. Every subscription has an id; data or errors from
an older subscription (before a seek or a move) are ignored.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

import pyarrow as pa
import ray

from ..wire.cluster import Cluster
from ..wire.config import parse_config
from ..wire.errors import BrokerError, KafkaError, is_fatal
from ..wire.fetch import OFFSET_OUT_OF_RANGE, RESET_POLICIES, resolve_offsets
from ..wire.fetcher import bad_data, decode_until_bad
from ..wire.serde import Deserializers
from .metrics import ConsumerMetrics

log = logging.getLogger("raykafka.actors.partition_consumer")

MAX_BUFFERED = 8  # Arrow batches held per partition (Sarama's ChannelBufferSize, in batches)

# A broker consumer holds no state that its partition consumers cannot give it again, so Ray
# restarts it when it dies (a crash, a lost node); each partition consumer watches the one it is
# subscribed to and subscribes again, at its own position, when that watch breaks. A partition
# consumer is not restarted by Ray (a restarted one would not know where to start): the driver's
# `Consumer` replaces a dead one, at the offset after the last record it handed out.
BROKER_CONSUMER_OPTIONS = {"num_cpus": 0, "max_concurrency": 1000, "max_restarts": -1, "max_task_retries": 0}
PARTITION_CONSUMER_OPTIONS = {"num_cpus": 0, "max_concurrency": 1000, "max_restarts": 0, "max_task_retries": 0}


def broker_consumer_name(consumer_id: str, node_id: int) -> str:
    return f"raykafka-bc-{consumer_id}-{node_id}"


def new_broker_consumer(config: dict[str, Any], consumer_id: str, node_id: int) -> Any:
    """Find or create the named `BrokerConsumer` of `consumer_id` for broker `node_id`."""
    from .broker_consumer import BrokerConsumer

    return ray.remote(BrokerConsumer).options(
        name=broker_consumer_name(consumer_id, node_id), get_if_exists=True, **BROKER_CONSUMER_OPTIONS
    ).remote(config, node_id)


class PartitionConsumer:
    """Consumes `topic`/`partition` from `start` for consumer `consumer_id`."""

    def __init__(self, config: dict[str, Any], consumer_id: str, topic: str, partition: int):
        self.config = parse_config(config)
        self.consumer_id = consumer_id
        self.topic = topic
        self.partition = partition
        self.cluster = Cluster(self.config)
        self.offset = -1  # the next offset to hand out
        self.high_watermark = -1
        self.sub_id = 0
        self.seeks = 0  # bumped by every seek: poll answers carry it, so stale ones can be told apart
        self.leader = -1
        self.paused = False
        self.closed = False
        self.error: str | None = None
        self.buffer: deque[pa.RecordBatch] = deque()
        self.reading = 0  # fed batches acked but not yet read into the buffer
        self._changed: asyncio.Condition | None = None
        self._deserialize = Deserializers.from_config(self.config)
        self._brokers: dict[int, Any] = {}
        self._watches: dict[int, asyncio.Task] = {}  # node id -> the watch on its broker consumer
        self.metrics = ConsumerMetrics(consumer_id)

    def _cond(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def ping(self) -> str:
        return f"{self.topic}/{self.partition}"

    async def metrics_snapshot(self) -> dict[str, Any]:
        return self.metrics.snapshot()

    # -- the dispatcher ------------------------------------------------------

    async def start(self, start: Any) -> int:
        """Resolve `start` to an offset and subscribe at the leader; return the offset."""
        offset = self.offset = (await resolve_offsets(self.cluster, self.topic, [self.partition], start))[self.partition]
        await self.dispatch()
        return offset  # not self.offset: data may already have been fed while subscribing

    async def dispatch(self) -> None:
        """Subscribe to the leader's broker consumer at `self.offset` (a new subscription id)."""
        self.sub_id += 1
        if self.paused or self.closed:
            return
        await self.cluster.refresh_metadata([self.topic])
        leader = self.cluster.metadata.leader(self.topic, self.partition)
        if leader < 0:
            raise BrokerError(5, f"{self.topic}/{self.partition}")
        if leader != self.leader:
            log.info("consumer/%s/%d leader is broker %d", self.topic, self.partition, leader)
        self.leader = leader
        broker_consumer = self._broker_consumer(leader)
        await broker_consumer.subscribe.remote(self.topic, self.partition, self.offset,
                                               ray.get_runtime_context().current_actor, self.sub_id)
        self._watch(leader, broker_consumer)

    def _watch(self, node_id: int, broker_consumer: Any) -> None:
        """Keep a `watch` call open on the broker consumer of `node_id`: it fails only when that
        actor dies (Ray then restarts it, empty); then, if this partition is still subscribed
        there, it subscribes again from its own position."""
        task = self._watches.get(node_id)
        if task is not None and not task.done():
            return

        async def watch() -> None:
            try:
                await broker_consumer.watch.remote()
            except ray.exceptions.RayActorError as exc:
                self._watches.pop(node_id, None)  # the next subscription there watches anew
                if self.leader == node_id and not (self.closed or self.paused):
                    cause = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else type(exc).__name__
                    await self.redispatch(self.sub_id, self.offset, f"broker consumer {node_id} died: {cause}")

        self._watches[node_id] = asyncio.get_running_loop().create_task(watch())

    def _broker_consumer(self, node_id: int) -> Any:
        """The broker consumer the driver made for `node_id`; one made here if the broker is new
        (its handle is kept: a named actor lives as long as its creator holds it)."""
        handle = self._brokers.get(node_id)
        if handle is None:
            handle = self._brokers[node_id] = new_broker_consumer(self.config, self.consumer_id, node_id)
        return handle

    async def _unsubscribe(self) -> None:
        if self.leader >= 0:
            try:
                await self._broker_consumer(self.leader).unsubscribe.remote(self.topic, self.partition, self.sub_id)
            except Exception as exc:  # the broker consumer is gone: nothing to undo
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
            await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)
            if self.closed or self.paused or self.sub_id != expected:
                return
            try:
                await step()
                return
            except (KafkaError, OSError, ray.exceptions.RayActorError) as exc:  # the last: a broker consumer restarting
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
            self.offset = (await resolve_offsets(self.cluster, self.topic, [self.partition], reset))[self.partition]
            await self.dispatch()

        await self._retry(reset_and_dispatch, "offset reset")

    async def fail(self, sub_id: int, code: int, context: str) -> None:
        if sub_id != self.sub_id:
            return
        self.error = str(BrokerError(code, context)) if code >= 0 else context
        log.error("consumer/%s/%d failed: %s", self.topic, self.partition, self.error)
        async with self._cond():
            self._cond().notify_all()

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
        cond = self._cond()
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
        position moves past it (and past what read_committed dropped), in the order feeds came."""
        cond = self._cond()
        start = max(fetch_offset, self.offset)
        try:  # a corrupt batch ends the records handed out: those before it are, then the partition fails
            batch, after, bad = decode_until_bad(data, self.topic, self.partition, start, self.config)
            batch = self._deserialize(batch)
        except Exception as exc:  # undecodable or not deserializable: this partition fails, visibly, alone
            batch, after, bad = None, start, exc
        async with cond:
            self.reading -= 1
            if batch is not None and sub_id == self.sub_id and not self.closed and self.error is None:
                if batch.num_rows:
                    self.buffer.append(batch)
                self.offset = max(self.offset, after) if bad is not None else max(self.offset, after, position)
                self.metrics.fetched(self.topic, self.partition, batch.num_rows, 0 if data is None else len(data),
                                     self.high_watermark - self.offset)
            if bad is not None and self.error is None:
                self.error = bad_data(after, bad)
                log.error("consumer/%s/%d failed: %s", self.topic, self.partition, self.error)
            cond.notify_all()

    async def poll(self, max_wait: float = 0.5) -> dict[str, Any]:
        """What is buffered (waiting up to `max_wait` s for something), with position and end."""
        cond = self._cond()
        async with cond:
            if not self.buffer and self.error is None and not self.closed:
                try:
                    await asyncio.wait_for(cond.wait_for(lambda: bool(self.buffer) or self.error is not None),
                                           max_wait)
                except TimeoutError:
                    pass
            batches = list(self.buffer)
            self.buffer.clear()
            cond.notify_all()
        # position: the offset after what was handed out (buffer is empty now)
        return {"topic": self.topic, "partition": self.partition, "batches": batches, "position": self.offset,
                "high_watermark": self.high_watermark, "error": self.error, "seeks": self.seeks}

    # -- control ---------------------------------------------------------------

    async def pause(self) -> None:
        if not self.paused:
            self.paused = True
            await self._unsubscribe()

    async def resume(self) -> None:
        if self.paused:
            self.paused = False
            await self.dispatch()

    async def seek(self, offset: Any) -> tuple[int, int]:
        """Drop what is buffered and continue from `offset` (anything `start` accepts); return the
        offset and the seek count that later poll answers carry."""
        await self._unsubscribe()
        async with self._cond():
            self.buffer.clear()
            self.seeks += 1
            self.offset = (await resolve_offsets(self.cluster, self.topic, [self.partition], offset))[self.partition]
            self._cond().notify_all()
            offset, seeks = self.offset, self.seeks
        await self.dispatch()
        return offset, seeks

    async def close(self) -> None:
        self.closed = True
        for task in self._watches.values():
            task.cancel()
        await self._unsubscribe()
        async with self._cond():
            self._cond().notify_all()
        await self.cluster.close()
