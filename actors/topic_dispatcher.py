"""TopicDispatcher: one per producer. Takes batches of messages, looks each new topic up, and
dispatches the messages to the PartitionDispatcher.

Called by two callers: the driver (`Producer`, new messages) and the RetryHandler (messages
coming back for another try, already partitioned). The driver hands it a topic's messages
until it has asked for and been given the topic's route to the PartitionDispatcher (`route`),
then hands them there itself. It runs each caller's calls in the order
they were made, with no order between the two streams; the LeaderDispatchers restore the order
that matters (Sarama's chasers). Calls the PartitionDispatcher (`add_topic` on a topic's first
message, once its metadata says how many partitions it has, then `dispatch`) and the
RetryHandler's mailbox (`report`: messages for a topic that does not exist fail here, alone,
with `UnknownTopicError`; the driver polls them there). A new topic adds state there, never a process: the PartitionDispatcher and
the LeaderDispatcher are started with the pipeline, beside this actor.

A topic whose partition count cannot be looked up (no broker reachable, a retriable error, a
timeout) holds its batches in `TopicsAwaitingMetadata`, in the order they came: the actor's timer
calls `retry_held` after `HoldBackoff`'s wait, and once a look-up answers, the topic is added to
the PartitionDispatcher and the held batches go to it in that order; those still held
when their delivery.timeout.ms runs out fail with `DeliveryTimeoutError` naming the look-up's
last error. While a topic holds, `route` refuses it, so its batches keep coming here, behind.

Every `metadata.max.age.ms` it looks the written topics up again (`refresh_topics`, on its own
timer): a topic that grew is added again with its new count, so that its keyed messages spread
over the new partitions too, as Java's producer does.

Also asks the cluster for a producer id (InitProducerId) when idempotence is on and the broker
supports it, and hands it to the LeaderDispatcher, which numbers every partition's messages
under that id, before it forwards a message. A transactional producer's id and epoch come from
`init_transactions` instead (the TransactionOwner's InitProducerId with the transactional.id),
handed here by the driver (`set_producer_id`) before its first message, and on from here.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import ray

from ..wire.cluster import Cluster
from ..wire.errors import DeliveryTimeoutError, KafkaError, ProducerClosedError, TransactionStateError
from ..wire.loop import LoopThread
from ..wire.producer_id import init_producer_id
from .batch import MessageBatch
from .calls import CallWindow, pipeline_error
from .hold import HoldBackoff, SelfTimer, closed_groups, split_expired, timed_out_groups
from .producer_results import report_failed

log = logging.getLogger("raykafka.producer.topic")


class TopicsAwaitingMetadata:
    """The topics whose partition count could not be looked up yet, each with its batches in the
    order they came and the look-up's last error. Plain Python: the actor looks up and sends."""

    def __init__(self, delivery_timeout_ms: int | None):
        self.delivery_timeout_ms = delivery_timeout_ms
        self.held: dict[str, list[MessageBatch]] = {}
        self.last_error: dict[str, Exception] = {}

    def __bool__(self) -> bool:
        return bool(self.held)

    def holds(self, topic: str) -> bool:
        return topic in self.held

    def hold(self, topic: str, batches: list[MessageBatch], error: Exception) -> None:
        """Keep `batches` behind those already held for `topic`; `error` is why the look-up failed."""
        if topic not in self.held:
            log.info("producer/topic/%s no metadata (%s): holding batches until it comes", topic, error)
        self.held.setdefault(topic, []).extend(batches)
        self.last_error[topic] = error

    def failed_again(self, topic: str, error: BaseException) -> None:
        """Another look-up failed. A look-up cut short (a bare timeout) keeps the error before it,
        which says more."""
        if isinstance(error, TimeoutError) and topic in self.last_error:
            return
        self.last_error[topic] = error if isinstance(error, Exception) else KafkaError(str(error))

    def next_deadline_ms(self, topic: str) -> float | None:
        """When the topic's oldest held message reaches delivery.timeout.ms (None: never)."""
        created = [b.created_ms for b in self.held.get(topic, []) if b.created_ms and not b.is_control]
        if self.delivery_timeout_ms is None or not created:
            return None
        return min(created) + self.delivery_timeout_ms

    def release(self, topic: str) -> list[MessageBatch]:
        """The look-up answered: the topic's batches, in the order they came; it holds no more."""
        self.last_error.pop(topic, None)
        return self.held.pop(topic, [])

    def expire(self, topic: str, now_ms: float) -> list[tuple[list[MessageBatch], DeliveryTimeoutError]]:
        """The topic's batches past delivery.timeout.ms, taken out, each with the error to fail it with."""
        kept, expired = split_expired(self.held.get(topic, []), now_ms, self.delivery_timeout_ms)
        if not expired:
            return []
        if kept:
            self.held[topic] = kept
        else:
            self.held.pop(topic, None)
        why = f"no metadata for topic {topic!r}; last error: {self.last_error.get(topic)}"
        if not kept:
            self.last_error.pop(topic, None)
        return timed_out_groups(expired, self.delivery_timeout_ms, why)

    def take_all(self) -> list[MessageBatch]:
        """Every held batch (at close), topic by topic."""
        batches = [b for held in self.held.values() for b in held]
        self.held.clear()
        self.last_error.clear()
        return batches


def lookup_can_wait(error: BaseException) -> bool:
    """Whether a failed partition-count look-up is worth trying again (the broker unreachable,
    a retriable error, a timeout) rather than failing the topic's batches now."""
    if isinstance(error, KafkaError):
        return error.retriable
    return isinstance(error, TimeoutError)


class TopicDispatcher:
    def __init__(self, ctx: Any):
        self.ctx = ctx
        self.loop = LoopThread("topic-dispatcher")
        self.cluster = Cluster(ctx.config)
        self.partitioner = ctx.partition_dispatcher  # the PartitionDispatcher
        self.known: dict[str, int] = {}  # topic -> partition count, as added to the PartitionDispatcher
        self.window = CallWindow(ctx.window, self._call_failed)  # calls to the PartitionDispatcher
        self.closed = False
        self.awaiting = TopicsAwaitingMetadata(ctx.config["delivery.timeout.ms"])
        self.backoff = HoldBackoff(ctx.config["retry.backoff.ms"])
        self.timer = SelfTimer("retry_held")
        # the partition counts are looked up again this often: a topic that grew gets traffic on
        # its new partitions (Java's metadata.max.age.ms refresh)
        self.refresh_every = ctx.config["metadata.max.age.ms"] / 1000
        self.refresh_timer = SelfTimer("refresh_topics")
        self.init_error: Exception | None = None
        try:
            if ctx.config["enable.idempotence"] and ctx.config["transactional.id"] is None and ctx.producer_id < 0:
                ctx.producer_id, ctx.producer_epoch = self.loop.run(init_producer_id(self.cluster), ctx.timeout * 2)
            else:
                self.loop.run(self.cluster.any_connection(), ctx.timeout * 2)  # fail early: no broker
            if ctx.producer_id >= 0:
                self._number_under(ctx.producer_id, ctx.producer_epoch)
        except Exception as exc:  # reported by `ping`, so the driver raises the cause itself
            self.init_error = exc

    def ping(self) -> tuple[int, int]:
        """Liveness, and the producer id and epoch in use (-1 without idempotence)."""
        if self.init_error is not None:
            raise self.init_error
        return self.ctx.producer_id, self.ctx.producer_epoch

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """init_transactions answered: the LeaderDispatcher numbers under this id and epoch. No
        message has gone yet: a transactional producer sends nothing before init_transactions."""
        if self.known:
            raise TransactionStateError(f"producer id set after messages went out under "
                                        f"{self.ctx.producer_id}/{self.ctx.producer_epoch}")
        self.ctx.producer_id, self.ctx.producer_epoch = producer_id, producer_epoch
        self._number_under(producer_id, producer_epoch)

    def _number_under(self, producer_id: int, producer_epoch: int) -> None:
        """Hand the id to the LeaderDispatcher, answered before this actor forwards a message (so
        every partition is numbered under it: only what is forwarded from here reaches it)."""
        ray.get(self.ctx.leader_dispatcher.set_producer_id.remote(producer_id, producer_epoch),
                timeout=self.ctx.timeout)

    def dispatch(self, batches: list[MessageBatch]) -> None:
        """Each topic's batches on, in the order they came, in one call to the PartitionDispatcher:
        a burst of retries reaches a broker together, its partitions' batches side by side in
        each request, not one batch a request."""
        if self.closed:  # a retry may come after close: one the broker may have written is "outcome unknown"
            for group, error in closed_groups(batches, "its topic's dispatcher"):
                self._fail_all(group, error)
            return
        for topic, own in by_topic(batches).items():
            if self.awaiting.holds(topic):  # behind those already waiting for metadata
                self.awaiting.hold(topic, own, self.awaiting.last_error[topic])
            else:
                self._forward(topic, own)
        self._arm_timer()

    def retry_held(self) -> None:
        """Called by this actor's own timer: look up each topic holding batches again; send them
        on, in order, if it answers; fail those past delivery.timeout.ms if not."""
        self.timer.fired()
        if self.closed:
            return
        for topic in list(self.awaiting.held):
            # a look-up ends by the oldest held message's deadline, so that it fails on time
            deadline_ms = self.awaiting.next_deadline_ms(topic)
            timeout = self.ctx.timeout
            if deadline_ms is not None:
                timeout = min(timeout, max(0.05, (deadline_ms - time.time() * 1000) / 1000 + 0.05))
            try:
                self._look_up(topic, timeout)
            except (KafkaError, TimeoutError) as exc:
                if not lookup_can_wait(exc):
                    self._fail_all(self.awaiting.release(topic), exc)
                    continue
                self.awaiting.failed_again(topic, exc)
                for expired, error in self.awaiting.expire(topic, time.time() * 1000):
                    self._fail_all(expired, error)
                continue
            log.info("producer/topic/%s metadata found again: releasing its held batches", topic)
            self._forward(topic, self.awaiting.release(topic))
        if not self.awaiting:
            self.backoff.reset()
        self._arm_timer()

    def _forward(self, topic: str, batches: list[MessageBatch]) -> None:
        """Hand `batches` to the PartitionDispatcher; hold them if the topic's partition count
        cannot be looked up for now; fail them if the topic cannot be written (unknown, say)."""
        try:
            self._look_up(topic)
        except (KafkaError, TimeoutError) as exc:
            if lookup_can_wait(exc):
                if isinstance(exc, TimeoutError):
                    exc = KafkaError(f"metadata look-up for topic {topic!r} timed out after {self.ctx.timeout}s")
                self.awaiting.hold(topic, batches, exc)
            else:
                self._fail_all(batches, exc)
            return
        self.window.submit(self.partitioner.dispatch.remote(batches), batches)

    def _arm_timer(self) -> None:
        if self.awaiting and not self.timer.armed:
            self.timer.arm(self.backoff.next())

    def route(self, topic: str) -> Any:
        """The PartitionDispatcher, for the driver to hand the topic's new batches to directly
        (`driver.topic_routes`). Answered once every batch forwarded there has been taken, so
        that the driver's next batches cannot overtake them. Refused while the topic's batches
        wait here for its metadata: they go on coming here, behind those."""
        if self.closed:
            raise ProducerClosedError("producer closed")
        if self.awaiting.holds(topic):
            raise self.awaiting.last_error[topic]
        self._look_up(topic)  # raises UnknownTopicError
        self.window.drain()
        return self.partitioner

    def _look_up(self, topic: str, timeout: float | None = None) -> None:
        """Look a new topic up and add it to the PartitionDispatcher (answered before anything of
        the topic is forwarded); raises why it cannot be (UnknownTopicError, a timeout)."""
        if topic in self.known:
            return
        info = self.loop.run(self.cluster.topic(topic), timeout or self.ctx.timeout)  # raises UnknownTopicError
        ray.get(self.partitioner.add_topic.remote(topic, len(info.partitions)), timeout=self.ctx.timeout)
        self.known[topic] = len(info.partitions)
        self.refresh_timer.arm(self.refresh_every)

    def refresh_topics(self) -> None:
        """Called by this actor's own timer every metadata.max.age.ms: look the written topics up
        again, and tell the PartitionDispatcher of any that grew (partitions are only ever added)."""
        self.refresh_timer.fired()
        if self.closed:
            return
        try:
            self.loop.run(self.cluster.refresh_metadata(list(self.known)), self.ctx.timeout)
        except Exception as exc:  # the next refresh tries again; the counts known still hold
            log.info("producer/topic: metadata refresh failed: %s", exc)
        else:
            for topic, count in self.known.items():
                info = self.cluster.metadata.topics.get(topic)
                grown = len(info.partitions) if info is not None else 0
                if grown > count:
                    log.info("producer/topic/%s grew from %d to %d partitions", topic, count, grown)
                    self.partitioner.add_topic.remote(topic, grown)
                    self.known[topic] = grown
        self.refresh_timer.arm(self.refresh_every)

    def _call_failed(self, batches: list[MessageBatch], exc: BaseException) -> None:
        """A call to the PartitionDispatcher failed (it died, say): its own batches fail with why."""
        report_failed(self.ctx.retry_handler.report.remote, batches, pipeline_error(exc))

    def _fail_all(self, batches: list[MessageBatch], error: Exception | None) -> None:
        if batches and error is not None:
            report_failed(self.ctx.retry_handler.report.remote, batches, error)

    def shutdown(self) -> None:
        """Close the PartitionDispatcher (which closes the LeaderDispatcher first)."""
        self.closed = True
        self.timer.cancel()
        self.refresh_timer.cancel()
        for batches, error in closed_groups(self.awaiting.take_all(), "its topic's metadata"):
            self._fail_all(batches, error)
        self.window.drain()
        try:
            ray.get(self.partitioner.shutdown.remote())
        except Exception as exc:  # a dead one: what it held fails, named, at the driver
            log.error("producer/topic: cannot close the dispatchers: %s", pipeline_error(exc))
        ray.kill(self.partitioner, no_restart=True)
        try:
            self.loop.run(self.cluster.close(), 5)
        finally:
            self.loop.stop()


def by_topic(batches: list[MessageBatch]) -> dict[str, list[MessageBatch]]:
    """`batches` by topic, each topic's in the order they came (order matters within a partition only)."""
    out: dict[str, list[MessageBatch]] = {}
    for batch in batches:
        out.setdefault(batch.topic, []).append(batch)
    return out
