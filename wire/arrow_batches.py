"""Fetched record batches to `pyarrow.RecordBatch` with Spark's Kafka source schema.

`records_to_arrow` reads a Fetch response's `records` bytes straight into columns. A batch
of records without headers (the common case) takes one Python step per record, to find where
each record starts, and then numpy reads every field of every record at once; any other
batch is read by a loop that only appends integers (offset, timestamp, key and value
positions) to typed arrays. Keys and values are then copied out of the fetched bytes in one
join (or one numpy take when they are tiny), and each column is made in one call. No Python
object per record survives. Control batches and records before the requested offset are
skipped; aborted transactions are not filtered (read_uncommitted).

`batches_to_arrow` does the same from `records.decode_record_batches` output (tests, peers).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from crc32c import crc32c

from .compression import decompress
from .errors import CorruptRecordError, DecodeError
from .records import RecordBatch

HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("ms", tz="UTC")),
    ("timestampType", pa.int32()),
    ("headers", pa.list_(HEADER_TYPE)),
])

_HEAD = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")
HEADER_SIZE = 61
_CRC_START = 21


def next_offset(data: bytes | memoryview | None, default: int) -> int:
    """The offset after the last complete batch in `data`, from batch headers alone."""
    if not data:
        return default
    view = memoryview(data)
    pos, end, out = 0, len(view), default
    while end - pos >= HEADER_SIZE:
        base, length = _PREFIX.unpack_from(view, pos)
        if pos + 12 + length > end or length < HEADER_SIZE - 12:
            break
        (last_delta,) = struct.unpack_from(">i", view, pos + 23)
        out = max(out, base + last_delta + 1)
        pos += 12 + length
    return out


def empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in SCHEMA], schema=SCHEMA)


def records_to_arrow(data: bytes | memoryview | None, topic: str, partition: int, start_offset: int = 0,
                     *, check_crc: bool = True) -> tuple[pa.RecordBatch, int]:
    """The records at or after `start_offset` in `data`, and the offset to fetch next."""
    if not data:
        return empty_batch(), start_offset
    buf = bytes(data)
    segments = [buf]
    seg_base = len(buf)
    offsets, stamps = array("q"), array("q")
    key_pos, key_len, val_pos, val_len = array("q"), array("q"), array("q"), array("q")
    hdr_count = array("q")
    hdr_keys: list[str] = []
    hdr_pos, hdr_len = array("q"), array("q")
    type_runs: list[tuple[int, int]] = []  # (timestamp type, records kept) per batch
    end = len(buf)
    pos = 0
    after = start_offset
    while end - pos >= HEADER_SIZE:
        (base, length, _epoch, magic, crc, attrs, last_delta, base_ts, max_ts,
         _pid, _pepoch, _seq, count) = _HEAD.unpack_from(buf, pos)
        batch_end = pos + 12 + length
        if batch_end > end:
            break  # cut at the fetch size limit
        if magic != 2:
            raise DecodeError(f"{topic}/{partition}: record batch at offset {base} has magic {magic}")
        if check_crc and crc32c(memoryview(buf)[pos + _CRC_START:batch_end]) != crc:
            raise CorruptRecordError(f"{topic}/{partition}: record batch at offset {base} failed its CRC")
        batch_pos, pos = pos, batch_end
        after = max(after, base + last_delta + 1)
        if attrs & 0x20 or base + last_delta < start_offset:
            continue  # a control batch, or nothing we asked for
        codec = attrs & 0x07
        if codec:
            raw = decompress(codec, memoryview(buf)[batch_pos + HEADER_SIZE:batch_end])
            segments.append(raw)
            src, rpos, rend, shift = raw, 0, len(raw), seg_base
            seg_base += len(raw)
        else:
            src, rpos, rend, shift = buf, batch_pos + HEADER_SIZE, batch_end, 0
        log_append = attrs & 0x08
        kept = len(offsets)
        ts_base = max_ts if log_append else base_ts
        try:
            if count >= _VECTOR_MIN and _read_plain_records(src, rpos, rend, count, base, ts_base, not log_append,
                                                            start_offset, shift, offsets, stamps, key_pos, key_len,
                                                            val_pos, val_len, hdr_count):
                rpos = rend
            else:
                rpos = _read_records(src, rpos, rend, count, base, ts_base, not log_append, start_offset, shift,
                                     offsets, stamps, key_pos, key_len, val_pos, val_len, hdr_count, hdr_keys,
                                     hdr_pos, hdr_len)
        except (IndexError, DecodeError, UnicodeDecodeError) as exc:
            raise CorruptRecordError(f"{topic}/{partition}: record batch at offset {base}: {exc}") from None
        if rpos != rend:
            raise CorruptRecordError(f"{topic}/{partition}: record batch at offset {base}: "
                                     f"{rend - rpos} bytes left over")
        type_runs.append((1 if log_append else 0, len(offsets) - kept))
    n = len(offsets)
    if n == 0:
        return empty_batch(), after
    source = np.frombuffer(segments[0] if len(segments) == 1 else b"".join(segments), dtype=np.uint8)
    types = np.repeat(np.array([t for t, _ in type_runs], np.int32), [k for _, k in type_runs])
    headers = _headers_array(n, hdr_count, hdr_keys, hdr_pos, hdr_len, source)
    columns = [
        _gather_binary(source, key_pos, key_len),
        _gather_binary(source, val_pos, val_len),
        _repeated_string(topic, n),
        pa.array(np.full(n, partition, np.int32)),
        pa.array(np.frombuffer(offsets, np.int64)),
        pa.array(np.frombuffer(stamps, np.int64)).view(pa.timestamp("ms", tz="UTC")),
        pa.array(types),
        headers,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA), after


def _read_records(buf, pos, end, count, base, ts_base, delta_ts, start_offset, shift, offsets, stamps,
                  key_pos, key_len, val_pos, val_len, hdr_count, hdr_keys, hdr_pos, hdr_len) -> int:
    """Append the columns of `count` records in buf[pos:end]; return where they end."""
    add_off, add_ts = offsets.append, stamps.append
    add_kp, add_kl, add_vp, add_vl = key_pos.append, key_len.append, val_pos.append, val_len.append
    add_hc = hdr_count.append
    for _ in range(count):
        b = buf[pos]
        if b < 0x80:
            u, pos = b, pos + 1
        else:
            u, pos = _uvarint(buf, pos)
        rec_end = pos + ((u >> 1) ^ -(u & 1))
        if rec_end > end:
            raise DecodeError("record overruns its batch")
        pos += 1  # attributes
        b = buf[pos]
        if b < 0x80:
            u, pos = b, pos + 1
        else:
            u, pos = _uvarint(buf, pos)
        ts_delta = (u >> 1) ^ -(u & 1)
        b = buf[pos]
        if b < 0x80:
            u, pos = b, pos + 1
        else:
            u, pos = _uvarint(buf, pos)
        offset = base + ((u >> 1) ^ -(u & 1))
        b = buf[pos]
        if b < 0x80:
            u, pos = b, pos + 1
        else:
            u, pos = _uvarint(buf, pos)
        kn = (u >> 1) ^ -(u & 1)
        kp = pos
        if kn > 0:
            pos += kn
        b = buf[pos]
        if b < 0x80:
            u, pos = b, pos + 1
        else:
            u, pos = _uvarint(buf, pos)
        vn = (u >> 1) ^ -(u & 1)
        vp = pos
        if vn > 0:
            pos += vn
        if pos > rec_end:
            raise DecodeError("key or value overruns its record")
        keep = offset >= start_offset
        if buf[pos] == 0:
            pos += 1
            if keep:
                add_hc(0)
        else:
            u, pos = _uvarint(buf, pos)
            nh = (u >> 1) ^ -(u & 1)
            if nh < 0 or nh > rec_end - pos:
                raise DecodeError(f"header count {nh}")
            for _h in range(nh):
                u, pos = _uvarint(buf, pos)
                hk = (u >> 1) ^ -(u & 1)
                if hk < 0 or pos + hk > rec_end:
                    raise DecodeError(f"header key length {hk}")
                key = buf[pos:pos + hk].decode("utf-8")
                pos += hk
                u, pos = _uvarint(buf, pos)
                hv = (u >> 1) ^ -(u & 1)
                if hv < -1 or pos + hv > rec_end:
                    raise DecodeError(f"header value length {hv}")
                if keep:
                    hdr_keys.append(key)
                    hdr_pos.append(pos + shift)
                    hdr_len.append(hv)
                if hv > 0:
                    pos += hv
            if keep:
                add_hc(nh)
        if pos != rec_end:
            raise DecodeError("record length disagrees with its fields")
        if keep:
            add_off(offset)
            add_ts(ts_base + ts_delta if delta_ts else ts_base)
            add_kp(kp + shift)
            add_kl(kn)
            add_vp(vp + shift)
            add_vl(vn)
    return pos


_VECTOR_MIN = 32  # below this many records a batch is read by the plain loop


def _read_plain_records(buf, pos, end, count, base, ts_base, delta_ts, start_offset, shift, offsets, stamps,
                        key_pos, key_len, val_pos, val_len, hdr_count) -> bool:
    """The columns of a batch whose records have no headers, read with numpy: one Python step per
    record finds where records start, then each field is read for every record at once.

    Appends and returns True, or appends nothing and returns False (a record with headers, or
    anything malformed), and the caller reads the batch with `_read_records`, which says what
    is wrong."""
    starts, stops = array("q"), array("q")
    add_start, add_stop = starts.append, stops.append
    p = pos
    try:
        for _ in range(count):
            b = buf[p]
            if b < 0x80:
                u, p = b, p + 1
            elif buf[p + 1] < 0x80:  # records of 64 to 8191 bytes: a two-byte length
                u, p = (b & 0x7F) | (buf[p + 1] << 7), p + 2
            else:
                u, p = _uvarint(buf, p)
            add_start(p)
            p += (u >> 1) ^ -(u & 1)
            add_stop(p)
    except (IndexError, DecodeError):
        return False
    if p != end:
        return False
    view = np.frombuffer(buf, np.uint8)
    begin = np.frombuffer(starts, np.int64)
    record_ends = np.frombuffer(stops, np.int64)
    if (record_ends <= begin).any():
        return False
    try:
        q = begin + 1  # attributes
        ts_delta, q = _varints(view, q)
        off_delta, q = _varints(view, q)
        klen, q = _varints(view, q)
        kp = q
        q = q + np.maximum(klen, 0)
        vlen, q = _varints(view, q)
        vp = q
        q = q + np.maximum(vlen, 0)
        if (view[q] != 0).any():
            return False  # headers: the plain loop reads those
        q = q + 1
    except (IndexError, DecodeError):
        return False
    if (q != record_ends).any() or (klen < -1).any() or (vlen < -1).any():
        return False
    record_offsets = base + off_delta
    keep = record_offsets >= start_offset
    if not keep.all():
        record_offsets, ts_delta, kp, klen, vp, vlen = (a[keep] for a in (record_offsets, ts_delta, kp, klen, vp, vlen))
    n = len(record_offsets)
    offsets.frombytes(record_offsets.astype(np.int64).tobytes())
    stamps.frombytes((ts_base + ts_delta if delta_ts else np.full(n, ts_base, np.int64)).astype(np.int64).tobytes())
    key_pos.frombytes((kp + shift).tobytes())
    key_len.frombytes(klen.astype(np.int64).tobytes())
    val_pos.frombytes((vp + shift).tobytes())
    val_len.frombytes(vlen.astype(np.int64).tobytes())
    hdr_count.frombytes(bytes(8 * n))
    return True


def _varints(view: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varint at each of `pos` in `view`, and the positions after them."""
    b = view[pos].astype(np.int64)
    value = b & 0x7F
    after = pos + 1
    more = np.flatnonzero(b & 0x80)
    shift = 7
    while len(more):
        if shift > 63:
            raise DecodeError("varint longer than 10 bytes")
        b = view[after[more]].astype(np.int64)
        value[more] |= (b & 0x7F) << shift
        after[more] += 1
        more = more[(b & 0x80) != 0]
        shift += 7
    return (value >> 1) ^ -(value & 1), after


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise DecodeError("varint longer than 10 bytes")


def _gather_binary(source: np.ndarray, positions: array, lengths: array) -> pa.Array:
    """A binary array of source[pos:pos+len] per row; a negative length is null."""
    n = len(lengths)
    lens = np.frombuffer(lengths, np.int64) if n else np.zeros(0, np.int64)
    pos = np.frombuffer(positions, np.int64) if n else np.zeros(0, np.int64)
    sizes = np.maximum(lens, 0)
    out_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(sizes, out=out_offsets[1:])
    total = int(out_offsets[-1])
    if total:
        if total >= 16 * n:  # values of some size: one slice each, copied by join
            mv = memoryview(source)
            starts = pos.tolist()
            data = b"".join([mv[a:a + k] for a, k in zip(starts, sizes.tolist(), strict=True)])
        else:  # tiny values: a byte-index take is cheaper than a Python step per value
            data = source[np.repeat(pos - out_offsets[:-1], sizes) + np.arange(total)]
    else:
        data = np.zeros(0, np.uint8)
    nulls = lens < 0
    null_count = int(nulls.sum())
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(out_offsets), pa.py_buffer(data)],
                                 null_count)


def _repeated_string(text: str, n: int) -> pa.Array:
    raw = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _headers_array(n: int, counts: array, keys: list[str], positions: array, lengths: array,
                   source: np.ndarray) -> pa.Array:
    list_offsets = np.zeros(n + 1, np.int32)
    if keys:
        np.cumsum(np.frombuffer(counts, np.int64), out=list_offsets[1:])
    values = pa.StructArray.from_arrays([pa.array(keys, pa.string()), _gather_binary(source, positions, lengths)],
                                        fields=list(HEADER_TYPE))
    return pa.ListArray.from_arrays(pa.array(list_offsets), values, type=SCHEMA.field("headers").type)


def batches_to_arrow(batches: Sequence[RecordBatch], topic: str, partition: int,
                     start_offset: int = 0) -> pa.RecordBatch:
    """Decoded batches (from `records.decode_record_batches`) as one Arrow batch."""
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
