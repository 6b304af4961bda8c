"""`MessageBatch`: what moves between the producer's actors, a small columnar batch.

Messages travel in batches, never one actor call per message. A batch holds one topic's
messages, column by column (ids, keys, values, timestamps, headers), and one retry count for
all of them: the flusher retries a whole record batch as one `MessageBatch`, so a retried batch
keeps the boundaries (and, with idempotence, the sequence numbers) it was first sent with.

Control messages travel in-band as batches without records, as in Sarama: `SYN` opens a
partition on a broker's flusher (clears its retry flag), `FIN` is the chaser that follows the
last message sent down an abandoned path, `SHUTDOWN` closes a broker's flusher after everything before it,
`RESET` tells a LeaderDispatcher that its producer id's sequence broke (OUT_OF_ORDER_SEQUENCE).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from ..wire.columns import BinaryColumn, HeaderColumn
from ..wire.errors import DeliveryTimeoutError, OutcomeUnknownError
from .idempotence import SEQUENCE_MASK
from .shared_column import SharedColumn, positions_at, read_shared

SYN = 1
FIN = 2
SHUTDOWN = 4
RESET = 8  # the broker lost track of this producer id's sequence on a partition: take a new id

RECORD_OVERHEAD = 21  # a v2 record's fixed bytes, generously (length, attributes, deltas, lengths)
BATCH_OVERHEAD = 61  # a v2 record batch header
REQUEST_OVERHEAD = 120  # a Produce request's header and topic/partition framing, roughly


def _pick(column: Any, idx: Sequence[int]) -> Any:
    """The entries of a column (a list, numpy array or range of ids, a Binary or SharedColumn) at `idx`."""
    if column is None:
        return None
    if isinstance(column, BinaryColumn | SharedColumn):
        return column.take(idx)
    if isinstance(column, range):
        return positions_at(column, np.asarray(idx, dtype=np.int64))
    if isinstance(column, np.ndarray):
        return column[np.asarray(idx, dtype=np.int64)]
    if len(idx) == 1:
        return [column[idx[0]]]
    return list(operator.itemgetter(*idx)(column))


def _join(columns: list[Any]) -> Any:
    """Columns of one kind joined end to end (mixed kinds become a list)."""
    if all(isinstance(c, SharedColumn) for c in columns):
        return SharedColumn.concat(columns)
    if any(isinstance(c, SharedColumn) for c in columns):  # rare: a large batch joins a small one
        columns = read_shared(columns)
    if all(isinstance(c, BinaryColumn) for c in columns):
        return BinaryColumn.concat(columns)
    if all(isinstance(c, range | np.ndarray) for c in columns):
        return _join_ids(columns)
    out: list = []
    for c in columns:
        out.extend(c.to_list() if isinstance(c, BinaryColumn | np.ndarray) else c)
    return out


def _join_ids(columns: list[range | np.ndarray]) -> range | np.ndarray:
    """Message ids end to end: one range while they run on, else an int64 array."""
    if all(isinstance(c, range) for c in columns) and all(
            a.stop == b.start for a, b in zip(columns, columns[1:])):  # noqa: B905 (one shorter)
        return range(columns[0].start, columns[-1].stop)
    return np.concatenate([np.arange(c.start, c.stop, dtype=np.int64) if isinstance(c, range) else c
                           for c in columns])


@dataclass
class MessageBatch:
    topic: str
    # message ids: a list, a numpy array, or a range while they run on (one int to pickle, not 8 bytes each)
    ids: Any = field(default_factory=list)
    values: Any = field(default_factory=list)  # a list of bytes/None, a BinaryColumn, or a SharedColumn (large ones)
    keys: Any = None  # the same, or None when every key is null
    timestamps: int | list[int] = 0  # one timestamp (ms) for all, or one per record
    headers: HeaderColumn | None = None  # each record's headers, encoded (None when no record has any)
    partition: int = -1  # -1 until partitioned
    partitions: list[int] | None = None  # explicit partitions asked for (-1: the partitioner decides)
    retries: int = 0  # rounds of the retry loop: its retry level (Sarama's msg.retries)
    uncounted: int = 0  # of those, rounds that were no retry (a cut, or held behind one): not in `retries`' budget
    flags: int = 0
    base_sequence: int = -1  # with idempotence: the first record's sequence, under producer_id/epoch
    producer_id: int = -1
    producer_epoch: int = -1
    numbering: int = 0  # which numbering of its partition the sequences belong to (see LeaderDispatcher)
    created_ms: int = 0  # when the oldest message was sent, for delivery.timeout.ms
    nbytes: int = 0  # record bytes (estimate), for batch.size and buffer accounting
    # the broker may have written it: a request that carried it got no answer, or a heal sends it
    # again after a dead pipeline (whose late request may still land); `timed_out` reads it
    possibly_written: bool = False

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def control(cls, topic: str, partition: int, flags: int, retries: int = 0) -> MessageBatch:
        return cls(topic=topic, partition=partition, flags=flags, retries=retries)

    @property
    def is_control(self) -> bool:
        return self.flags != 0

    @property
    def spent_retries(self) -> int:
        """The retries counted against `retries`: its rounds less those that were no retry."""
        return self.retries - self.uncounted

    def span(self) -> tuple[int, int, int, int] | None:
        """(producer id, numbering, base sequence, count) of a numbered batch, else None."""
        if self.producer_id < 0 or self.base_sequence < 0 or self.is_control:
            return None
        return self.producer_id, self.numbering, self.base_sequence, len(self.values)

    def follows(self, other: MessageBatch) -> bool:
        """Whether this batch's sequences continue `other`'s, so one record batch can hold both."""
        if self.base_sequence < 0 and other.base_sequence < 0:
            return True
        return (self.producer_id == other.producer_id and self.numbering == other.numbering
                and self.base_sequence == (other.base_sequence + len(other)) & SEQUENCE_MASK)

    def timestamp_list(self) -> list[int]:
        ts = self.timestamps
        return list(ts) if isinstance(ts, list) else [ts] * len(self.values)

    def earliest_ms(self) -> int:
        """The oldest time any of its records can carry in the log: its oldest timestamp, or when
        its oldest message was sent if that is older (a topic stamping log-append time stamps
        each record later than that); 0 when a record has no time of its own."""
        ts = self.timestamps
        oldest = min(ts, default=0) if isinstance(ts, list) else ts
        if oldest <= 0:
            return 0
        return min(oldest, self.created_ms) if self.created_ms > 0 else oldest

    def take(self, idx: Sequence[int], partition: int = -1) -> MessageBatch:
        """The records at `idx` (in that order), as a new batch (of `partition`, if given)."""
        ts = self.timestamps
        part = replace(
            self, ids=_pick(self.ids, idx), values=_pick(self.values, idx), keys=_pick(self.keys, idx),
            timestamps=_pick(ts, idx) if isinstance(ts, list) else ts, headers=_pick(self.headers, idx),
            partitions=None if partition >= 0 else _pick(self.partitions, idx),
            partition=partition if partition >= 0 else self.partition)
        if len(self.values):
            part.nbytes = self.nbytes * len(idx) // len(self.values)
        return part

    def slice(self, start: int, stop: int) -> MessageBatch:
        ts = self.timestamps
        seq = self.base_sequence
        part = replace(
            self, ids=self.ids[start:stop], values=self.values[start:stop],
            keys=None if self.keys is None else self.keys[start:stop],
            timestamps=ts[start:stop] if isinstance(ts, list) else ts,
            headers=None if self.headers is None else self.headers[start:stop],
            partitions=None if self.partitions is None else self.partitions[start:stop],
            base_sequence=seq if seq < 0 else (seq + start) & SEQUENCE_MASK)
        if len(self.values):
            part.nbytes = self.nbytes * (stop - start) // len(self.values)
        return part

    @classmethod
    def concat(cls, batches: list[MessageBatch]) -> MessageBatch:
        """One batch of `batches` in order (same topic and partition; the first one's sequence)."""
        if len(batches) == 1:
            return batches[0]
        first = batches[0]
        ids = _join([b.ids for b in batches])
        values = _join([b.values for b in batches])
        keys = None
        if any(b.keys is not None for b in batches):
            keys = _join([b.keys if b.keys is not None else [None] * len(b) for b in batches])
        headers = None
        if any(b.headers is not None for b in batches):
            headers = HeaderColumn.concat([b.headers if b.headers is not None else HeaderColumn.empty(len(b))
                                           for b in batches])
        stamps = {b.timestamps for b in batches if not isinstance(b.timestamps, list)}
        if len(stamps) == 1 and not any(isinstance(b.timestamps, list) for b in batches):
            timestamps: int | list[int] = stamps.pop()
        else:
            timestamps = []
            for b in batches:
                timestamps.extend(b.timestamp_list())
        return replace(first, ids=ids, values=values, keys=keys, headers=headers, timestamps=timestamps,
                       partitions=None, retries=max(b.retries for b in batches),
                       uncounted=max(b.retries for b in batches) - max(b.spent_retries for b in batches),
                       possibly_written=any(b.possibly_written for b in batches),
                       created_ms=min(b.created_ms for b in batches), nbytes=sum(b.nbytes for b in batches))


# what an OutcomeUnknownError made at a time-out or a close adds: why the outcome is unknown
MAY_BE_WRITTEN = "a request may have written it"


def timed_out(possibly_written: bool, delivery_timeout_ms: int | None, why: str) -> DeliveryTimeoutError:
    """The error of messages whose delivery.timeout.ms ran out, wherever they waited: an
    `OutcomeUnknownError` if the broker may have written them (`MessageBatch.possibly_written`),
    else a `DeliveryTimeoutError`, which says they are not in the log. `why` says where they waited."""
    if possibly_written:
        return OutcomeUnknownError(f"outcome unknown within delivery.timeout.ms={delivery_timeout_ms} "
                                   f"({MAY_BE_WRITTEN}): {why}")
    return DeliveryTimeoutError(f"not delivered within delivery.timeout.ms={delivery_timeout_ms}: {why}")


class ProduceSet(NamedTuple):
    """The batches of one Produce request: at most one record batch per partition."""

    batches: list[MessageBatch]


class Control(NamedTuple):
    """A control batch (a transaction marker, a partition's flush, the SHUTDOWN), in its place
    among the sets."""

    batch: MessageBatch


Entry = ProduceSet | Control  # what an AggregatorState hands its Flusher, in order
