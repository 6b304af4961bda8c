"""The producer's ledger: every message accepted and not yet ended, and the bytes it holds.

The ledger is the one owner of two invariants of `Producer`:
- every message accepted ends exactly once, as its future's result or exception (a message sent
  alone) or as its place in a `BatchResult` (a message of a `send_batch`);
- the bytes of the messages accepted and not yet ended, which `buffer.memory` bounds.

Each message has an id, given in the order messages are accepted. A message sent alone has an
entry of its own; a `send_batch` call takes a run of ids and one `BatchState`. Settling is told
`Outcome`s (ids, partition, first offset, time, error) and answers with the futures to set; it
never sets a future itself, so the caller can do that outside the lock.

Ray-free and lock-free: the `Producer`'s lock guards every call.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..actors.producer_results import Outcome


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


REPR_ERRORS = 3  # errors a BatchResult's repr shows, each with its record's index


class Single(NamedTuple):
    """A message of `send`, from its send to its outcome."""

    future: Future
    topic: str
    timestamp: int  # ms, the create time its metadata gives when the broker stamps none
    size: int  # bytes it holds of buffer.memory


@dataclass(repr=False)
class BatchResult:
    """How each record of one `send_batch` ended, as arrays in the order the records were given.

    Its repr is one line: the counts and the first `REPR_ERRORS` errors with their records'
    indexes (the arrays hold the rest)."""

    delivered: int
    failed: int
    partitions: np.ndarray  # int32, -1 where unknown
    offsets: np.ndarray  # int64, -1 where failed (or acks=0)
    errors: list  # None where delivered, else the exception

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def __repr__(self) -> str:
        first = []
        for i, error in enumerate(self.errors):
            if error is not None:
                first.append(f"[{i}] {type(error).__name__}: {error}")
                if len(first) == REPR_ERRORS:
                    break
        shown = f", errors=[{'; '.join(first)}{'; ...' if self.failed > len(first) else ''}]" if first else ""
        return f"BatchResult(delivered={self.delivered}, failed={self.failed}{shown})"


# a message sent alone, settled: its future, and its metadata or its error
Settled = tuple[Future, RecordMetadata | None, Exception | None]


class BatchState:
    """One `send_batch` call: ids `start` to `start + n`, and how each of its records ended."""

    def __init__(self, start: int, n: int, future: Future, nbytes: int):
        self.start = start
        self.n = n
        self.future = future
        self.per_record = nbytes / max(n, 1)
        self.partitions = np.full(n, -1, dtype=np.int32)
        self.offsets = np.full(n, -1, dtype=np.int64)
        self.errors: list = [None] * n
        self.remaining = n
        self.failed = 0
        self.settled = np.zeros(n, dtype=bool)

    def settle(self, idx: np.ndarray, partition: int, first_offset: int, places: np.ndarray,
               error: Exception | None) -> None:
        """Records `idx` ended; `places` are their positions in the report (offset = first + place)."""
        fresh = ~self.settled[idx]
        idx, places = idx[fresh], places[fresh]
        self.settled[idx] = True
        self.partitions[idx] = partition
        if error is None:
            if first_offset >= 0:
                self.offsets[idx] = first_offset + places
        else:
            self.failed += len(idx)
            for i in idx.tolist():
                self.errors[i] = error
        self.remaining -= len(idx)

    def result(self) -> BatchResult:
        return BatchResult(self.n - self.failed, self.failed, self.partitions, self.offsets, self.errors)


class Ledger:
    """The messages accepted and not yet ended (see the module's docstring)."""

    def __init__(self) -> None:
        self.next_id = 0  # every message accepted so far has a smaller id
        self.singles: dict[int, Single] = {}  # message id -> its Single
        self.batches: dict[int, BatchState] = {}  # first id -> its send_batch
        self._starts: list[int] = []  # the batches' first ids, in order
        self.unresolved_bytes = 0  # what buffer.memory bounds
        self._finished: list[BatchState] = []  # batches ended, their futures not yet set

    # -- accepting -------------------------------------------------------------------

    def add(self, future: Future, topic: str, timestamp: int, size: int) -> int:
        """A message sent alone, its `size` bytes already counted (`reserve`); its id."""
        mid = self.next_id
        self.next_id = mid + 1
        self.singles[mid] = tuple.__new__(Single, (future, topic, timestamp, size))  # Single(...), at C speed
        return mid

    def reserve(self, size: int) -> None:
        """Count `size` bytes of messages about to be accepted."""
        self.unresolved_bytes += size

    def add_batch(self, n: int, future: Future, nbytes: int) -> BatchState:
        """A `send_batch` call of `n` records (`nbytes` in all); its ids start at the state's `start`."""
        state = BatchState(self.next_id, n, future, nbytes)
        self.next_id += n
        self.batches[state.start] = state
        bisect.insort(self._starts, state.start)
        return state

    # -- what is left -------------------------------------------------------------------

    def __len__(self) -> int:
        """Messages accepted and not yet ended."""
        return len(self.singles) + sum(s.remaining for s in self.batches.values())

    def __bool__(self) -> bool:
        return bool(self.singles or self.batches)

    def unresolved_before(self, cutoff: int | None) -> list[list[int]]:
        """The ids of the messages not yet ended, below `cutoff` (None: all), in groups."""
        singles = []
        for mid in self.singles:  # insertion order is id order
            if cutoff is not None and mid >= cutoff:
                break
            singles.append(mid)
        groups = [singles] if singles else []
        for state in list(self.batches.values()):
            ids = state.start + np.flatnonzero(~state.settled)
            if cutoff is not None:
                ids = ids[ids < cutoff]
            if len(ids):
                groups.append(ids.tolist())
        return groups

    def open_positions(self, ids: Any) -> np.ndarray:
        """The positions in `ids` (a list, range or int64 array) of the messages not yet ended."""
        arr = np.arange(ids.start, ids.stop, dtype=np.int64) if isinstance(ids, range) else np.asarray(ids, dtype=np.int64)
        open_ = np.fromiter((int(i) in self.singles for i in arr), dtype=bool, count=len(arr)) if self.singles \
            else np.zeros(len(arr), dtype=bool)
        if self.batches:
            starts = np.asarray(self._starts, dtype=np.int64)
            owner = np.maximum(np.searchsorted(starts, arr, side="right") - 1, 0)
            for k in np.unique(owner).tolist():
                state = self.batches[int(starts[k])]
                mine = np.flatnonzero((owner == k) & (arr >= state.start) & (arr < state.start + state.n))
                open_[mine] |= ~state.settled[arr[mine] - state.start]
        return np.flatnonzero(open_)

    # -- settling -------------------------------------------------------------------------

    def settle(self, entries: Iterable[Outcome], count: Any = None) -> list[Settled]:
        """End the messages these outcomes name; messages already ended are skipped. Returns the
        futures of the messages sent alone, with what to set on each; the batches that ended wait
        in `take_finished`. `count(topic, n, error)` hears of each outcome (the metrics)."""
        settled: list[Settled] = []
        add = settled.append
        meta_of = tuple.__new__  # RecordMetadata(...) without the NamedTuple's Python-level __new__
        pop = self.singles.pop
        for ids, topic, partition, first_offset, append_ms, error in entries:
            if count is not None:
                count(topic, len(ids), error)
            singles: Any = zip(ids, range(len(ids)), strict=True)
            if self.batches:
                singles = self._settle_batches(ids, partition, first_offset, error)
            freed = 0
            for mid, i in singles:
                single = pop(mid, None)
                if single is None:
                    continue
                future, _, timestamp, size = single  # a Single, unpacked: the loop runs per message
                freed += size
                if error is None:
                    add((future, meta_of(RecordMetadata, (topic, partition,
                                                          first_offset + i if first_offset >= 0 else -1,
                                                          append_ms if append_ms >= 0 else timestamp)), None))
                else:
                    add((future, None, error))
            self.unresolved_bytes -= freed  # per entry: finishing a batch recounts from the singles
        return settled

    def _settle_batches(self, ids: Any, partition: int, first_offset: int,
                        error: Exception | None) -> list[tuple[int, int]]:
        """Settle the ids that belong to `send_batch` calls; return the others with their places."""
        arr = np.arange(ids.start, ids.stop, dtype=np.int64) if isinstance(ids, range) else np.asarray(ids, dtype=np.int64)
        starts = np.asarray(self._starts, dtype=np.int64)
        ends = starts + np.asarray([self.batches[s].n for s in self._starts], dtype=np.int64)
        owner = np.maximum(np.searchsorted(starts, arr, side="right") - 1, 0)
        in_batch = (arr >= starts[owner]) & (arr < ends[owner])
        for k in np.unique(owner[in_batch]).tolist():
            state = self.batches[int(starts[k])]
            places = np.flatnonzero(in_batch & (owner == k))
            state.settle(arr[places] - state.start, partition, first_offset, places, error)
            self.unresolved_bytes -= int(round(state.per_record * len(places)))
            if state.remaining <= 0:
                self._finish(state)
        return [(ids[i], i) for i in np.flatnonzero(~in_batch).tolist()]

    def fail_in_batch(self, state: BatchState, idx: np.ndarray, error: Exception, sizes: np.ndarray,
                      reserved: bool = True) -> None:
        """Records `idx` of a `send_batch` failed before leaving the caller's side; `reserved`:
        their bytes had been counted."""
        state.settle(idx, -1, -1, idx, error)
        bad = int(sizes[idx].sum())
        if reserved:
            self.unresolved_bytes -= bad
        state.per_record = (state.per_record * state.n - bad) / max(state.n - len(idx), 1)
        if state.remaining <= 0:
            self._finish(state)

    def _finish(self, state: BatchState) -> None:
        del self.batches[state.start]
        self._starts.remove(state.start)
        if not self.batches:
            self.unresolved_bytes = sum(single.size for single in self.singles.values())  # no rounding drift
        self._finished.append(state)

    def take_finished(self) -> list[BatchState]:
        """The batches that ended since the last call: their futures are the caller's to set."""
        finished, self._finished = self._finished, []
        return finished
