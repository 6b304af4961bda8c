"""TopicDispatcher: one per producer. Takes batches of messages and dispatches each topic's
messages to that topic's PartitionDispatcher.

Called by two callers: the driver (`Producer`, new messages) and the RetryHandler (messages
coming back for another try, already partitioned). The driver hands it a topic's messages
until it has asked for and been given the topic's PartitionDispatcher (`route`), then hands
them there itself. It runs each caller's calls in the order
they were made, with no order between the two streams; the LeaderDispatchers restore the order
that matters (Sarama's chasers). Calls the PartitionDispatchers (created on a topic's first
message, after its metadata says how many partitions it has) and the ProducerResults (messages
for a topic that does not exist fail here, alone, with `UnknownTopicError`).

Also asks the cluster for a producer id (InitProducerId) when idempotence is on and the broker
supports it; every LeaderDispatcher numbers its partition's messages under that id.
"""

from __future__ import annotations

import logging
from typing import Any

from ..wire import messages
from ..wire.errors import BrokerError, KafkaError, ProducerClosedError, UnsupportedVersionError
from .batch import MessageBatch
from .calls import pipeline_error
from .producer_results import report_failed

log = logging.getLogger("raykafka.producer.topic")

# broker workers started before the first message, at most: on a large cluster the others start
# when a partition they lead is first written (two processes each)
PRESTART_BROKERS = 3


class TopicDispatcher:
    def __init__(self, ctx: Any):
        from ..wire.cluster import Cluster
        from ..wire.loop import LoopThread

        self.ctx = ctx
        self.loop = LoopThread("topic-dispatcher")
        self.cluster = Cluster(ctx.config)
        self.partition_dispatchers: dict[str, Any] = {}
        self.windows: dict[str, Any] = {}
        self.closed = False
        self.init_error: Exception | None = None
        try:
            if ctx.config["enable.idempotence"]:
                ctx.producer_id, ctx.producer_epoch = self.loop.run(init_producer_id(self.cluster), ctx.timeout * 2)
            else:
                self.loop.run(self.cluster.any_connection(), ctx.timeout * 2)  # fail early: no broker
        except Exception as exc:  # reported by `ping`, so the driver raises the cause itself
            self.init_error = exc
        else:
            self._prestart_brokers()

    def ping(self) -> tuple[int, int]:
        """Liveness, and the producer id and epoch in use (-1 without idempotence)."""
        if self.init_error is not None:
            raise self.init_error
        return self.ctx.producer_id, self.ctx.producer_epoch

    def _prestart_brokers(self) -> None:
        """Have the broker workers (Aggregator and Flusher) of every broker start now, while the
        first messages are still on their way: each is a process that takes about a second."""
        try:
            self.loop.run(self.cluster.refresh_metadata([]), self.ctx.timeout)
        except Exception as exc:  # only a head start: the first message starts them anyway
            log.info("producer/topic: no broker list to start workers for: %s", exc)
            return
        brokers = [(b.node_id, b.host, b.port) for b in self.cluster.metadata.brokers.values()]
        self.ctx.retry_handler.prestart.remote(brokers[:PRESTART_BROKERS])

    def dispatch(self, batches: list[MessageBatch]) -> None:
        for batch in batches:
            if self.closed:
                self._fail(batch, ProducerClosedError("producer closed before the message was sent"))
                continue
            try:
                dispatcher = self._partition_dispatcher(batch.topic)
            except KafkaError as exc:
                self._fail(batch, exc)
                continue
            self.windows[batch.topic].submit(dispatcher.dispatch.remote([batch]), [batch])

    def route(self, topic: str) -> Any:
        """The topic's PartitionDispatcher, for the driver to hand new batches to directly
        (`driver.topic_routes`). Answered once every batch forwarded there has been taken, so
        that the driver's next batches cannot overtake them."""
        if self.closed:
            raise ProducerClosedError("producer closed")
        handle = self._partition_dispatcher(topic)  # raises UnknownTopicError
        self.windows[topic].drain()
        return handle

    def _partition_dispatcher(self, topic: str) -> Any:
        found = self.partition_dispatchers.get(topic)
        if found is not None:
            return found
        from .calls import CallWindow
        from .leader_dispatcher import LeaderDispatcher
        from .options import create
        from .partition_dispatcher import PartitionDispatcher

        info = self.loop.run(self.cluster.topic(topic), self.ctx.timeout)  # raises UnknownTopicError
        # both processes start at once: each takes about a second to come up
        leader = create(LeaderDispatcher, "leader_dispatcher", self.ctx, topic, topic)
        handle = create(PartitionDispatcher, "partition_dispatcher", self.ctx, topic, topic, len(info.partitions), leader)
        self.partition_dispatchers[topic] = handle
        self.windows[topic] = CallWindow(self.ctx.window, self._call_failed)
        return handle

    def _call_failed(self, batches: list[MessageBatch], exc: BaseException) -> None:
        """A call to a PartitionDispatcher failed (it died, say): its own batches fail with why."""
        report_failed(self.ctx.results, batches, pipeline_error(exc))

    def _fail(self, batch: MessageBatch, error: Exception) -> None:
        report_failed(self.ctx.results, [batch], error)

    def shutdown(self) -> None:
        """Close every PartitionDispatcher (each closes its LeaderDispatchers first)."""
        import ray

        self.closed = True
        for topic, handle in self.partition_dispatchers.items():
            self.windows[topic].drain()
            try:
                ray.get(handle.shutdown.remote())
            except Exception as exc:  # a dead one: the others still close in order
                log.error("producer/topic/%s cannot close its dispatchers: %s", topic, pipeline_error(exc))
            ray.kill(handle, no_restart=True)
        self.partition_dispatchers.clear()
        try:
            self.loop.run(self.cluster.close(), 5)
        finally:
            self.loop.stop()


# -- a coroutine kept outside the class: an `async def` method would make Ray run the whole actor
# as an async actor, which gives up the in-order execution this stage relies on


async def init_producer_id(cluster: Any) -> tuple[int, int]:
    """A producer id and epoch from InitProducerId, or (-1, -1) when the broker has none."""
    conn = await cluster.any_connection()
    try:
        conn.version_for(messages.INIT_PRODUCER_ID)
    except UnsupportedVersionError:
        log.info("producer/topic: the broker has no InitProducerId; idempotence off")
        return -1, -1
    response = await conn.request(messages.INIT_PRODUCER_ID, {
        "transactional_id": None, "transaction_timeout_ms": 2147483647})
    if response.error_code:
        raise BrokerError(response.error_code, "InitProducerId")
    log.info("producer/topic: producer id %d epoch %d", response.producer_id, response.producer_epoch)
    return response.producer_id, response.producer_epoch
