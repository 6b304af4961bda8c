"""What a `Producer` needs to heal its pipeline after an actor died: the batches it handed on,
kept until their messages end, and what the log says of those a dead actor left unanswered.

Cardinality: one `KeptBatches` per Producer, written by its sender thread (`keep`, `prune`)
and read by its healer (`unresolved`), both under the Producer's lock. `written_outcomes`
is Ray-free and does no I/O: the healer hands it the records the old producer id left in the
log (`wire.fetch.records_of_producer`, from each partition's last acknowledged offset on).

Why the log is asked: a Flusher that dies with Produce requests in flight leaves their outcome
unknown; the broker may have written them. Sent again under a new producer id they would be
written twice. With idempotence the old producer id's records after the last acknowledged
offset of a partition are exactly the messages written but never acknowledged there, and they
are the earliest unacknowledged messages of that partition (an idempotent producer's sequence
admits no gap). Each such record is matched to the earliest unresolved message of the topic
with the same key and value (and timestamp, unless the topic stamps log-append time), which then ends as delivered at the record's offset;
the rest are sent again, in id order, through the healed pipeline. Two messages alike in
key, value and timestamp are interchangeable here: which one is said delivered first changes
no byte in the log. Without idempotence the log cannot tell whose records they are; the
unresolved messages are all sent again (at least once).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from ..actors.batch import MessageBatch
from ..actors.producer_results import Outcome
from ..actors.shared_column import SharedColumn, read_shared
from ..wire.columns import BinaryColumn
from ..wire.fetch import WrittenRecord
from .producer_ledger import Ledger

TopicPartition = tuple[str, int]


class Heal(NamedTuple):
    """One rebuild of a producer's pipeline, as `Producer.heals_done` lists them."""

    cause: str  # what was seen dead
    seconds: float  # from the rebuild's start until the messages went again
    found_in_log: int  # unanswered messages the log held, ended as delivered
    sent_again: int  # unanswered messages sent again through the new pipeline
    producer_ids: tuple[int, int]  # (old, new)


class KeptBatches:
    """The batches handed to the pipeline, in the order they were handed on, until every message
    of each has ended (their values stay referenced here, as their bytes stay counted in
    buffer.memory)."""

    def __init__(self) -> None:
        self.batches: deque[MessageBatch] = deque()
        self._pruned_at = 64  # prune once this many are kept; then at twice what was left

    def __len__(self) -> int:
        return len(self.batches)

    def keep(self, batches: Iterable[MessageBatch], ledger: Ledger) -> None:
        self.batches.extend(batches)
        if len(self.batches) >= self._pruned_at:
            self.prune(ledger)

    def prune(self, ledger: Ledger) -> None:
        """Drop the batches whose messages have all ended."""
        self.batches = deque(b for b in self.batches if len(ledger.open_positions(b.ids)))
        self._pruned_at = max(64, 2 * len(self.batches))

    def unresolved(self, ledger: Ledger) -> list[MessageBatch]:
        """The messages of the kept batches not yet ended, as batches in id order (each topic's
        order kept), fresh for a new pipeline: no partition, no sequence, no retry count."""
        out = []
        for batch in self.batches:
            idx = ledger.open_positions(batch.ids)
            if not len(idx):
                continue
            part = batch if len(idx) == len(batch) else batch.take(idx.tolist())
            out.append(MessageBatch(topic=part.topic, ids=part.ids, values=part.values, keys=part.keys,
                                    timestamps=part.timestamps, headers=part.headers, partitions=part.partitions,
                                    created_ms=part.created_ms, nbytes=part.nbytes))
        self.batches = deque(out)
        return out


def acked_ends(ends: dict[TopicPartition, int], entries: Iterable[Outcome]) -> None:
    """Note in `ends` where each partition's acknowledged messages end (the offset after the last)."""
    for ids, topic, partition, first_offset, _append, error in entries:
        if error is None and first_offset >= 0:
            end = first_offset + len(ids)
            if end > ends.get((topic, partition), -1):
                ends[(topic, partition)] = end


def written_outcomes(batches: Iterable[MessageBatch],
                     written: Mapping[TopicPartition, list[WrittenRecord]]) -> list[Outcome]:
    """The unresolved messages of `batches` (in id order) that the log holds (`written`, the old
    producer id's records per partition after its last acknowledged offset), each as delivered
    at its record's offset (see the module's docstring)."""
    waiting: dict[tuple[str, Any, Any], list[tuple[int, int]]] = defaultdict(list)  # -> [(id, timestamp)]
    for batch in batches:
        values, keys = _as_list(batch.values), _as_list(batch.keys)
        stamps = batch.timestamp_list()
        for i, mid in enumerate(_id_list(batch.ids)):
            waiting[(batch.topic, None if keys is None else keys[i], values[i])].append((mid, stamps[i]))
    found: list[Outcome] = []
    for (topic, partition), records in written.items():
        for rec in records:
            alike = waiting.get((topic, rec.key, rec.value))
            if not alike:
                continue
            # the earliest with the record's timestamp; else (a topic stamping log-append time) the earliest
            at = next((i for i, (_, ts) in enumerate(alike) if ts == rec.timestamp), 0)
            found.append(Outcome([alike.pop(at)[0]], topic, partition, rec.offset))
    return found


def _id_list(ids: Any) -> list[int]:
    if isinstance(ids, range | np.ndarray):
        return [int(i) for i in ids]
    return list(ids)


def _as_list(column: Any) -> list | None:
    if column is None:
        return None
    if isinstance(column, SharedColumn):
        column = read_shared([column])[0]
    if isinstance(column, BinaryColumn):
        return column.to_list()
    return list(column)


SETTLE_S = 0.25  # the pause before the log is read again for records that landed late


def scan_written(config: Any, producer_id: int, batches: list[MessageBatch],
                 ends: Mapping[TopicPartition, int]) -> dict[TopicPartition, list[WrittenRecord]]:
    """The records `producer_id` left in the log after each partition's acknowledged end
    (`ends`; a partition without one is read from its log's start), for every partition of the
    topics of `batches`.

    A dead Flusher's last requests may still be on their way when the log is first read: its
    process is gone, but the bytes it wrote to its socket reach the broker after it. So the
    log is read again, `SETTLE_S` after each read, from past what was found, until a read finds
    nothing more; then every request that had left the process has been written or never will
    be. (A chaos test under CI's load once saw a first read alone miss 460 such records, which
    were then sent again and written twice.) Each read of a partition is bounded by
    `request.timeout.ms`, and so are the reads again, all together.

    This narrows the window; it cannot close it. A broker would close it by fencing the old epoch
    (KIP-360: InitProducerId with the old id and epoch), but tansu answers that
    UNKNOWN_SERVER_ERROR and goes on writing the old epoch (tests/integration/test_cluster.py);
    only a `transactional.id` fences a dead writer there."""
    import asyncio

    from ..wire.cluster import Cluster
    from ..wire.fetch import records_of_producer
    from ..wire.loop import LoopThread

    topics = sorted({b.topic for b in batches})
    if not topics:
        return {}
    timeout = config["request.timeout.ms"] / 1000

    async def scan(cluster: Cluster) -> dict[TopicPartition, list[WrittenRecord]]:
        wanted = [(t, p) for t in topics for p in sorted((await cluster.topic(t, refresh=True)).partitions)]
        starts = {tp: ends.get(tp, 0) for tp in wanted}
        found: dict[TopicPartition, list[WrittenRecord]] = defaultdict(list)
        deadline = asyncio.get_running_loop().time() + timeout
        first = True
        while True:
            read = await asyncio.gather(*(
                records_of_producer(cluster, t, p, starts[(t, p)], producer_id,
                                    config["max.decompressed.batch.bytes"]) for t, p in wanted))
            for tp, records in zip(wanted, read, strict=True):
                if records:
                    found[tp].extend(records)
                    starts[tp] = records[-1].offset + 1
            if (not first and not any(read)) or asyncio.get_running_loop().time() + SETTLE_S > deadline:
                return dict(found)
            first = False
            await asyncio.sleep(SETTLE_S)

    loop = LoopThread("raykafka-heal")
    cluster = Cluster(config)
    try:
        return loop.run(scan(cluster), timeout=3 * timeout + 5)
    finally:
        loop.run(cluster.close(), timeout=5)
        loop.stop()
