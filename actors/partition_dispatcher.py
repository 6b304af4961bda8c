"""PartitionDispatcher: one per producer. Partitions each topic's messages with the configured
partitioner (an explicit `partition=` wins) and dispatches each partition's messages to that
partition's state in the LeaderDispatcher.

Every topic's partitioner lives here as a `TopicPartitioner` (Ray-free): a new topic adds one,
never a process. The TopicDispatcher adds a topic (`add_topic`, once its metadata says how many
partitions it has) before it forwards the topic's first batch here.

Called by the TopicDispatcher, and by the driver once it has the topic's route
(`TopicDispatcher.route`, given only after the TopicDispatcher's calls here are done): new
messages come as one ordered stream per topic, first through the one, then from the other;
retried ones (already partitioned, passed straight through) interleave with them. Calls the
LeaderDispatcher (one call per `dispatch`, every topic's parts together) and the
RetryHandler's mailbox (`report`: a message asking for a partition its topic does not have
fails here, alone; the driver polls it there).
Keeps the order of each partition's messages as they arrived.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import ray

from ..wire.columns import BinaryColumn
from ..wire.errors import UnknownTopicError
from ..wire.partitioners import get_partitioner
from .batch import MessageBatch
from .calls import CallWindow, pipeline_error
from .producer_results import Outcome, report_failed

Fail = Callable[[list[Outcome]], None]  # reports messages that cannot be partitioned


class TopicPartitioner:
    """One topic's partitioning, without Ray: its partition count and partitioner state (the
    sticky partitioner's current partition, say)."""

    def __init__(self, topic: str, num_partitions: int, spec: Any, sticky_linger_ms: int):
        self.topic = topic
        self.num_partitions = num_partitions
        self.custom = spec if callable(spec) else None
        self.partitioner = None if self.custom is not None else get_partitioner(spec, sticky_linger_ms)

    def partition(self, batch: MessageBatch, fail: Fail) -> list[tuple[int, MessageBatch]]:
        """`batch` cut by partition, each part in arrival order; bad explicit partitions `fail` here."""
        n = self.num_partitions
        keys = batch.keys if batch.keys is not None else [None] * len(batch)
        if self.custom is not None:
            parts = np.asarray([int(self.custom(k, n)) for k in keys], dtype=np.int64)
        elif isinstance(keys, BinaryColumn):
            parts = self.partitioner.partition_column(keys, n)
        else:
            parts = np.asarray(self.partitioner.partition_many(keys, n), dtype=np.int64)
        if batch.partitions is not None:
            explicit = np.asarray(batch.partitions, dtype=np.int64)
            parts = np.where(explicit >= 0, explicit, parts)
            bad = (explicit < -1) | (explicit >= n)
            if bad.any():
                for p in np.unique(explicit[bad]).tolist():
                    idx = np.flatnonzero(explicit == p).tolist()
                    fail([Outcome.failed(batch.take(idx).ids, UnknownTopicError(
                        f"topic {self.topic!r} has no partition {p} (it has {n})"), self.topic, int(p))])
                keep = np.flatnonzero(~bad)
                if not len(keep):
                    return []
                batch = batch.take(keep.tolist())
                parts = parts[keep]
        if len(parts) and (parts == parts[0]).all():
            batch.partition, batch.partitions = int(parts[0]), None
            return [(int(parts[0]), batch)]
        order = np.argsort(parts, kind="stable")
        bounds = np.flatnonzero(np.diff(parts[order])) + 1
        return [(int(parts[idx[0]]), batch.take(idx.tolist(), int(parts[idx[0]])))
                for idx in np.split(order, bounds)]


class PartitionDispatcher:
    """The actor: a `TopicPartitioner` per topic, and the window of calls to the LeaderDispatcher."""

    def __init__(self, ctx: Any, leader: Any):
        self.ctx = ctx
        self.topics: dict[str, TopicPartitioner] = {}
        self.leader = leader  # the LeaderDispatcher, started beside this actor
        self.window = CallWindow(ctx.window, self._call_failed)

    def ping(self) -> bool:
        return True

    def add_topic(self, topic: str, num_partitions: int) -> None:
        """The TopicDispatcher looked the topic up: partition its messages from now on; or the
        topic grew (a later look-up): its next messages go over all its partitions."""
        known = self.topics.get(topic)
        if known is not None:
            known.num_partitions = max(known.num_partitions, num_partitions)
            return
        config = self.ctx.config
        self.topics[topic] = TopicPartitioner(topic, num_partitions, config["partitioner"],
                                              config["sticky.partitioning.linger.ms"])

    def dispatch(self, batches: list[MessageBatch]) -> None:
        parts: list[MessageBatch] = []
        for batch in batches:
            if batch.partition >= 0:  # a retry, or a control message: already partitioned
                parts.append(batch)
                continue
            # added before any of its batches comes: by the TopicDispatcher before it forwards
            # them, and before it hands the driver this actor as the topic's route
            partitioner = self.topics[batch.topic]
            parts.extend(part for _, part in partitioner.partition(batch, self._report))
        if parts:
            self.window.submit(self.leader.dispatch.remote(parts), parts)

    def partition(self, batch: MessageBatch) -> list[tuple[int, MessageBatch]]:
        """`batch` cut by partition by its topic's partitioner (which must have been added)."""
        return self.topics[batch.topic].partition(batch, self._report)

    def _report(self, outcomes: list[Outcome]) -> None:
        self.ctx.retry_handler.report.remote(outcomes)

    def _call_failed(self, parts: list[MessageBatch], exc: BaseException) -> None:
        """A call to the LeaderDispatcher failed (it died, say): its own batches fail with why."""
        report_failed(self.ctx.retry_handler.report.remote, parts, pipeline_error(exc))

    def shutdown(self) -> None:
        """Close the LeaderDispatcher once every call to it has been taken."""
        self.window.drain()
        try:
            ray.get(self.leader.shutdown.remote())  # raises if it died: the TopicDispatcher says so
        finally:
            ray.kill(self.leader, no_restart=True)
