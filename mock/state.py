"""The cluster state every mock broker shares: topics, their partitions' leaders and logs, and
each idempotent producer's sequences per partition, checked as Kafka checks them."""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..wire.record_decoding import decode_record_batches

# Kafka's broker keeps the metadata of this many batches per producer and partition
# (ProducerStateEntry.NUM_BATCHES_TO_RETAIN): a re-sent batch among them is a duplicate, an older one
# is out of order.
BATCHES_TO_RETAIN = 5


@dataclass(frozen=True)
class _BatchMetadata:
    first_sequence: int
    last_sequence: int
    base_offset: int


@dataclass
class ProducerState:
    """Per (producer id, partition): the epoch, the next expected sequence, and the last
    `BATCHES_TO_RETAIN` batches written, as Kafka keeps them."""

    epoch: int
    next_sequence: int = 0
    written: deque[_BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))

    def duplicate_of(self, first_sequence: int, last_sequence: int) -> _BatchMetadata | None:
        """The retained batch with exactly these sequences (a re-sent batch), if any."""
        for kept in self.written:
            if (kept.first_sequence, kept.last_sequence) == (first_sequence, last_sequence):
                return kept
        return None

    def appended(self, first_sequence: int, count: int, base_offset: int) -> None:
        last = (first_sequence + count - 1) & 0x7FFFFFFF
        self.written.append(_BatchMetadata(first_sequence, last, base_offset))
        self.next_sequence = (last + 1) & 0x7FFFFFFF


@dataclass
class PartitionState:
    """One partition: its leader and its log of record batches (base offsets already assigned)."""

    leader: int
    leader_epoch: int = 0
    batches: list[bytes] = field(default_factory=list)
    next_offsets: list[int] = field(default_factory=list)  # next_offsets[i]: offset after batch i
    log_start_offset: int = 0
    producers: dict[int, ProducerState] = field(default_factory=dict)
    _transactions: tuple[int, Any] | None = None  # (batches read, what `transactions` found)

    @property
    def high_watermark(self) -> int:
        return self.next_offsets[-1] if self.next_offsets else self.log_start_offset

    def transactions(self) -> tuple[int, list[tuple[int, int, int]]]:
        """From the log: the last stable offset, and every aborted transaction as (producer id,
        first offset, its marker's offset). Read again only when the log has grown."""
        if self._transactions is not None and self._transactions[0] == len(self.batches):
            return self._transactions[1]
        open_at: dict[int, int] = {}
        aborted: list[tuple[int, int, int]] = []
        for raw in self.batches:
            (batch,) = decode_record_batches(raw, check_crc=False)
            if not batch.is_transactional:
                continue
            if batch.is_control:
                first = open_at.pop(batch.producer_id, None)
                if first is not None and batch.is_abort_marker:
                    aborted.append((batch.producer_id, first, batch.base_offset))
            else:
                open_at.setdefault(batch.producer_id, batch.base_offset)
        found = min(open_at.values(), default=self.high_watermark), aborted
        self._transactions = (len(self.batches), found)
        return found


@dataclass
class TopicState:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionState]
    configs: dict[str, str] = field(default_factory=dict)  # its dynamic configs: what DescribeConfigs lists
