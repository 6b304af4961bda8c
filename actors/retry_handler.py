"""RetryHandler: one per producer. Takes the messages a BrokerWorker could not deliver, waits
`retry.backoff.ms`, and puts them back into the TopicDispatcher.

Called by every BrokerWorker (`retry`; each broker it hosts holds a reference from its placing
until its last response is handled; `worker_closed` as it exits, at the producer's close), by the LeaderDispatchers
(`get_broker`/`release_broker`, `first_unresolved`), by the dispatchers (`report`) and by the
driver (`poll`, and the control calls). Calls the TopicDispatcher, from one forwarding thread, in
the order the retries arrived; and the BrokerWorkers it owns (`host`, `close`, and
`ended_intervals` for `first_unresolved`).

A synchronous actor, but for two concurrency groups of one thread each (actors/options.py):
`poll` (the driver's long poll) and `ask` (`first_unresolved`, which asks the workers). Every
other call runs on the one default thread, in the order each caller submitted it.

It keeps the outcomes decided before the brokers (`Mailbox`, actors/producer_results.py): a
topic that does not exist or whose metadata timed out, a partition out of range, no leader, a
call to the next stage that failed, a retry that could not be forwarded. The driver long-polls
it (`poll`), as it polls every BrokerWorker, and learns from its answer which workers there are
(`Reports.workers`, when the list changed), so that each outcome reaches the driver in one hop.

`retry` never blocks (Sarama's retryHandler is always ready to read): the pipeline is a loop, and
a retry handler that waited on the TopicDispatcher could deadlock it. The batches wait out the
backoff in a `RetryQueue` (unbounded for that reason); the forwarding thread is what waits.

It also holds the producer's registry of broker workers (`BrokerRegistry`, Sarama's
getBrokerProducer and unrefBrokerProducer: a single synchronous actor serialises them as
Sarama's mutex does), which places each broker on a worker process, at most
`broker.worker.actors` of them (0: the CPUs of the node this actor runs on); and it counts the
brokers (each a BrokerWorker's Flusher) that may still call `retry` (`add_retry_writer`/`drop_retry_writer`),
by the worker that hosts them, so that a close can tell the brokers still open on living workers
from those a dead worker held (`retry_writers`).

As it starts, it looks up the cluster's brokers in a thread of its own and has their workers
start ahead of the first message (`prestart`, a call to itself, so the registry still sees one
call at a time): a worker is a process, and it then starts beside the producer's other actors
rather than after them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import ray

from ..wire.cluster import Cluster
from .batch import MessageBatch
from .broker_registry import BrokerRegistry, RetryWriters
from .broker_worker import BrokerWorker
from .calls import CallWindow, pipeline_error
from .hold import closed_groups
from .idempotence import EndedSequences
from .options import create
from .producer_results import Mailbox, Reports, WorkerList, report_failed
from .retry_queue import RetryQueue

log = logging.getLogger("raykafka.producer.retry")

# broker workers started as the producer starts, at most: on a large cluster the others start
# when a partition they lead is first written
PRESTART_BROKERS = 3
# how long (s) the start's look-up of the brokers may take; past it the first message starts them
PRESTART_LOOKUP_S = 5.0
# how long (s) a running BrokerWorker may take to answer before a broker is placed on it; one
# that does not is taken for dead (a live one answers in milliseconds, between two sets it sends)
WORKER_PING_TIMEOUT = 5.0


def brokers_of(config: Mapping[str, Any]) -> list[tuple[int, str, int]]:
    """(node id, host, port) of the cluster's brokers, from one metadata request, in this thread."""

    async def look_up() -> list[tuple[int, str, int]]:
        cluster = Cluster(config)
        try:
            await asyncio.wait_for(cluster.refresh_metadata([]), PRESTART_LOOKUP_S)
            return [(b.node_id, b.host, b.port) for b in cluster.metadata.brokers.values()]
        finally:
            await cluster.close()

    return asyncio.run(look_up())


class RetryHandler:
    def __init__(self, ctx: Any):
        self.ctx = ctx
        ctx.retry_handler = ray.get_runtime_context().current_actor  # the broker workers it starts call back here
        self.queue = RetryQueue(ctx.config["retry.backoff.ms"] / 1000)
        self.writers = RetryWriters()  # the open brokers on the BrokerWorkers (and the driver)
        self.names: dict[Any, str] = {}  # worker handle -> its name, for every worker started
        self.brokers = BrokerRegistry(self._start_worker, self._host_broker, self._answers,
                                      max_broker_workers(ctx.config))
        self.closing = False
        self.mailbox = Mailbox(notes=False)
        self.lock = threading.Lock()  # the worker list, shared with the `poll` and `ask` threads
        self.workers: dict[str, Any] = {}  # name -> handle: every worker started and not yet exited
        self.workers_version = 0
        self.closed_sequences = EndedSequences()  # what ended on the workers that exited
        self.thread = threading.Thread(target=self._forward_loop, name="retry-forwarder", daemon=True)
        self.thread.start()
        threading.Thread(target=self._look_up_brokers, name="broker-look-up", daemon=True).start()

    def ping(self) -> bool:
        return True

    def set_topic_dispatcher(self, handle: Any) -> None:
        self.ctx.topic_dispatcher = handle

    # -- retries ---------------------------------------------------------------

    def retry(self, batches: list[MessageBatch]) -> None:
        self.queue.put(batches)

    def _forward_loop(self) -> None:
        # a forwarded call that failed (the TopicDispatcher died) fails its own batches
        window = CallWindow(self.ctx.window, lambda carried, exc: report_failed(
            self.mailbox.report, carried, pipeline_error(exc)))
        while (batches := self.queue.take()) is not None:
            try:
                ref = self.ctx.topic_dispatcher.dispatch.remote(batches)
            except Exception as exc:  # the TopicDispatcher is gone: the producer is closing
                log.info("producer/retry: cannot forward %d batches: %s", len(batches), exc)
                for group, error in closed_groups(batches, f"a retry ({exc})"):  # "outcome unknown" if possibly written
                    report_failed(self.mailbox.report, group, error)
                continue
            window.submit(ref, batches)

    # -- outcomes decided here and before the brokers: the driver polls them ----------

    def report(self, entries: list[Any], spans: list[Any] = ()) -> None:
        """A dispatcher could not hand these messages on: they ended (`Mailbox.report`)."""
        self.mailbox.report(entries, spans)

    def poll(self, timeout: float, workers_seen: int = -1) -> Reports:
        """(The `poll` group.) What ended here since the last poll, waiting up to `timeout` s for
        the first entry or a change of the worker list; with the list when its version is not
        `workers_seen`."""
        with self.mailbox.cond:
            if not self.mailbox.has_news and self.workers_version == workers_seen:
                self.mailbox.cond.wait(timeout)
            reports = self.mailbox.take()
        with self.lock:
            if self.workers_version != workers_seen:
                reports = reports._replace(workers=WorkerList(self.workers_version, list(self.workers.items())))
        return reports

    def first_unresolved(self, topic: str, partition: int, producer_id: int, numbering: int) -> int:
        """(The `ask` group.) The first sequence number of the partition's numbering whose batch
        has not ended anywhere: here, on a live worker (asked), or on one that exited."""
        with self.lock:
            ended = EndedSequences()
            ended.merge(self.closed_sequences.intervals())
            workers = list(self.workers.values())
        ended.merge(self.mailbox.ended_intervals())
        asked = [worker.ended_intervals.remote() for worker in workers]
        for ref in asked:
            try:
                ended.merge(ray.get(ref, timeout=self.ctx.timeout))
            except Exception as exc:  # exited (its intervals came by `worker_closed`) or dead (lost)
                log.info("producer/retry: a broker worker did not say what ended there: %s", exc)
        with self.lock:  # a worker that exited meanwhile told its intervals here first
            ended.merge(self.closed_sequences.intervals())
        return ended.first_unresolved(topic, partition, producer_id, numbering)

    def worker_closed(self, name: str, intervals: list[Any]) -> None:
        """A BrokerWorker exits (the producer closing, its brokers closed, its mailbox polled empty): what ended there."""
        with self.lock:
            self.closed_sequences.merge(intervals)
            if self.workers.pop(name, None) is not None:
                self._workers_changed()

    def _workers_changed(self) -> None:
        """(Lock held.) Wake the driver's poll: the worker list changed."""
        self.workers_version += 1
        with self.mailbox.cond:
            self.mailbox.cond.notify_all()

    # -- references: the brokers (and the driver) that may still write here -----------

    def add_retry_writer(self) -> None:
        self.writers.add()

    def drop_retry_writer(self, worker: str | None = None) -> None:
        """One reference fewer: the driver's (no `worker`), or a broker's on `worker` after its last response."""
        self.writers.drop(worker)

    def retry_writers(self, dead: Iterable[str] = ()) -> int:
        return self.writers.held(dead)

    # -- the broker registry ------------------------------------------------------

    def get_broker(self, node_id: int, host: str, port: int) -> tuple[Any, int]:
        """The BrokerWorker of broker `node_id` and its generation, with one more reference on it."""
        return self.brokers.get(node_id, host, port)

    def _start_worker(self, generation: int, node_id: int, host: str, port: int) -> Any:
        """A new BrokerWorker process, hosting broker `node_id` as `generation`."""
        log.info("producer/broker/%d starting", node_id)
        key = f"{node_id}-{generation}"
        handle = create(BrokerWorker, "broker_worker", self.ctx, key, generation, node_id, host, port)
        name = self.names[handle] = f"{self.ctx.prefix}broker_worker-{key}"
        self.writers.add(name)  # the broker's reference, released after its last response
        with self.lock:
            self.workers[name] = handle
            self._workers_changed()
        return handle

    def _host_broker(self, handle: Any, generation: int, node_id: int, host: str, port: int) -> None:
        """Broker `node_id` on a running BrokerWorker, as `generation` (one hosting none, or the most workers run)."""
        self.writers.add(self.names[handle])
        log.info("producer/broker/%d placed on a running worker", node_id)
        handle.host.remote(generation, node_id, host, port)

    def _answers(self, handle: Any) -> bool:
        """Whether a running BrokerWorker answers, before a broker is placed on it (else it is dead)."""
        try:
            ray.get(handle.ping.remote(), timeout=WORKER_PING_TIMEOUT)
            return True
        except Exception as exc:  # dead, or too busy to answer: a broker goes to another process
            log.warning("producer/retry: %s does not answer (%s): no broker is placed on it",
                        self.names.get(handle, "a broker worker"), pipeline_error(exc))
            return False

    def _look_up_brokers(self) -> None:
        """(Its own thread, once.) Have the first brokers' workers start now."""
        try:
            brokers = brokers_of(self.ctx.config)
        except Exception as exc:  # only a head start: the first message starts them anyway
            log.info("producer/retry: no broker list to start workers for: %s", exc)
            return
        self.ctx.retry_handler.prestart.remote(brokers[:PRESTART_BROKERS])

    def prestart(self, brokers: list[tuple[int, str, int]]) -> None:
        """Start the workers of these brokers with no reference yet (closed by `release_all` if
        no LeaderDispatcher ever takes one)."""
        if self.closing:
            return
        for node_id, host, port in brokers:
            self.brokers.prestart(node_id, host, port)

    def release_all(self) -> None:
        """The producer is closing and its dispatchers have closed: close every broker still
        open, those nobody ever took (started ahead) and those a dispatcher that died still holds,
        and have every worker exit after its last, a worker hosting none at once."""
        for closing in self.brokers.release_all():  # a late `prestart` then starts nothing
            closing.handle.close.remote(closing.generation, closing.last)

    def release_broker(self, node_id: int, generation: int) -> None:
        """One reference fewer on broker `node_id`'s worker (Sarama's unrefBrokerProducer)."""
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
