"""`SharedColumn`: a batch's values left in Ray's object store while the batch crosses the pipeline.

By value, a batch's values are copied into the object store and mapped back out at each of the
four hops from the driver to the flusher; 20,000 values of 100 bytes are 2 MB, and those copies
were most of what the dispatchers and the aggregator did. The driver puts a large column once
(`SharedColumn.put`); the dispatchers and the aggregator cut and join only positions into it, and
the flusher reads the values (a view of the store's memory) when it encodes the record batch.

A column is a list of segments, each an object ref and the positions of its values there (a
`range` when they are consecutive, the usual case, else an int64 array). The segments keep the
refs alive for as long as the batch lives, retries included; Ray frees the values after the
last batch holding them has ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import ray

from ..wire.columns import BinaryColumn

# below this many value bytes a batch travels by value: a small object lives in its owner's
# memory, and reading it from another process would cost a call back to the driver
SHARE_MIN_BYTES = 256 << 10

Positions = range | np.ndarray


def positions_at(positions: Positions, idx: np.ndarray) -> Positions:
    """`positions[idx]` (a range's step is 1), kept a range when `idx` is itself consecutive."""
    if not isinstance(positions, range):
        return positions[idx]
    if len(idx) and idx[-1] - idx[0] == len(idx) - 1 and (len(idx) == 1 or (np.diff(idx) == 1).all()):
        return positions[int(idx[0]):int(idx[-1]) + 1]
    return positions.start + idx


class SharedColumn:
    __slots__ = ("segments",)

    def __init__(self, segments: list[tuple[Any, Positions]]):
        self.segments = segments  # [(ObjectRef of a BinaryColumn, positions of the values in it)]

    @classmethod
    def put(cls, column: BinaryColumn) -> SharedColumn:
        return cls([(ray.put(column), range(len(column)))])

    def __len__(self) -> int:
        return sum(len(p) for _, p in self.segments)

    def __repr__(self) -> str:
        return f"SharedColumn({len(self)} values in {len(self.segments)} segment(s))"

    # -- cutting and joining, by positions only --------------------------------------

    def __getitem__(self, key: slice) -> SharedColumn:
        start, stop, step = key.indices(len(self))
        if step != 1:
            raise ValueError("a SharedColumn is sliced with step 1 only")
        out, at = [], 0
        for ref, positions in self.segments:
            lo, hi = max(start - at, 0), min(stop - at, len(positions))
            if lo < hi:
                out.append((ref, positions[lo:hi]))
            at += len(positions)
        return SharedColumn(out)

    def take(self, idx: Sequence[int] | np.ndarray) -> SharedColumn:
        """The values at `idx`, in that order: one segment per run of `idx` inside one segment."""
        idx = np.asarray(idx, dtype=np.int64)
        if len(self.segments) == 1:
            ref, positions = self.segments[0]
            return SharedColumn([(ref, positions_at(positions, idx))])
        bounds = np.cumsum([0] + [len(p) for _, p in self.segments])
        owner = np.searchsorted(bounds, idx, side="right") - 1
        runs = np.split(np.arange(len(idx)), np.flatnonzero(np.diff(owner)) + 1)
        out = []
        for run in runs:
            if len(run):
                k = int(owner[run[0]])
                ref, positions = self.segments[k]
                out.append((ref, positions_at(positions, idx[run] - bounds[k])))
        return SharedColumn(out)

    @classmethod
    def concat(cls, columns: Sequence[SharedColumn]) -> SharedColumn:
        """End to end; a segment that continues the previous one's range in the same object joins it."""
        out: list[tuple[Any, Positions]] = []
        for column in columns:
            for ref, positions in column.segments:
                if out and out[-1][0] == ref and isinstance(positions, range) and isinstance(out[-1][1], range) \
                        and out[-1][1].stop == positions.start:
                    out[-1] = (ref, range(out[-1][1].start, positions.stop))
                else:
                    out.append((ref, positions))
        return cls(out)

    # -- reading -------------------------------------------------------------------

    def refs(self) -> list[Any]:
        return [ref for ref, _ in self.segments]

    def read(self, fetched: dict[Any, BinaryColumn]) -> BinaryColumn:
        """The values as one BinaryColumn, from the columns `fetched` for `refs()` (a consecutive
        single segment is a view, anything else one copy)."""
        parts = []
        for ref, positions in self.segments:
            column = fetched[ref]
            if isinstance(positions, range):
                parts.append(column[positions.start:positions.stop])
            else:
                parts.append(column.take(positions))
        if len(parts) == 1:
            return parts[0]
        return BinaryColumn.concat(parts)


def shared_refs(columns: Sequence[Any]) -> list[Any]:
    """The object refs the SharedColumns among `columns` read from, each once."""
    return list({ref: None for c in columns if isinstance(c, SharedColumn) for ref in c.refs()})


def read_fetched(columns: Sequence[Any], refs: list[Any], fetched: list[BinaryColumn]) -> list[Any]:
    """`columns` with every SharedColumn read, given the columns `fetched` for `refs`."""
    by_ref = dict(zip(refs, fetched, strict=True))
    return [c.read(by_ref) if isinstance(c, SharedColumn) else c for c in columns]


def read_shared(columns: Sequence[Any]) -> list[Any]:
    """`columns` with every SharedColumn read from the object store (one `ray.get` for all)."""
    refs = shared_refs(columns)
    if not refs:
        return list(columns)
    return read_fetched(columns, refs, ray.get(refs))
