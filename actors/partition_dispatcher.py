"""PartitionDispatcher: one per topic. Partitions the topic's messages with the configured
partitioner (an explicit `partition=` wins) and dispatches each partition's messages to that
partition's LeaderDispatcher.

Called by the TopicDispatcher only, so it sees one ordered stream, in which new messages and
retried ones (already partitioned, passed straight through) interleave. Calls the
LeaderDispatchers (created on a partition's first message) and the ProducerResults (a message
asking for a partition the topic does not have fails here, alone). Keeps the order of each
partition's messages as they arrived.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..wire.errors import UnknownTopicError
from ..wire.partitioners import get_partitioner
from .batch import MessageBatch


class PartitionDispatcher:
    def __init__(self, ctx: Any, topic: str, num_partitions: int):
        self.ctx = ctx
        self.topic = topic
        self.num_partitions = num_partitions
        spec = ctx.config["partitioner"]
        self.partitioner = None if callable(spec) else get_partitioner(spec)
        self.custom = spec if callable(spec) else None
        self.leaders: dict[int, Any] = {}
        self.windows: dict[int, Any] = {}

    def ping(self) -> bool:
        return True

    def dispatch(self, batches: list[MessageBatch]) -> None:
        for batch in batches:
            if batch.partition >= 0:  # a retry, or a control message: already partitioned
                self._forward(batch.partition, batch)
                continue
            for partition, part in self.partition(batch):
                self._forward(partition, part)

    def partition(self, batch: MessageBatch) -> list[tuple[int, MessageBatch]]:
        """`batch` cut by partition, each part in arrival order; bad explicit partitions fail here."""
        n = self.num_partitions
        keys = batch.keys if batch.keys is not None else [None] * len(batch)
        if self.custom is not None:
            chosen = [int(self.custom(k, n)) for k in keys]
        else:
            chosen = self.partitioner.partition_many(keys, n)
        parts = np.asarray(chosen, dtype=np.int64)
        if batch.partitions is not None:
            explicit = np.asarray(batch.partitions, dtype=np.int64)
            parts = np.where(explicit >= 0, explicit, parts)
            bad = (explicit < -1) | (explicit >= n)
            if bad.any():
                for p in np.unique(explicit[bad]).tolist():
                    idx = np.flatnonzero(explicit == p).tolist()
                    failed = batch.take(idx)
                    self.ctx.results.report.remote([(failed.ids, self.topic, int(p), -1, -1, UnknownTopicError(
                        f"topic {self.topic!r} has no partition {p} (it has {n})"))])
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

    def _forward(self, partition: int, batch: MessageBatch) -> None:
        leader = self.leaders.get(partition)
        if leader is None:
            from .calls import CallWindow
            from .leader_dispatcher import LeaderDispatcher
            from .options import create

            leader = create(LeaderDispatcher, "leader_dispatcher", self.ctx, f"{self.topic}-{partition}",
                            self.topic, partition)
            self.leaders[partition] = leader
            self.windows[partition] = CallWindow(self.ctx.window)
        self.windows[partition].submit(leader.dispatch.remote([batch]))

    def shutdown(self) -> None:
        import ray

        for partition, leader in self.leaders.items():
            self.windows[partition].drain()
            ray.get(leader.shutdown.remote())
            ray.kill(leader, no_restart=True)
        self.leaders.clear()
