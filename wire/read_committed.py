"""read_committed: which fetched batches of a partition a consumer may hand out.

Cardinality: one `CommittedFilter` per partition per Fetch response. A consumer that fetches
with isolation_level 1 (read_committed) builds it from that partition's `aborted_transactions`
(producer_id, first_offset) and asks `keep(batch)` for each decoded batch, in offset order.
It calls nothing and holds no I/O; it works on any batch object with the attributes of
`records.RecordBatch` named in `Batch`, whichever decoder made it.

The rule is Java's (`CompletedFetch.nextFetchedRecord` in the consumer's Fetcher):
- the aborted transactions are taken in order of first_offset; before a batch of a producer
  is judged, every aborted transaction that began at or before the batch's last offset marks
  its producer id as aborted;
- a transactional batch of a producer marked aborted is dropped;
- that producer's abort marker (a control batch of type abort) unmarks it: its later batches
  belong to a later transaction;
- control batches are never handed out (commit markers and abort markers alike).
A batch with no producer id, or not transactional, is kept (unless it is a control batch).

Dropped batches still move the fetch position past themselves: the caller advances by every
batch's `next_offset`, kept or not.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple, Protocol, TypeVar

NO_PRODUCER_ID = -1


class AbortedTransaction(NamedTuple):
    """An entry of a Fetch response's `aborted_transactions` (a decoded entry has the same names)."""

    producer_id: int
    first_offset: int


class Batch(Protocol):
    """What the filter reads of a batch (`records.RecordBatch` has all of it)."""

    @property
    def last_offset(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...
    @property
    def is_abort_marker(self) -> bool: ...


B = TypeVar("B", bound=Batch)


class CommittedFilter:
    """The batches of one partition's fetch that belong to no aborted transaction."""

    def __init__(self, aborted_transactions: Iterable[Any] | None):
        # (first_offset, producer_id), smallest first_offset first
        self._pending: list[tuple[int, int]] = [(a.first_offset, a.producer_id) for a in aborted_transactions or ()]
        heapq.heapify(self._pending)
        self._aborted: set[int] = set()  # producer ids whose open transaction aborted

    def keep(self, batch: Batch) -> bool:
        """Whether `batch` is handed out; call for every batch, in offset order."""
        if batch.producer_id != NO_PRODUCER_ID:
            while self._pending and self._pending[0][0] <= batch.last_offset:
                self._aborted.add(heapq.heappop(self._pending)[1])
            if batch.is_abort_marker:
                self._aborted.discard(batch.producer_id)
            elif batch.is_transactional and batch.producer_id in self._aborted:
                return False
        return not batch.is_control

    def filter(self, batches: Iterable[B]) -> Iterator[B]:
        return (b for b in batches if self.keep(b))


def committed_batches(batches: Iterable[B], aborted_transactions: Iterable[Any] | None) -> list[B]:
    """The batches of one partition's fetch that a read_committed consumer hands out."""
    return list(CommittedFilter(aborted_transactions).filter(batches))
