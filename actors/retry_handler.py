"""RetryHandler: one per producer. Takes the messages a BrokerWorker could not deliver, waits
`retry.backoff.ms`, and puts them back into the TopicDispatcher.

Called by every BrokerWorker (`retry`; a worker holds a reference from its creation until its
last response is handled), by the LeaderDispatchers (`get_broker`/`unref_broker`) and by the
driver. Calls the TopicDispatcher, from one forwarding thread, in the order the retries arrived;
and the BrokerWorkers it owns (`host`, `close`).

`retry` never blocks (Sarama's retryHandler is always ready to read): the pipeline is a loop, and
a retry handler that waited on the TopicDispatcher could deadlock it. The batches wait out the
backoff in a `RetryQueue` (unbounded for that reason); the forwarding thread is what waits.

It also holds the producer's registry of broker workers (`BrokerRegistry`, Sarama's
getBrokerProducer and unrefBrokerProducer: a single synchronous actor serialises them as
Sarama's mutex does), which places each broker on a worker process, at most
`broker.worker.actors` of them (0: the CPUs of the node this actor runs on); and it counts the
brokers (each a BrokerWorker's Flusher) that may still call `retry` (`ref`/`unref`).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from ..wire.errors import ProducerClosedError
from .batch import MessageBatch
from .broker_registry import BrokerRegistry
from .retry_queue import RetryQueue

log = logging.getLogger("raykafka.producer.retry")


class RetryHandler:
    def __init__(self, ctx: Any):
        import ray

        self.ctx = ctx
        ctx.retry_handler = ray.get_runtime_context().current_actor  # the broker workers it starts call back here
        self.queue = RetryQueue(ctx.config["retry.backoff.ms"] / 1000)
        self.writers = 0  # open brokers on the BrokerWorkers (and the driver), each may still call `retry`
        self.brokers = BrokerRegistry(self._start_worker, self._host_broker, max_broker_workers(ctx.config))
        self.closing = False
        self.forwarded = 0
        self.thread = threading.Thread(target=self._forward_loop, name="retry-forwarder", daemon=True)
        self.thread.start()

    def ping(self) -> bool:
        return True

    def set_topic_dispatcher(self, handle: Any) -> None:
        self.ctx.topic_dispatcher = handle

    # -- retries ---------------------------------------------------------------

    def retry(self, batches: list[MessageBatch]) -> None:
        self.queue.put(batches)

    def _forward_loop(self) -> None:
        from .calls import CallWindow, pipeline_error
        from .producer_results import report_failed

        # a forwarded call that failed (the TopicDispatcher died) fails its own batches
        window = CallWindow(self.ctx.window, lambda carried, exc: report_failed(
            self.ctx.results, carried, pipeline_error(exc)))
        while (batches := self.queue.take()) is not None:
            try:
                ref = self.ctx.topic_dispatcher.dispatch.remote(batches)
            except Exception as exc:  # the TopicDispatcher is gone: the producer is closing
                log.info("producer/retry: cannot forward %d batches: %s", len(batches), exc)
                report_failed(self.ctx.results, batches, ProducerClosedError(
                    f"producer closed while the message waited for a retry ({exc})"))
                continue
            window.submit(ref, batches)
            self.forwarded += len(batches)

    # -- references: the brokers (and the driver) that may still write here -----------

    def ref(self) -> None:
        self.writers += 1

    def unref(self) -> None:
        self.writers -= 1

    def live_writers(self) -> int:
        return self.writers

    # -- the broker registry ------------------------------------------------------

    def get_broker(self, node_id: int, host: str, port: int) -> tuple[Any, int]:
        """The BrokerWorker of broker `node_id` and its generation, with one more reference on it."""
        return self.brokers.get(node_id, host, port)

    def _start_worker(self, generation: int, node_id: int, host: str, port: int) -> Any:
        """A new BrokerWorker process, hosting broker `node_id` as `generation`."""
        from .broker_worker import BrokerWorker
        from .options import create

        self.writers += 1  # the broker's reference, released after its last response
        log.info("producer/broker/%d starting", node_id)
        return create(BrokerWorker, "broker_worker", self.ctx, f"{node_id}-{generation}", generation, node_id, host,
                      port)

    def _host_broker(self, handle: Any, generation: int, node_id: int, host: str, port: int) -> None:
        """Broker `node_id` on a running BrokerWorker, as `generation` (the most workers run)."""
        self.writers += 1  # the broker's reference, released after its last response
        log.info("producer/broker/%d placed on a running worker", node_id)
        handle.host.remote(generation, node_id, host, port)

    def prestart(self, brokers: list[tuple[int, str, int]]) -> None:
        """Start the workers of these brokers with no reference yet (closed by `release_all` if
        no LeaderDispatcher ever takes one)."""
        if self.closing:
            return
        for node_id, host, port in brokers:
            self.brokers.prestart(node_id, host, port)

    def release_all(self) -> None:
        """The producer is closing and its dispatchers have closed: close every worker still
        open, those nobody ever took (started ahead) and those a dispatcher that died still holds."""
        for closing in self.brokers.release_all():  # a late `prestart` then starts nothing
            closing.handle.close.remote(closing.generation, closing.last)

    def unref_broker(self, node_id: int, generation: int) -> None:
        closing = self.brokers.unref(node_id, generation)
        if closing is not None:
            closing.handle.close.remote(closing.generation, closing.last)

    def shutdown(self) -> int:
        """Stop forwarding; the number of batches left (chasers only, once every message has ended)."""
        self.closing = True
        left = self.queue.close()
        self.thread.join(5)
        return left


def max_broker_workers(config: Any) -> int:
    """`broker.worker.actors`, or with 0 the CPUs of this node."""
    return config["broker.worker.actors"] or os.cpu_count() or 1
