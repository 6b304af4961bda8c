"""`ProducerPipeline`: the actors behind one `Producer`, started and stopped in order.

Start: with `transactional.id`, the TransactionOwner first (every other actor carries its
handle); the RetryHandler, the LeaderDispatcher, the PartitionDispatcher and the
TopicDispatcher at once (each is a process, whatever the number of topics), then the driver's
reference on the RetryHandler, and the producer id the TopicDispatcher got (a broker that cannot
be reached fails the start with that cause, not "actor task failed"). The broker workers are
started by the RetryHandler's registry: the first brokers' as it starts (it looks them up
itself), any other on demand. There is no results actor: the driver polls
the RetryHandler and every broker worker (`reports`, driver/producer_reports.py).

A producer that heals (driver/producer.py) takes the last reports of an old pipeline
(`last_results`), kills it whole, and starts another under a new name.

Stop, in Sarama's order: the dispatchers, then each broker's BrokerWorker once its last writer
has gone, then the retry handler; every step bounded, and a step an actor's death breaks
is logged and skipped. Last, `kill_all` leaves no actor of the producer alive, those the
pipeline started itself too (found by the producer's name prefix).

Called by driver/producer.py only; calls Ray and the actors' control methods, never a message path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import ray

from ..actors.calls import pipeline_error
from ..actors.leader_dispatcher import LeaderDispatcher
from ..actors.options import PipelineContext, create
from ..actors.partition_dispatcher import PartitionDispatcher
from ..actors.producer_results import Reports
from ..actors.retry_handler import RetryHandler
from ..actors.topic_dispatcher import TopicDispatcher
from ..actors.transaction_owner import TransactionOwner
from ..wire.errors import KafkaError
from .producer_reports import ReportSources

log = logging.getLogger("raykafka.producer")

# the least time (s) a close's shutdown of the actors gets, and how long `kill_all` is given to see
# them gone, at close, in a heal and in a transactional pipeline's renewal
CLOSE_MIN = 5.0


def left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


class ProducerPipeline:
    def __init__(self, config: Mapping[str, Any], name: str, producer_id: tuple[int, int] | None = None):
        """`producer_id`: the (id, epoch) its actors number under, when a heal got it already
        (an epoch bump); else the TopicDispatcher asks the broker for one."""
        self.name = name
        ctx = PipelineContext(config=config, prefix=name + "/")
        if producer_id is not None:
            ctx.producer_id, ctx.producer_epoch = producer_id
        self.handles: list[Any] = []
        try:
            if config["transactional.id"] is not None:  # first: every actor below carries its handle
                ctx.transactions = create(TransactionOwner, "transaction_owner", ctx)
                self.handles.append(ctx.transactions)
            # they start at once (each is a process); then the driver takes its reference
            ctx.retry_handler = create(RetryHandler, "retry_handler", ctx)
            self.handles.append(ctx.retry_handler)
            ctx.leader_dispatcher = create(LeaderDispatcher, "leader_dispatcher", ctx)
            self.handles.append(ctx.leader_dispatcher)
            ctx.partition_dispatcher = create(PartitionDispatcher, "partition_dispatcher", ctx, "",
                                              ctx.leader_dispatcher)
            self.handles.append(ctx.partition_dispatcher)
            self.topic_dispatcher = create(TopicDispatcher, "topic_dispatcher", ctx)
            self.handles.insert(0, self.topic_dispatcher)
            ray.get([ctx.retry_handler.add_retry_writer.remote(),  # the driver's reference, released at close
                     ctx.retry_handler.set_topic_dispatcher.remote(self.topic_dispatcher)])
            self.producer_id, self.producer_epoch = ray.get(self.topic_dispatcher.ping.remote())
        except BaseException as exc:
            for handle in self.handles:
                ray.kill(handle, no_restart=True)
            cause = getattr(exc, "cause", None)
            if isinstance(cause, KafkaError):  # e.g. no broker reachable: say so, not "actor task failed"
                raise cause from None
            raise
        self.ctx = ctx
        self.reports = ReportSources(ctx.retry_handler, name)  # the mailboxes the driver polls

    def shut_down(self, stop_by: float, pending: Callable[[], int], dead_workers: list[str]) -> None:
        """Sarama's order, by `stop_by`: the dispatchers, the broker workers (waiting while
        messages are `pending` and a broker is open on a worker not among the `dead_workers`,
        whose brokers never let go), the retry handler.
        What a broken step held stays unresolved, for the caller to fail."""
        if not self._ask("closing the dispatchers", self.topic_dispatcher.shutdown.remote(), left(stop_by)):
            return
        rh = self.ctx.retry_handler
        if not self._ask("closing the broker workers", [rh.release_all.remote(), rh.drop_retry_writer.remote()], left(stop_by)):
            return
        # each living BrokerWorker answers what is in flight, then lets go; a dead one never does
        try:
            while (pending() and time.monotonic() < stop_by
                   and ray.get(rh.retry_writers.remote(dead_workers), timeout=left(stop_by)) > 0):
                time.sleep(0.02)
        except Exception as exc:
            log.warning("%s: close: the retry handler did not answer: %s", self.name, pipeline_error(exc))
            return
        self._ask("closing the retry handler", rh.shutdown.remote(), min(10.0, left(stop_by)))

    def last_results(self, timeout: float) -> Reports | None:
        """What the RetryHandler and every live broker worker still hold, in one `Reports`,
        each asked within `timeout` s (None if nothing could be taken). What a dead one held is
        lost (logged): those messages end by the heal's log scan, or fail naming the actor."""
        try:
            polled = self.reports.last(timeout)
        except Exception as exc:
            log.warning("%s: the last results were not taken: %s", self.name, pipeline_error(exc))
            return None
        for name, exc in polled.failed:
            log.warning("%s: the last results of %s were not taken: %s", self.name, name or "the retry handler",
                        pipeline_error(exc))
        return Reports([o for r in polled.reports for o in r.outcomes], [n for r in polled.reports for n in r.numbered])

    def kill_all(self, wait: float) -> None:
        """ray.kill every actor of this pipeline that is still alive (those its actors started too,
        found by name), then wait (up to `wait` s) until Ray lists none of them."""
        if not ray.is_initialized():
            return
        prefix = self.name + "/"

        def alive() -> list[str]:
            return [name for name in ray.util.list_named_actors() if name.startswith(prefix)]

        handles = list(self.handles)
        for name in alive():
            try:
                handles.append(ray.get_actor(name))
            except ValueError:  # died meanwhile
                continue
        for handle in handles:
            ray.kill(handle, no_restart=True)
        end = time.monotonic() + wait
        while alive() and time.monotonic() < end:
            time.sleep(0.02)

    def _ask(self, what: str, refs: Any, timeout: float) -> bool:
        """`ray.get(refs)` within `timeout` s; False (logged, not raised) if an actor died or did not answer."""
        try:
            ray.get(refs, timeout=timeout)
        except Exception as exc:
            log.warning("%s: close: %s failed: %s", self.name, what, pipeline_error(exc))
            return False
        return True
