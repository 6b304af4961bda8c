"""Reference code the tests compare the package with, or build their inputs by; not shipped.

Imported by tests in `consumer/`, `producer/` and `unit/`; calls the package's own types only.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

from raykafka.actors.batch import RECORD_OVERHEAD, MessageBatch
from raykafka.actors.shared_column import SharedColumn, read_shared
from raykafka.wire.arrow_batches import SCHEMA
from raykafka.wire.columns import BinaryColumn
from raykafka.wire.record_batch import RecordBatch


def batches_to_arrow(batches: Sequence[RecordBatch], topic: str, partition: int,
                     start_offset: int = 0) -> pa.RecordBatch:
    """Decoded batches (from `record_decoding.decode_record_batches`) as one Arrow batch, record by
    record: what `arrow_batches.records_to_arrow` must give from the same bytes."""
    rows = [(r, b.timestamp_type) for b in batches if not b.is_control for r in b.records
            if r.offset >= start_offset]
    return pa.RecordBatch.from_arrays([
        pa.array([r.key for r, _ in rows], pa.binary()),
        pa.array([r.value for r, _ in rows], pa.binary()),
        pa.array([topic] * len(rows), pa.string()),
        pa.array([partition] * len(rows), pa.int32()),
        pa.array([r.offset for r, _ in rows], pa.int64()),
        pa.array([r.timestamp for r, _ in rows], pa.int64()).view(pa.timestamp("ms", tz="UTC")),
        pa.array([t for _, t in rows], pa.int32()),
        pa.array([[{"key": k, "value": v} for k, v in r.headers] for r, _ in rows], SCHEMA.field("headers").type),
    ], schema=SCHEMA)


def measured(batch: MessageBatch) -> MessageBatch:
    """`batch` with `nbytes` filled in from its columns, as the driver sizes what it gathers."""
    total = RECORD_OVERHEAD * len(batch.values) + _lengths_sum(batch.values)
    if batch.keys is not None:
        total += _lengths_sum(batch.keys)
    if batch.headers is not None:
        total += batch.headers.nbytes
    batch.nbytes = total
    return batch


def _lengths_sum(column: Any) -> int:
    if isinstance(column, SharedColumn):
        column = read_shared([column])[0]
    if isinstance(column, BinaryColumn):
        return column.nbytes
    return sum(len(v) for v in column if v)


class Calls:
    """Stands in for an actor handle: `handle.method.remote(*args)` is recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, method: str) -> SimpleNamespace:
        return SimpleNamespace(remote=lambda *args: self.calls.append((method, args)))

    def batches(self, method: str) -> list[MessageBatch]:
        return [b for name, args in self.calls if name == method for b in args[0]]
