"""PartitionDispatcher: one per topic. Partitions the topic's messages with the configured
partitioner (an explicit `partition=` wins) and dispatches each partition's messages to that
partition's state in the topic's LeaderDispatcher.

Called by the TopicDispatcher, and by the driver once it has the route (`TopicDispatcher.route`,
given only after the TopicDispatcher's calls here are done): new messages come as one ordered
stream, first through the one, then from the other; retried ones (already partitioned, passed
straight through) interleave with them. Calls the
LeaderDispatcher (created on the topic's first message) and the ProducerResults (a message
asking for a partition the topic does not have fails here, alone). Keeps the order of each
partition's messages as they arrived.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..wire.columns import BinaryColumn
from ..wire.errors import UnknownTopicError
from ..wire.partitioners import get_partitioner
from .batch import MessageBatch
from .producer_results import Outcome


class PartitionDispatcher:
    def __init__(self, ctx: Any, topic: str, num_partitions: int, leader: Any = None):
        self.ctx = ctx
        self.topic = topic
        self.num_partitions = num_partitions
        spec = ctx.config["partitioner"]
        self.partitioner = None if callable(spec) else get_partitioner(
            spec, ctx.config["sticky.partitioning.linger.ms"])
        self.custom = spec if callable(spec) else None
        self.leader: Any = leader  # the topic's LeaderDispatcher (started by the TopicDispatcher alongside this one)
        self.window: Any = None

    def ping(self) -> bool:
        return True

    def dispatch(self, batches: list[MessageBatch]) -> None:
        parts: list[MessageBatch] = []
        for batch in batches:
            if batch.partition >= 0:  # a retry, or a control message: already partitioned
                parts.append(batch)
                continue
            parts.extend(part for _, part in self.partition(batch))
        if parts:
            self._leaders().submit(self.leader.dispatch.remote(parts), parts)

    def partition(self, batch: MessageBatch) -> list[tuple[int, MessageBatch]]:
        """`batch` cut by partition, each part in arrival order; bad explicit partitions fail here."""
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
                    failed = batch.take(idx)
                    self.ctx.results.report.remote([Outcome.failed(failed.ids, UnknownTopicError(
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

    def _leaders(self) -> Any:
        """The window of calls to the topic's LeaderDispatcher (started here if not given)."""
        if self.window is None:
            from .calls import CallWindow
            from .leader_dispatcher import LeaderDispatcher
            from .options import create

            if self.leader is None:
                self.leader = create(LeaderDispatcher, "leader_dispatcher", self.ctx, self.topic, self.topic)
            self.window = CallWindow(self.ctx.window, self._call_failed)
        return self.window

    def _call_failed(self, parts: list[MessageBatch], exc: BaseException) -> None:
        """A call to the LeaderDispatcher failed (it died, say): its own batches fail with why."""
        from .calls import pipeline_error
        from .producer_results import report_failed

        report_failed(self.ctx.results, parts, pipeline_error(exc))

    def shutdown(self) -> None:
        import ray

        if self.leader is not None:
            self._leaders().drain()
            try:
                ray.get(self.leader.shutdown.remote())  # raises if it died: the TopicDispatcher says so
            finally:
                ray.kill(self.leader, no_restart=True)
                self.leader = None
