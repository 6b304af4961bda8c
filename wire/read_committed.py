"""read_committed: which fetched batches of a partition a consumer may hand out.

Cardinality: one `CommittedReader` per partition of a read_committed consumer (isolation_level
1), fed every Fetch response's batches of that partition in offset order, with the response's
`aborted_transactions` (producer_id, first_offset). It calls nothing and does no I/O; it works
on any batch object with the attributes of `record_batch.RecordBatch` named in `Batch`, whichever
decoder made it. The caller advances its fetch position past every batch it fed, kept or not:
the reader holds what it cannot decide yet.

Two rules decide whether a transactional batch is handed out:

- Java's (`CompletedFetch.nextFetchedRecord` in the consumer's Fetcher), `CommittedFilter`: the
  aborted transactions of the response are taken in order of first_offset; before a batch of a
  producer is judged, every aborted transaction that began at or before the batch's last offset
  marks its producer id as aborted; a transactional batch of a producer marked aborted is
  dropped; that producer's abort marker unmarks it (its later batches belong to a later
  transaction). It decides every batch at once, and is only as right as the broker's list.

- By markers (`by_markers=True`): a transactional batch is handed out once its producer's next
  control batch is seen and is a commit marker, dropped if it is an abort marker, and held until
  then (with every batch after it, to keep offset order). Below the last stable offset every
  transaction has its marker, so this needs no list at all. tansu 0.6.0 needs it: it writes
  the markers and serves aborted records, but answers every Fetch with an empty
  `aborted_transactions`, so Java's rule (and librdkafka's) hands out aborted records there.
  The cost: a batch waits for its marker, which a read_committed fetch sees only once every
  transaction open before the marker has ended.

Which rule (`CommittedReader(by_markers=None)`, what the consumers use): by markers until a
Fetch response lists an aborted transaction, which shows that the broker keeps the list (Kafka
does); from then on, Java's rule, which holds nothing back. A broker that lists none (tansu
0.6.0) is read by markers throughout, and is read right either way.

Either way, control batches are never handed out, and a batch without a producer id, or not
transactional, is kept.

`fetched_batches` reads a Fetch response's `records` into `FetchedBatch`es from the batch
headers alone (a control batch's one record for its marker), each with its own bytes, so the
consumers (`fetcher.PartitionFetch`) filter bytes before any decoding: the Arrow decoder then
reads only what is handed out.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

from .record_batch import ATTR_CONTROL, CONTROL_ABORT, CONTROL_COMMIT, LENGTH_OFFSET, BatchFlags, control_type
from .record_batch_reader import read_batch_header
from .record_decoding import decode_record_batches

NO_PRODUCER_ID = -1
NOT_A_MARKER = -1


class AbortedTransaction(NamedTuple):
    """An entry of a Fetch response's `aborted_transactions` (a decoded entry has the same names)."""

    producer_id: int
    first_offset: int


class Batch(Protocol):
    """What the rules read of a batch (`record_batch.RecordBatch` has all of it)."""

    @property
    def base_offset(self) -> int: ...
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
    @property
    def is_commit_marker(self) -> bool: ...


B = TypeVar("B", bound=Batch)


@dataclass(frozen=True, slots=True)
class FetchedBatch(BatchFlags):
    """One whole batch of a Fetch response, as its header tells it, and its bytes."""

    base_offset: int
    last_offset: int
    producer_id: int
    attributes: int
    marker: int  # a control batch's CONTROL_COMMIT or CONTROL_ABORT (another type a newer broker writes), else -1
    data: Any  # the batch's bytes (a view of the response)

    @property
    def is_abort_marker(self) -> bool:
        return self.is_control and self.marker == CONTROL_ABORT

    @property
    def is_commit_marker(self) -> bool:
        return self.is_control and self.marker == CONTROL_COMMIT


def fetched_batches(records: Any) -> list[FetchedBatch]:
    """The whole batches of a Fetch response's `records` (a batch cut at the size limit is left
    out, as the decoders leave it), read from their headers; CRCs are the decoder's to check.
    A malformed header or control record raises a `DecodeError` naming the batch."""
    if records is None or not len(records):
        return []
    view = memoryview(records).cast("B")
    out: list[FetchedBatch] = []
    pos, end = 0, len(view)
    while (head := read_batch_header(view, pos, end, False)) is not None:
        base, length, attrs, last_delta, pid = head[0], head[1], head[5], head[6], head[9]
        data = view[pos:pos + LENGTH_OFFSET + length]
        marker = NOT_A_MARKER
        if attrs & ATTR_CONTROL:
            (control,) = decode_record_batches(data, check_crc=False)
            marker = control_type(control.records[0].key) if control.records else NOT_A_MARKER
        out.append(FetchedBatch(base, base + last_delta, pid, attrs, marker, data))
        pos += LENGTH_OFFSET + length
    return out


class CommittedFilter:
    """Java's rule: the batches of one Fetch response's partition that belong to no
    transaction the response lists as aborted."""

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


class CommittedReader:
    """One partition's read_committed batches across its Fetch responses: by Java's rule
    (`by_markers=False`), by markers (True), or by markers until the broker is seen to list
    aborted transactions, then by Java's rule (None)."""

    def __init__(self, by_markers: bool | None = False):
        self.by_markers = by_markers
        self.lists_aborted = False  # a response has listed an aborted transaction
        self._held: deque[Batch] = deque()  # by markers: batches not decided yet, in offset order

    @property
    def held(self) -> int:
        """Batches fed but neither handed out nor dropped yet (waiting for a marker)."""
        return len(self._held)

    @property
    def first_held(self) -> int | None:
        """The base offset of the first batch held, if any: nothing from there on is decided."""
        return self._held[0].base_offset if self._held else None

    def feed(self, batches: Iterable[B], aborted_transactions: Iterable[Any] | None) -> list[B]:
        """The batches that may be handed out now, in offset order, of those fed so far."""
        aborted = list(aborted_transactions or ())
        self.lists_aborted = self.lists_aborted or bool(aborted)
        by_list = self.by_markers is False or (self.by_markers is None and self.lists_aborted and not self._held)
        if by_list:
            return list(CommittedFilter(aborted).filter(batches))
        self._held.extend(batches)
        return self._release()  # type: ignore[return-value]

    def _release(self) -> list[Batch]:
        held = list(self._held)
        # fate[i]: for a transactional batch, whether its producer's next marker commits it
        # (None: no marker yet); found walking back from the newest batch
        fate: list[bool | None] = [None] * len(held)
        next_marker: dict[int, bool] = {}
        for i in range(len(held) - 1, -1, -1):
            b = held[i]
            if b.producer_id == NO_PRODUCER_ID:
                continue
            if b.is_control:
                if b.is_commit_marker or b.is_abort_marker:
                    next_marker[b.producer_id] = b.is_commit_marker
            elif b.is_transactional:
                fate[i] = next_marker.get(b.producer_id)
        out: list[Batch] = []
        for i, b in enumerate(held):
            transactional = b.is_transactional and not b.is_control and b.producer_id != NO_PRODUCER_ID
            if transactional and fate[i] is None:
                break  # its marker is not fetched yet: hold it and every batch after it
            self._held.popleft()
            if not b.is_control and (fate[i] or not transactional):
                out.append(b)
        return out


def committed_batches(batches: Iterable[B], aborted_transactions: Iterable[Any] | None) -> list[B]:
    """Java's rule on the batches of one partition's fetch."""
    return list(CommittedFilter(aborted_transactions).filter(batches))
