"""Record batches v2 decoded to `RecordBatch`es of `Record`s, for the consumer's Python path
(`arrow_batches` decodes to Arrow instead).

Every batch is read through `record_batch_reader` (its header checked, its records inflated
within the fetch's `InflationBudget`), then decoded record by record: a hot path, so the loop
is written out by hand and single-byte varints are decoded inline.
"""

from __future__ import annotations

from .compression import MAX_DECOMPRESSED_BYTES
from .errors import CorruptRecordError, DecodeError
from .record_batch import ATTR_TIMESTAMP_TYPE, LENGTH_OFFSET, Record, RecordBatch
from .record_batch_reader import InflationBudget, batch_records, read_batch_header
from .varints import decode_varint, read_uvarint

__all__ = ["decode_record_batches"]


def decode_record_batches(data: bytes | memoryview, *, check_crc: bool = True,
                          max_decompressed: int = MAX_DECOMPRESSED_BYTES) -> list[RecordBatch]:
    """The batches in a Fetch response's `records` field.

    A truncated trailing batch is dropped: the broker cuts the last batch at the fetch size limit.
    A compressed batch may inflate to `max_decompressed` bytes (`max.decompressed.batch.bytes`),
    and all of them together to what an `InflationBudget` of `data` allows.
    """
    buf = bytes(data)
    end = len(buf)
    pos = 0
    budget = InflationBudget(end, max_decompressed)
    batches: list[RecordBatch] = []
    while (head := read_batch_header(buf, pos, end, check_crc)) is not None:
        batch_end = pos + LENGTH_OFFSET + head[1]
        batches.append(_decode_batch(buf, pos, batch_end, head, budget))
        pos = batch_end
    return batches


def _decode_batch(buf: bytes, pos: int, batch_end: int, head: tuple, budget: InflationBudget) -> RecordBatch:
    (
        base_offset,
        _length,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = head
    records_buf, start, stop = batch_records(buf, pos, batch_end, head, budget)
    try:
        records = _decode_records(records_buf, start, stop, count, base_offset, base_ts)
        if attributes & ATTR_TIMESTAMP_TYPE:
            for r in records:  # log append time: the broker's time, kept once in max_timestamp
                r.timestamp = max_ts
    except DecodeError as e:
        raise CorruptRecordError(f"record batch at offset {base_offset}: {e}") from None
    except (IndexError, ValueError, UnicodeDecodeError, OverflowError, TypeError) as e:
        raise CorruptRecordError(
            f"record batch at offset {base_offset} holds a malformed record: {e}"
        ) from None
    return RecordBatch(
        base_offset,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        records,
    )


def _decode_records(
    buf: bytes, pos: int, end: int, count: int, base_offset: int, base_ts: int
) -> list[Record]:
    """`count` records from buf[pos:end]; single-byte varints (the common case) are decoded inline."""
    read = read_uvarint
    records: list[Record] = []
    append = records.append
    for _ in range(count):
        # record length
        b = buf[pos]
        if b < 0x80:
            u = b
            pos += 1
        else:
            b2 = buf[pos + 1]
            if b2 < 0x80:
                u = (b & 0x7F) | (b2 << 7)
                pos += 2
            else:
                u, pos = read(buf, pos)
        length = (u >> 1) ^ -(u & 1)
        rec_end = pos + length
        if length < 6 or rec_end > end:
            raise DecodeError(f"record length {length} is out of bounds")
        # attributes (unused), then timestamp delta
        b = buf[pos + 1]
        if b < 0x80:
            u = b
            pos += 2
        else:
            u, pos = read(buf, pos + 1)
        ts_delta = (u >> 1) ^ -(u & 1)
        # offset delta
        b = buf[pos]
        if b < 0x80:
            u = b
            pos += 1
        else:
            u, pos = read(buf, pos)
        offset_delta = (u >> 1) ^ -(u & 1)
        # key
        b = buf[pos]
        if b < 0x80:
            u = b
            pos += 1
        else:
            u, pos = read(buf, pos)
        n = (u >> 1) ^ -(u & 1)
        if n < 0:
            if n != -1:
                raise DecodeError(f"key length {n}")
            key = None
        else:
            if pos + n > rec_end:
                raise DecodeError(f"key of {n} bytes overruns its record")
            key = buf[pos : pos + n]
            pos += n
        # value
        b = buf[pos]
        if b < 0x80:
            u = b
            pos += 1
        else:
            b2 = buf[pos + 1]
            if b2 < 0x80:
                u = (b & 0x7F) | (b2 << 7)
                pos += 2
            else:
                u, pos = read(buf, pos)
        n = (u >> 1) ^ -(u & 1)
        if n < 0:
            if n != -1:
                raise DecodeError(f"value length {n}")
            value = None
        else:
            if pos + n > rec_end:
                raise DecodeError(f"value of {n} bytes overruns its record")
            value = buf[pos : pos + n]
            pos += n
        # headers
        b = buf[pos]
        if b == 0:
            pos += 1
            headers = []
        else:
            headers, pos = _decode_headers(buf, pos, rec_end)
        if pos != rec_end:
            raise DecodeError(f"record length {length} disagrees with its fields")
        append(Record(base_offset + offset_delta, base_ts + ts_delta, key, value, headers))
    if pos != end:
        raise DecodeError(f"{end - pos} bytes left over after {count} records")
    return records


def _decode_headers(buf: bytes, pos: int, rec_end: int) -> tuple[list[tuple[str, bytes | None]], int]:
    n, pos = decode_varint(buf, pos)
    if n < 0 or n > rec_end - pos:
        raise DecodeError(f"header count {n} is out of bounds")
    headers = []
    for _ in range(n):
        kn, pos = decode_varint(buf, pos)
        if kn < 0 or pos + kn > rec_end:
            raise DecodeError(f"header key length {kn} is out of bounds")
        hkey = buf[pos : pos + kn].decode("utf-8")
        pos += kn
        vn, pos = decode_varint(buf, pos)
        if vn < -1 or pos + vn > rec_end:
            raise DecodeError(f"header value length {vn} is out of bounds")
        if vn == -1:
            hval = None
        else:
            hval = buf[pos : pos + vn]
            pos += vn
        headers.append((hkey, hval))
    return headers, pos
