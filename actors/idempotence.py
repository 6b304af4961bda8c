"""Idempotence: who numbers what, without Ray. The one place that knows the rules for the
producer id, its epoch and the sequence numbers.

- The TopicDispatcher asks the cluster for the producer id and epoch at start
  (wire/producer_id.py); every LeaderDispatcher starts its partitions' `PartitionSequences` from
  them.
- `PartitionSequences` (one per partition, in its LeaderDispatcherState) numbers each batch as it
  leaves, in the partition's order, and after a broken sequence decides whether to number anew
  under a new producer id (`reset`: only when every batch before the broken one has ended). A
  transactional producer cannot (`NoNewProducerId`): once the same batch is refused twice so,
  the partition is `broken` for this epoch, and its LeaderDispatcher fails its batches at once
  as abortable until the abort renews the epoch.
- `EndedSequences` (one in each mailbox where outcomes are decided: each BrokerWorker's and the
  RetryHandler's, actors/producer_results.py) knows, per partition and numbering, which
  sequences ended there; the RetryHandler merges them (`intervals`, `merge`) into the first
  sequence whose batch has not ended: what `reset` asks before it renumbers, since renumbering
  a batch whose earlier attempt may yet be written would write it twice.
- Each numbered batch is noted (`NumberedBatch`) by the BrokerWorker that receives it, before
  its bytes can reach a broker, and the driver polls the notes with the outcomes and keeps them
  until their messages end: a heal matches the old producer id's records in the log to
  messages by partition and sequence, exactly.
- The Flusher reports a broken sequence (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID)
  in-band, as a RESET batch back through the retry loop; a batch carries its own numbers
  (`MessageBatch.producer_id`, `producer_epoch`, `base_sequence`, `numbering`), so a retry goes
  out as it went the first time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..wire.errors import KafkaError
from ..wire.record_batch import SEQUENCE_MASK

log = logging.getLogger("raykafka.producer.idempotence")


class NoNewProducerId(KafkaError):
    """This producer cannot number anew under another id: a transactional producer's id and epoch
    come from init_transactions alone (the abort renews them)."""


class SequenceSpan(NamedTuple):
    """The sequence numbers of a numbered batch that ended."""

    topic: str
    partition: int
    producer_id: int
    numbering: int
    base: int
    count: int


class NumberedBatch(NamedTuple):
    """Which messages a numbered batch carries under which sequence numbers: the i-th id of
    `ids` is written as `base_sequence + i` of `producer_id`/`producer_epoch` in `topic`/`partition`. The
    BrokerWorker notes one as it takes the batch, before its bytes go, so that a healing producer can tell
    exactly which message a record of its old producer id in the log is
    (driver/producer_log_match.py `SequenceBook`). `earliest_ms`: the oldest timestamp among them,
    where a partition's scan for them may start (ListOffsets by time)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    ids: Any  # a list, range or numpy array of message ids
    earliest_ms: int


def numbered_batch(batch: Any) -> NumberedBatch | None:
    """The note of a numbered MessageBatch, else None."""
    if batch.producer_id < 0 or batch.base_sequence < 0 or batch.is_control or not len(batch.ids):
        return None
    return NumberedBatch(batch.topic, batch.partition, batch.producer_id, batch.producer_epoch,
                         batch.base_sequence, batch.ids, batch.earliest_ms())


def sequence_span(batch: Any) -> SequenceSpan | None:
    """The sequence numbers of a numbered MessageBatch, else None."""
    span = batch.span()
    return None if span is None else SequenceSpan(batch.topic, batch.partition, *span)


class PartitionSequences:
    """One partition's producer id, epoch and next sequence number.

    `numbering` says which numbering a batch's sequences belong to: a restarted broker may hand
    out the same producer id and epoch again, so the id alone cannot tell an old numbering from
    the new."""

    def __init__(self, producer_id: int = -1, producer_epoch: int = -1, path: str = "producer/idempotence"):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.next_sequence = 0
        self.numbering = 0
        self.path = path
        # why no batch of this epoch can be written in the partition any more: its sequence broke
        # twice at the same batch with every batch before it ended, and it cannot number anew
        # (`NoNewProducerId`)
        self.broken: str | None = None
        self._broken_once: tuple[int, int] | None = None  # (numbering, base sequence) of the first such break

    def number(self, batch: Any) -> None:
        """Give `batch` its sequences as it leaves, unless it carries this numbering's already
        (a retry keeps the numbers it was first sent with)."""
        if self.producer_id < 0 or batch.is_control:
            return
        if batch.base_sequence >= 0 and batch.producer_id == self.producer_id and batch.numbering == self.numbering:
            return
        batch.base_sequence = self.next_sequence
        batch.producer_id, batch.producer_epoch = self.producer_id, self.producer_epoch
        batch.numbering = self.numbering
        self.next_sequence = (self.next_sequence + len(batch)) & SEQUENCE_MASK

    def reset(self, broken: int, numbering: int, base_sequence: int,
              first_unresolved: Callable[[int, int], int], new_producer_id: Callable[[], tuple[int, int]]) -> bool:
        """The broker answered OUT_OF_ORDER_SEQUENCE_NUMBER (or UNKNOWN_PRODUCER_ID) for the batch at
        `base_sequence` of producer `broken`'s `numbering`. If a batch before it has not ended
        yet, that batch comes round again and the sequence heals: nothing to do. If every batch
        before it has ended, the broker lost this producer's sequence: number from 0 under a new
        producer id (not a local epoch bump: tansu fences those for good). True if renumbered."""
        if broken != self.producer_id or self.producer_id < 0 or numbering != self.numbering or self.broken:
            return False  # stale: the partition already numbers anew (or can no more)
        try:
            first = first_unresolved(self.producer_id, self.numbering)
        except Exception as exc:  # cannot tell: keep the id, the batch is retried and asks again
            log.warning("%s cannot tell whether the sequence is broken: %s", self.path, exc)
            return False
        if first != base_sequence:
            log.info("%s sequence %d out of order behind unresolved sequence %d: retrying", self.path,
                     base_sequence, first)
            return False
        try:
            self.producer_id, self.producer_epoch = new_producer_id()
        except NoNewProducerId as exc:
            # the first time, the batch before may have landed since the broker refused this one
            # (ended as written, not failed): its retry then goes through. Refused again with
            # nothing unresolved before it, the gap is real: a batch before it failed for good
            if self._broken_once != (numbering, base_sequence):
                self._broken_once = (numbering, base_sequence)
                log.info("%s sequence broke at %d with every batch before it ended: retrying it once", self.path,
                         base_sequence)
                return False
            self.broken = (f"{self.path}: the sequence broke twice at {base_sequence} of producer {self.producer_id} "
                           f"epoch {self.producer_epoch} with every batch before it ended (one failed for good), "
                           f"and {exc}: no batch of this epoch can be written here; abort the transaction")
            log.warning("%s", self.broken)
            return False
        except KafkaError as exc:
            log.warning("%s cannot get a new producer id: %s", self.path, exc)
            return False
        self.next_sequence = 0
        self.numbering += 1
        log.info("%s state change to [producer id %d]", self.path, self.producer_id)
        return True


@dataclass
class EndedFront:
    """One numbering's ended sequences: all before `first_unresolved`, and spans beyond it."""

    first_unresolved: int = 0
    beyond: dict[int, int] = field(default_factory=dict)  # base -> end of a span ended past the front

    def end(self, start: int, end: int) -> None:
        """[start, end) ended: the front moves over every span that now joins it."""
        if start != self.first_unresolved:
            self.beyond.setdefault(start, end)
        else:
            self.first_unresolved = end
        while self.first_unresolved in self.beyond:
            self.first_unresolved = self.beyond.pop(self.first_unresolved)


class EndedSequences:
    """Per (topic, partition, producer id, numbering): the first sequence whose batch has not
    ended, and the spans that ended beyond it."""

    def __init__(self) -> None:
        self._fronts: dict[tuple[str, int, int, int], EndedFront] = {}

    def ended(self, span: SequenceSpan) -> None:
        topic, partition, producer_id, numbering, base, count = span
        front = self._fronts.setdefault((topic, partition, producer_id, numbering), EndedFront())
        front.end(base, (base + count) & SEQUENCE_MASK)

    def first_unresolved(self, topic: str, partition: int, producer_id: int, numbering: int) -> int:
        front = self._fronts.get((topic, partition, producer_id, numbering))
        return 0 if front is None else front.first_unresolved

    def intervals(self) -> list[tuple[tuple[str, int, int, int], int, int]]:
        """What ended, as (key, start, end) intervals: [0, first unresolved) and each span beyond."""
        out = []
        for key, front in self._fronts.items():
            if front.first_unresolved:
                out.append((key, 0, front.first_unresolved))
            out.extend((key, base, end) for base, end in front.beyond.items())
        return out

    def merge(self, intervals: list[tuple[tuple[str, int, int, int], int, int]]) -> None:
        """Take in what ended elsewhere (another's `intervals`)."""
        for key, start, end in intervals:
            self._fronts.setdefault(tuple(key), EndedFront()).end(start, end)
