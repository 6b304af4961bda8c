"""The caller-side accumulator: messages gathered by `Producer.send`, a buffer per topic, and the
batches ready to hand to the pipeline.

`send` appends a row to its topic's open buffer; the sender thread seals the open buffers into
`MessageBatch`es (one per topic, columns made in C) once they hold `FLUSH_MESSAGES` messages or
`FLUSH_BYTES` bytes, or after `linger.ms`, and takes everything ready in one go. A `send_batch`
puts its own batches straight among the ready ones, after sealing what `send` gathered before
it, so order is kept per topic.

Ray-free and lock-free: the `Producer`'s lock guards every call.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..actors.batch import MessageBatch
from ..actors.shared_column import SHARE_MIN_BYTES, SharedColumn
from ..wire.columns import BinaryColumn
from ..wire.record_encoding import encode_header_lists
from .producer_input import packed

# the open buffers are handed over when they hold this much, or after linger.ms
FLUSH_MESSAGES = 20000
FLUSH_BYTES = 4 << 20


class TopicBuffer:
    """One topic's messages gathered by `send`: a row per message, turned into columns (in C) when
    the buffer is sealed."""

    __slots__ = ("rows", "nbytes", "created_ms")

    def __init__(self) -> None:
        self.rows: list[tuple] = []  # (id, value, key, timestamp, headers, partition or -1)
        self.nbytes = 0
        self.created_ms = int(time.time() * 1000)

    def batch(self, topic: str) -> MessageBatch:
        ids, values, keys, timestamps, headers, partitions = map(list, zip(*self.rows, strict=True))
        n = len(ids)
        return MessageBatch(
            topic=topic, ids=range(ids[0], ids[-1] + 1) if ids[-1] - ids[0] == n - 1 else np.array(ids, dtype=np.int64),
            values=shared(packed(values)),
            keys=None if keys.count(None) == n else packed(keys),
            timestamps=timestamps, headers=encode_header_lists(headers),
            partitions=None if partitions.count(-1) == n else partitions, created_ms=self.created_ms,
            nbytes=self.nbytes)


class Accumulator:
    """The open buffers and the ready batches (see the module's docstring)."""

    def __init__(self) -> None:
        self.open: dict[str, TopicBuffer] = {}
        self.count = 0  # messages in the open buffers
        self.nbytes = 0  # their bytes
        self.ready: list[MessageBatch] = []

    def add(self, topic: str, row: tuple, size: int) -> bool:
        """One message's row (see `TopicBuffer`); whether the sender should wake: a buffer
        opened, or the open ones crossed a threshold (past it, the busy sender checks again)."""
        buf = self.open.get(topic)
        if buf is None:
            buf = self.open[topic] = TopicBuffer()
        buf.rows.append(row)
        buf.nbytes += size
        self.count += 1
        self.nbytes += size
        return self.count == 1 or self.count == FLUSH_MESSAGES or FLUSH_BYTES <= self.nbytes < FLUSH_BYTES + size

    @property
    def full(self) -> bool:
        """The open buffers hold enough to hand over now."""
        return self.count >= FLUSH_MESSAGES or self.nbytes >= FLUSH_BYTES

    def linger_left(self, linger: float) -> float:
        """Seconds until the oldest open buffer has waited `linger` s (open buffers only)."""
        first = min(b.created_ms for b in self.open.values()) / 1000
        return first + linger - time.time()

    def seal(self) -> None:
        """The open buffers become ready batches, in the order the topics were first sent to."""
        for topic, buf in self.open.items():
            self.ready.append(buf.batch(topic))
        self.open = {}
        self.count = self.nbytes = 0

    def take(self) -> list[MessageBatch]:
        """Seal the open buffers and take every ready batch."""
        self.seal()
        batches, self.ready = self.ready, []
        return batches

    def drop(self) -> list[tuple[str, Any]]:
        """Drop everything (nothing left to hand it to), and say which messages it held: (topic,
        their ids) for each open buffer and ready batch, for the ledger to fail. Nothing is
        sealed (no columns built, nothing put in the object store)."""
        held = [(batch.topic, batch.ids) for batch in self.ready]
        held += [(topic, [row[0] for row in buf.rows]) for topic, buf in self.open.items()]
        self.open, self.ready = {}, []
        self.count = self.nbytes = 0
        return held


def shared(values: Any) -> Any:
    """A large column put in the object store once, for the flusher alone to read (`SharedColumn`)."""
    if isinstance(values, BinaryColumn) and values.nbytes >= SHARE_MIN_BYTES:
        return SharedColumn.put(values)
    return values
