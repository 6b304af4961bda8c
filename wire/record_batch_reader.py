"""Reading record batches v2 without trusting them: the one checked header reader, where a
batch's records lie (inflated within a budget), and scans of batch headers alone.

`read_batch_header` and `batch_records` check every batch's length and record count against the
bytes present, and decompress each batch to at most `max.decompressed.batch.bytes` and every
batch of one fetch, together, to at most what its `InflationBudget` allows. Both decoders read
every batch through here: `record_decoding.decode_record_batches` and
`arrow_batches.records_to_arrow`. Malformed input raises `DecodeError`, in time bounded by its size.
`next_offset`, `cut_batch` and `batch_record_count` read headers only (no CRC).
"""

from __future__ import annotations

import struct
from typing import Any

from crc32c import crc32c

from .compression import Compression
from .compression import decompress as _decompress
from .errors import CorruptRecordError, DecodeError, DecompressedFetchTooLargeError, RecordBatchTooLargeError
from .record_batch import (
    ATTR_CODEC,
    BASE_AND_LENGTH,
    CRC_START,
    HEAD,
    HEADER_SIZE,
    LAST_DELTA,
    LAST_DELTA_AT,
    LENGTH_OFFSET,
    MAGIC,
    MIN_RECORD_SIZE,
)

__all__ = [
    "InflationBudget",
    "MAX_INFLATION",
    "read_batch_header",
    "batch_records",
    "batch_record_count",
    "next_offset",
    "cut_batch",
]

# The most times its own bytes the batches of one fetch may inflate to, together, beyond one
# batch's cap (`InflationBudget`). Honest data inflates a few times (JSON log lines: some 6
# times in zstd or gzip, 3 in lz4 or snappy, which cannot inflate much past 21 times at all);
# a bomb of zeros, many thousand times.
MAX_INFLATION = 100


class InflationBudget:
    """What the compressed batches of one fetch may still inflate to, together: one batch's cap
    (`max.decompressed.batch.bytes`) plus `MAX_INFLATION` times the fetched bytes. Each batch
    alone may inflate to that cap; without this bound, many batches each under it (twenty of 25
    MiB of zeros, a few KiB on the wire) would inflate to the cap many times over.

    Made for one partition's part of a fetch by `decode_record_batches` and
    `arrow_batches.records_to_arrow`; made for a whole Fetch answer by a fetch loop that decodes
    every partition of it in one process (`actors.group_member_state`, through `fetcher.decode`), and
    then drawn on by each partition's budget too (`answer`). `batch_records` inflates every
    compressed batch through `inflate`, which refuses the batch that would tip either budget over
    with a `DecompressedFetchTooLargeError` naming it, before inflating more than what is left."""

    def __init__(self, fetched: int, max_batch: int, scope: str = "this partition's part of the fetch",
                 answer: InflationBudget | None = None):
        self.fetched = fetched
        self.max_batch = max_batch
        self.scope = scope
        self.answer = answer
        self.limit = self.left = max_batch + MAX_INFLATION * fetched

    def inflate(self, codec: int, data: Any) -> bytes:
        """One batch's records decompressed: at most the batch cap, and at most what is left of
        this budget and of the answer's."""
        tightest = self if self.answer is None or self.left <= self.answer.left else self.answer
        allowed = min(self.max_batch, tightest.left)
        try:
            records = _decompress(codec, data, allowed)
        except RecordBatchTooLargeError:
            if allowed < self.max_batch:
                raise tightest._spent(codec) from None
            raise
        self.left -= len(records)
        if self.answer is not None:
            self.answer.left -= len(records)
        return records

    def _spent(self, codec: int) -> DecompressedFetchTooLargeError:
        return DecompressedFetchTooLargeError(
            f"{Compression(codec).name.lower()} data inflates past the {self.left} bytes left of the {self.limit} "
            f"bytes {self.scope} may inflate to: max.decompressed.batch.bytes ({self.max_batch}) plus "
            f"MAX_INFLATION ({MAX_INFLATION}) times its {self.fetched} bytes")


def read_batch_header(buf: Any, pos: int, end: int, check_crc: bool) -> tuple | None:
    """The header of the batch at `pos` as its 13 fields (in `HEAD`'s order), checked against
    the bytes present; None when the batch runs past `end` (the broker cuts the last batch at
    the fetch size limit). Both decoders, this module's and `arrow_batches`', read every batch
    through here, so each ends after its own bytes and the next starts further on.

    A length too short for a header (negative, say: never what a cut leaves), a failed CRC, a
    negative record count or, uncompressed, more records than bytes to hold them raise
    `CorruptRecordError`; a magic other than 2, `DecodeError`. (A compressed batch's count is
    checked by `batch_records`, once it is decompressed.)"""
    if end - pos < HEADER_SIZE:  # a cut batch, unless its length says it is not a batch at all
        if end - pos >= LENGTH_OFFSET:
            base_offset, length = BASE_AND_LENGTH.unpack_from(buf, pos)
            if length < HEADER_SIZE - LENGTH_OFFSET:
                raise _short_batch_error(buf, pos, end, base_offset, length)
        return None
    head = HEAD.unpack_from(buf, pos)
    base_offset, length, _epoch, magic, crc, attributes, _delta, _ts, _max_ts, _pid, _pepoch, _seq, count = head
    batch_end = pos + LENGTH_OFFSET + length
    if length < HEADER_SIZE - LENGTH_OFFSET:
        raise _short_batch_error(buf, pos, end, base_offset, length)
    if batch_end > end:
        return None  # cut at the fetch size limit
    if magic != MAGIC:
        raise DecodeError(f"record batch at offset {base_offset} has magic {magic}; only magic 2 is supported")
    if check_crc and crc32c(memoryview(buf)[pos + CRC_START : batch_end]) != crc:
        actual = crc32c(memoryview(buf)[pos + CRC_START : batch_end])
        raise CorruptRecordError(f"record batch at offset {base_offset} failed its CRC "
                                 f"(stored {crc:#010x}, computed {actual:#010x})")
    if count < 0:
        raise CorruptRecordError(f"record batch at offset {base_offset} has a negative record count {count}")
    if not attributes & ATTR_CODEC and count * MIN_RECORD_SIZE > batch_end - pos - HEADER_SIZE:
        raise _too_many_records(base_offset, count, batch_end - pos - HEADER_SIZE)
    return head


def batch_records(buf: Any, pos: int, batch_end: int, head: tuple, budget: InflationBudget) -> tuple[Any, int, int]:
    """Where the records of the batch at `pos` lie, as (buffer, start, stop): in `buf` itself,
    or decompressed (as far as `budget` allows), their count checked against the bytes they
    came to. With `read_batch_header`'s checks, a reader may take `count` steps."""
    base_offset, attributes, count = head[0], head[5], head[12]
    start = pos + HEADER_SIZE
    codec = attributes & ATTR_CODEC
    if not codec:
        return buf, start, batch_end
    try:
        records = budget.inflate(codec, memoryview(buf)[start:batch_end])
    except DecodeError as exc:
        raise type(exc)(f"record batch at offset {base_offset}: {exc}") from None
    if count * MIN_RECORD_SIZE > len(records):
        raise _too_many_records(base_offset, count, len(records))
    return records, 0, len(records)


def _short_batch_error(buf: Any, pos: int, end: int, base_offset: int, length: int) -> DecodeError:
    """What is wrong with a batch whose length is too small to hold a header."""
    if length >= 5 and end - pos > 16 and buf[pos + 16] != MAGIC:  # an old message set, likely
        return DecodeError(f"record batch at offset {base_offset} has magic {buf[pos + 16]}; "
                           "only magic 2 is supported")
    what = "a negative length" if length < 0 else "a length"
    return CorruptRecordError(f"record batch at offset {base_offset} has {what} {length}, "
                              "shorter than a batch header")


def _too_many_records(base_offset: int, count: int, size: int) -> CorruptRecordError:
    return CorruptRecordError(f"record batch at offset {base_offset} claims {count} records in {size} bytes")


def next_offset(data: bytes | memoryview | None, default: int) -> int:
    """The offset after the last complete batch in `data`, from batch headers alone (no CRC);
    `default` when `data` holds no complete batch after it."""
    if data is None or not len(data):
        return default
    view = memoryview(data).cast("B")
    pos, end, out = 0, len(view), default
    while end - pos >= HEADER_SIZE:
        base, length = BASE_AND_LENGTH.unpack_from(view, pos)
        if pos + LENGTH_OFFSET + length > end or length < HEADER_SIZE - LENGTH_OFFSET:
            break
        (last_delta,) = LAST_DELTA.unpack_from(view, pos + LAST_DELTA_AT)
        out = max(out, base + last_delta + 1)
        pos += LENGTH_OFFSET + length
    return out


def cut_batch(data: bytes | memoryview | None) -> tuple[int, int] | None:
    """The batch `data` ends inside (a broker cuts the last batch at the fetch size limit), as
    (base offset, its whole size in bytes; 0 when too little of it came to tell), or None when
    `data` ends where a batch ends."""
    if data is None:
        return None
    view = memoryview(data).cast("B")
    pos, end = 0, len(view)
    while end - pos >= LENGTH_OFFSET:
        base, length = BASE_AND_LENGTH.unpack_from(view, pos)
        if length < HEADER_SIZE - LENGTH_OFFSET:
            return None  # not a batch: the decoder names what is wrong
        if pos + LENGTH_OFFSET + length > end:
            return base, LENGTH_OFFSET + length
        pos += LENGTH_OFFSET + length
    return (-1, 0) if pos < end else None


def batch_record_count(data: bytes | memoryview) -> int:
    """Records in the complete batches of `data`, from the batch headers alone."""
    view = memoryview(data)
    end = len(view)
    pos = 0
    total = 0
    while end - pos >= HEADER_SIZE:
        (batch_length,) = struct.unpack_from(">i", view, pos + 8)
        if batch_length < HEADER_SIZE - LENGTH_OFFSET or pos + LENGTH_OFFSET + batch_length > end:
            break
        (count,) = struct.unpack_from(">i", view, pos + 57)
        total += count
        pos += LENGTH_OFFSET + batch_length
    return total
