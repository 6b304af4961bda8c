"""Fetched record batches to `pyarrow.RecordBatch` with Spark's Kafka source schema.

`records_to_arrow` reads a Fetch response's `records` bytes straight into columns, in two
steps. One Python step per batch checks its header and CRC and decompresses it; then the
records' edges are found (by numpy over runs of records of one size, else by one Python step
per record), and numpy reads every field of every record of every batch at once (headers
too: the first header of every record that has one, then the second, ...). A fetch of many
one-record batches costs about what one batch of as many records does. Keys and values are
then copied out of the fetched bytes as strided rows where they have one size, else in one
join (or one numpy take when they are tiny), and each column is made in one call; no Python
object per record survives. Anything malformed sends the fetch to a record-by-record reader
that names the batch and what is wrong. Control batches and records before the requested
offset are skipped; aborted transactions are not filtered (read_uncommitted).

Every batch header is read and checked by `record_batch_reader.read_batch_header` and every batch's records
located (and decompressed, to at most `max.decompressed.batch.bytes` each and to what the fetch's
`record_batch_reader.InflationBudget` allows together) by `record_batch_reader.batch_records`, as `decode_record_batches`
does: lengths and counts are checked against the bytes present before any loop takes a step, so
hostile bytes end in a `DecodeError` naming the partition and batch.

`next_offset` (re-exported here) is `record_batch_reader.next_offset`.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from .compression import MAX_DECOMPRESSED_BYTES
from .errors import CorruptRecordError, DecodeError
from .record_batch import ATTR_CODEC, ATTR_CONTROL, ATTR_TIMESTAMP_TYPE, HEADER_SIZE, LENGTH_OFFSET
from .record_batch_reader import InflationBudget, batch_records, read_batch_header
from .record_batch_reader import next_offset as next_offset  # re-exported
from .varints import read_uvarint, read_varints

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

_RUN_MIN = 16  # records of one size worth laying out by numpy rather than step by step
_HEADER_ROUNDS_MAX = 64  # headers per record read column-wise; a record with more goes to the loop


def empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in SCHEMA], schema=SCHEMA)


def records_to_arrow(data: bytes | memoryview | None, topic: str, partition: int, start_offset: int = 0,
                     *, check_crc: bool = True, max_decompressed: int = MAX_DECOMPRESSED_BYTES,
                     answer: InflationBudget | None = None) -> tuple[pa.RecordBatch, int]:
    """The records at or after `start_offset` in `data` (bytes, or any buffer: a view of a Fetch
    response, a numpy array fed from the object store; read where it lies), and the offset to
    fetch next. A compressed batch may inflate to `max_decompressed` bytes
    (`max.decompressed.batch.bytes`), all of them together to what an `InflationBudget` of
    `data` allows, and to what is left of `answer` (the budget of the whole Fetch answer `data`
    came in, where one process decodes all of it); malformed data raises a `DecodeError` naming
    the batch."""
    if data is None or not len(data):
        return empty_batch(), start_offset
    buf = data if isinstance(data, bytes) else memoryview(data).cast("B")
    budget = InflationBudget(len(buf), max_decompressed, answer=answer)
    extents, segments, after = _scan_batches(buf, topic, partition, start_offset, check_crc, budget)
    if not extents:
        return empty_batch(), after
    source = segments[0] if len(segments) == 1 else b"".join(segments)
    try:
        fields = _read_vectorised(source, extents, start_offset)
    except (IndexError, ValueError, OverflowError, DecodeError):
        fields = None
    if fields is None:  # something malformed: the loop finds it and names the batch
        source = bytes(source)  # the loop slices it into keys and values
        fields = _read_looped(source, extents, start_offset, topic, partition)
    if not len(fields.offsets):
        return empty_batch(), after
    return _to_arrow(fields, np.frombuffer(source, np.uint8), topic, partition), after


class _Extent(NamedTuple):
    """Where one batch's records lie in the joined source (decompressed batches after the fetch)."""

    base: int
    pos: int
    end: int
    count: int
    ts_base: int
    log_append: bool


class _Fields(NamedTuple):
    """Every field of every kept record, as int64 arrays of positions into the source."""

    offsets: np.ndarray
    stamps: np.ndarray
    types: np.ndarray  # int32
    key_pos: np.ndarray
    key_len: np.ndarray  # -1 for a null key
    val_pos: np.ndarray
    val_len: np.ndarray
    hdr_count: np.ndarray
    hdr_keys: list[str] | pa.Array  # utf-8 strings, record by record
    hdr_pos: np.ndarray
    hdr_len: np.ndarray


def _scan_batches(buf: bytes, topic: str, partition: int, start_offset: int, check_crc: bool,
                  budget: InflationBudget) -> tuple[list[_Extent], list[bytes], int]:
    """One step per batch: check its header and CRC, decompress it, note where its records lie."""
    extents: list[_Extent] = []
    segments = [buf]
    seg_base = len(buf)
    end = len(buf)
    pos = 0
    after = start_offset
    try:
        while (head := read_batch_header(buf, pos, end, check_crc)) is not None:
            base, length, _epoch, _magic, _crc, attrs, last_delta, base_ts, max_ts, _pid, _pepoch, _seq, count = head
            batch_pos, pos = pos, pos + LENGTH_OFFSET + length
            if base + last_delta >= after:
                after = base + last_delta + 1
            if attrs & ATTR_CONTROL or base + last_delta < start_offset:
                continue  # a control batch, or nothing we asked for
            log_append = bool(attrs & ATTR_TIMESTAMP_TYPE)
            ts_base = max_ts if log_append else base_ts
            if attrs & ATTR_CODEC:  # decompressed: laid after the fetched bytes
                raw, _, size = batch_records(buf, batch_pos, pos, head, budget)
                segments.append(raw)
                extents.append(_Extent(base, seg_base, seg_base + size, count, ts_base, log_append))
                seg_base += size
            else:
                extents.append(_Extent(base, batch_pos + HEADER_SIZE, pos, count, ts_base, log_append))
    except DecodeError as exc:
        raise type(exc)(f"{topic}/{partition}: {exc}") from None
    return extents, segments, after


def _read_vectorised(source: bytes, extents: list[_Extent], start_offset: int) -> _Fields | None:
    """Every batch's records at once: `_record_bounds` finds where each record starts, then
    numpy reads each field of every record of every batch together. Many small batches (a
    producer at linger.ms=0) cost about what one large batch does.

    Returns None if anything is malformed; the caller then reads with `_read_looped`, which
    says what is wrong."""
    view = np.frombuffer(source, np.uint8)
    bounds = _record_bounds(source, view, extents)
    if bounds is None:
        return None
    begin, record_ends = bounds
    if (record_ends <= begin).any():
        return None
    q = begin + 1  # attributes
    ts_delta, q = read_varints(view, q)
    off_delta, q = read_varints(view, q)
    klen, q = read_varints(view, q)
    kp = q
    if (klen < -1).any() or (klen >= record_ends - kp).any():  # checked before adding: no overflow
        return None
    q = q + np.maximum(klen, 0)
    vlen, q = read_varints(view, q)
    vp = q
    if (vlen < -1).any() or (vlen >= record_ends - vp).any():
        return None
    q = q + np.maximum(vlen, 0)
    counts = np.array([e.count for e in extents], np.int64)
    offsets = np.repeat(np.array([e.base for e in extents], np.int64), counts) + off_delta
    ts_base = np.repeat(np.array([e.ts_base for e in extents], np.int64), counts)
    log_append = np.repeat(np.array([e.log_append for e in extents], bool), counts)
    stamps = np.where(log_append, ts_base, ts_base + ts_delta)
    types = log_append.astype(np.int32)
    plain = view[q] == 0  # a header count of 0: one byte, the record's last
    if plain.all():
        if (q + 1 != record_ends).any():
            return None
        hdr_count, hdr_owner = np.zeros(len(begin), np.int64), np.zeros(0, np.int64)
        hdr_kp = hdr_kl = hdr_pos = hdr_len = hdr_owner
    else:
        headers = _read_headers_vectorised(view, q, record_ends)
        if headers is None:
            return None
        hdr_count, hdr_owner, hdr_kp, hdr_kl, hdr_pos, hdr_len = headers
    keep = offsets >= start_offset
    if not keep.all():
        kept = keep[hdr_owner]
        hdr_kp, hdr_kl, hdr_pos, hdr_len = hdr_kp[kept], hdr_kl[kept], hdr_pos[kept], hdr_len[kept]
        offsets, stamps, types, kp, klen, vp, vlen, hdr_count = (
            a[keep] for a in (offsets, stamps, types, kp, klen, vp, vlen, hdr_count))
    hdr_keys: list[str] | pa.Array = []
    if len(hdr_kp):  # not utf-8: ArrowInvalid, a ValueError, and the looped reader names the batch
        hdr_keys = _gather_binary(view, hdr_kp, hdr_kl).cast(pa.string())
    return _Fields(offsets, stamps, types, kp, klen, vp, vlen, hdr_count, hdr_keys, hdr_pos, hdr_len)


def _read_headers_vectorised(view: np.ndarray, q: np.ndarray, record_ends: np.ndarray) -> tuple | None:
    """Every record's headers, read header by header across all records at once (the first
    header of every record that has one, then the second, ...): each record's count, then per
    header, in record order, its record and its key's and value's positions and lengths. None
    if some record's headers do not end exactly where the record does."""
    counts, pos = read_varints(view, q)
    if (counts < 0).any() or (counts > record_ends - pos).any() or counts.max() > _HEADER_ROUNDS_MAX:
        return None
    rounds = []
    active = np.flatnonzero(counts > 0)
    while len(active):
        ends = record_ends[active]
        klen, at = read_varints(view, pos[active])
        kpos = at
        if (klen < 0).any() or (klen > ends - kpos).any():  # checked before adding: no overflow
            return None
        vlen, at = read_varints(view, at + klen)
        vpos = at
        if (vlen < -1).any() or (vlen > ends - vpos).any():
            return None
        at = at + np.maximum(vlen, 0)
        rounds.append((active, kpos, klen, vpos, vlen))
        pos[active] = at
        active = active[counts[active] > len(rounds)]
    if (pos != record_ends).any():
        return None
    order = np.argsort(np.concatenate([r[0] for r in rounds]), kind="stable")  # by record, headers in order
    return (counts, *(np.concatenate([r[k] for r in rounds])[order] for k in range(5)))


def _record_bounds(source: bytes, view: np.ndarray, extents: list[_Extent]) -> tuple[np.ndarray, np.ndarray] | None:
    """Where each record starts (after its length) and stops, batch after batch; None if a
    batch's records do not tile it exactly.

    Records come one after another, each behind its length, so finding them is a chain. Where
    records have one size (fixed-size values: a record's size changes only when its offset or
    timestamp delta needs another varint byte), numpy checks a whole run at once: if every
    record at the first one's stride starts with the first one's length bytes, that stride is
    the layout. Elsewhere the chain is followed by one Python step per record."""
    starts, stops = array("q"), array("q")
    pieces: list[tuple[np.ndarray, np.ndarray]] = []
    for ext in extents:
        p, end, left = ext.pos, ext.end, ext.count
        if left > end - p:
            return None  # a record takes at least one byte
        probe, stretch = _RUN_MIN * 4, _RUN_MIN * 2  # both grow while their guess keeps paying
        while left > 0:
            if left >= _RUN_MIN:
                u, q = read_uvarint(source, p)
                step = q - p + (u >> 1)
                if not u & 1 and step * _RUN_MIN <= end - p:
                    at = p + np.arange(min(left, probe, (end - p) // step), dtype=np.int64) * step
                    same = view[at] == source[p]
                    for k in range(1, q - p):
                        same &= view[at + k] == source[p + k]
                    run = len(at) if same.all() else int(np.argmin(same))
                    if run >= _RUN_MIN:
                        if starts:
                            pieces.append((np.frombuffer(starts, np.int64), np.frombuffer(stops, np.int64)))
                            starts, stops = array("q"), array("q")
                        at = at[:run]
                        pieces.append((at + (q - p), at + step))
                        p, left = p + run * step, left - run
                        probe = probe * 2 if run == len(at) else _RUN_MIN * 4
                        stretch = _RUN_MIN * 2
                        continue
                    stretch = min(stretch * 2, 4096)
            add_start, add_stop = starts.append, stops.append
            for _ in range(min(left, stretch)):
                b = source[p]
                if b < 0x80:
                    u, p = b, p + 1
                elif source[p + 1] < 0x80:  # records of 64 to 8191 bytes: a two-byte length
                    u, p = (b & 0x7F) | (source[p + 1] << 7), p + 2
                else:
                    u, p = read_uvarint(source, p)
                add_start(p)
                p += (u >> 1) ^ -(u & 1)
                add_stop(p)
                left -= 1
        if p != end:
            return None
    if starts or not pieces:
        pieces.append((np.frombuffer(starts, np.int64), np.frombuffer(stops, np.int64)))
    if len(pieces) == 1:
        return pieces[0]
    return np.concatenate([b for b, _ in pieces]), np.concatenate([e for _, e in pieces])

def _read_headers(buf: bytes, pos: int, rec_end: int, keys: list[str], positions: array,
                  lengths: array) -> tuple[int, int]:
    """Append one record's headers (key, value position, value length); return their count and end."""
    u, pos = read_uvarint(buf, pos)
    nh = (u >> 1) ^ -(u & 1)
    if nh < 0 or nh > rec_end - pos:
        raise DecodeError(f"header count {nh}")
    for _h in range(nh):
        u, pos = read_uvarint(buf, pos)
        hk = (u >> 1) ^ -(u & 1)
        if hk < 0 or pos + hk > rec_end:
            raise DecodeError(f"header key length {hk}")
        keys.append(buf[pos:pos + hk].decode("utf-8"))
        pos += hk
        u, pos = read_uvarint(buf, pos)
        hv = (u >> 1) ^ -(u & 1)
        if hv < -1 or pos + hv > rec_end:
            raise DecodeError(f"header value length {hv}")
        positions.append(pos)
        lengths.append(hv)
        if hv > 0:
            pos += hv
    return nh, pos


def _read_looped(source: bytes, extents: list[_Extent], start_offset: int, topic: str, partition: int) -> _Fields:
    """Record by record, checking each field: the reference reader, and the one that names what
    is wrong with a malformed batch."""
    offsets, stamps, types = array("q"), array("q"), array("i")
    key_pos, key_len, val_pos, val_len, hdr_count = array("q"), array("q"), array("q"), array("q"), array("q")
    hdr_keys: list[str] = []
    hdr_pos, hdr_len = array("q"), array("q")
    for ext in extents:
        kept = len(offsets)
        try:
            pos = _read_records(source, ext, start_offset, offsets, stamps, key_pos, key_len, val_pos, val_len,
                                hdr_count, hdr_keys, hdr_pos, hdr_len)
        except (IndexError, ValueError, OverflowError, DecodeError) as exc:  # ValueError: utf-8 too
            raise CorruptRecordError(f"{topic}/{partition}: record batch at offset {ext.base}: {exc}") from None
        if pos != ext.end:
            raise CorruptRecordError(f"{topic}/{partition}: record batch at offset {ext.base}: "
                                     f"{ext.end - pos} bytes left over")
        types.extend([int(ext.log_append)] * (len(offsets) - kept))
    as_np = lambda a: np.frombuffer(a, np.int64) if len(a) else np.zeros(0, np.int64)  # noqa: E731
    return _Fields(as_np(offsets), as_np(stamps), np.array(types, np.int32), as_np(key_pos), as_np(key_len),
                   as_np(val_pos), as_np(val_len), as_np(hdr_count), hdr_keys, as_np(hdr_pos), as_np(hdr_len))


def _to_arrow(f: _Fields, source: np.ndarray, topic: str, partition: int) -> pa.RecordBatch:
    n = len(f.offsets)
    columns = [
        _gather_binary(source, f.key_pos, f.key_len),
        _gather_binary(source, f.val_pos, f.val_len),
        _repeated_string(topic, n),
        pa.array(np.full(n, partition, np.int32)),
        pa.array(f.offsets),
        pa.array(f.stamps).view(pa.timestamp("ms", tz="UTC")),
        pa.array(f.types),
        _headers_array(n, f.hdr_count, f.hdr_keys, f.hdr_pos, f.hdr_len, source),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def _read_records(buf, ext, start_offset, offsets, stamps, key_pos, key_len, val_pos, val_len, hdr_count,
                  hdr_keys, hdr_pos, hdr_len) -> int:
    """Append the columns of one batch's records, field by field; return where they end."""
    pos, end, base, ts_base, delta_ts = ext.pos, ext.end, ext.base, ext.ts_base, not ext.log_append
    add_off, add_ts = offsets.append, stamps.append
    add_kp, add_kl, add_vp, add_vl = key_pos.append, key_len.append, val_pos.append, val_len.append
    add_hc = hdr_count.append
    for _ in range(ext.count):
        b = buf[pos]
        if b < 0x80:
            u, pos = b, pos + 1
        else:
            u, pos = read_uvarint(buf, pos)
        rec_end = pos + ((u >> 1) ^ -(u & 1))
        if rec_end > end:
            raise DecodeError("record overruns its batch")
        pos += 1  # attributes
        b = buf[pos]
        if b < 0x80:
            u, pos = b, pos + 1
        else:
            u, pos = read_uvarint(buf, pos)
        ts_delta = (u >> 1) ^ -(u & 1)
        b = buf[pos]
        if b < 0x80:
            u, pos = b, pos + 1
        else:
            u, pos = read_uvarint(buf, pos)
        offset = base + ((u >> 1) ^ -(u & 1))
        b = buf[pos]
        if b < 0x80:
            u, pos = b, pos + 1
        else:
            u, pos = read_uvarint(buf, pos)
        kn = (u >> 1) ^ -(u & 1)
        kp = pos
        if kn > 0:
            pos += kn
        b = buf[pos]
        if b < 0x80:
            u, pos = b, pos + 1
        else:
            u, pos = read_uvarint(buf, pos)
        vn = (u >> 1) ^ -(u & 1)
        vp = pos
        if vn > 0:
            pos += vn
        if pos > rec_end:
            raise DecodeError("key or value overruns its record")
        if kn < -1 or vn < -1:
            raise DecodeError(f"key length {kn}, value length {vn}")
        keep = offset >= start_offset
        if buf[pos] == 0:
            pos += 1
            nh = 0
        else:
            nh, pos = _read_headers(buf, pos, rec_end, hdr_keys, hdr_pos, hdr_len) if keep else \
                _read_headers(buf, pos, rec_end, [], array("q"), array("q"))
        if pos != rec_end:
            raise DecodeError("record length disagrees with its fields")
        if keep:
            add_hc(nh)
            add_off(offset)
            add_ts(ts_base + ts_delta if delta_ts else ts_base)
            add_kp(kp)
            add_kl(kn)
            add_vp(vp)
            add_vl(vn)
    return pos


def _gather_binary(source: np.ndarray, positions: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array of source[pos:pos+len] per row; a negative length is null."""
    n = len(lengths)
    lens, pos = lengths, positions
    sizes = np.maximum(lens, 0)
    out_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(sizes, out=out_offsets[1:])
    total = int(out_offsets[-1])
    if not total:
        data = np.zeros(0, np.uint8)
    elif total < 16 * n:  # tiny values: a byte-index take is cheaper than a Python step per value
        data = source[np.repeat(pos - out_offsets[:-1], sizes) + np.arange(total)]
    else:
        data = _gather_runs(source, pos, sizes, out_offsets, total)
        if data is None:  # values of many sizes: one slice each, copied by join
            mv = memoryview(source)
            data = b"".join([mv[a:a + k] for a, k in zip(pos.tolist(), sizes.tolist(), strict=True)])
    nulls = lens < 0
    null_count = int(nulls.sum())
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(out_offsets), pa.py_buffer(data)],
                                 null_count)



def _gather_runs(source: np.ndarray, pos: np.ndarray, sizes: np.ndarray, out_offsets: np.ndarray,
                 total: int) -> np.ndarray | None:
    """Values of one size at a fixed stride (records of one size) copied a run at a time, as
    rows of a strided view; None if the runs would be too short to be worth it."""
    n = len(pos)
    gap = np.diff(pos)
    new_run = np.zeros(n, bool)
    new_run[0] = True
    new_run[1:] = sizes[1:] != sizes[:-1]
    new_run[2:] |= gap[1:] != gap[:-1]
    firsts = np.flatnonzero(new_run)
    if len(firsts) * _RUN_MIN > n:
        return None
    out = np.empty(total, np.uint8)
    lasts = np.append(firsts[1:], n).tolist()
    for first, last in zip(firsts.tolist(), lasts, strict=True):
        size = int(sizes[first])
        if not size:
            continue
        stride = int(gap[first]) if last - first > 1 else size
        rows = np.lib.stride_tricks.as_strided(source[int(pos[first]):], (last - first, size), (stride, 1))
        at = int(out_offsets[first])
        out[at:at + (last - first) * size].reshape(last - first, size)[:] = rows
    return out

def _repeated_string(text: str, n: int) -> pa.Array:
    raw = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _headers_array(n: int, counts: np.ndarray, keys: list[str] | pa.Array, positions: np.ndarray, lengths: np.ndarray,
                   source: np.ndarray) -> pa.Array:
    list_offsets = np.zeros(n + 1, np.int32)
    if len(keys):
        np.cumsum(counts, out=list_offsets[1:])
    names = keys if isinstance(keys, pa.Array) else pa.array(keys, pa.string())
    values = pa.StructArray.from_arrays([names, _gather_binary(source, positions, lengths)],
                                        fields=list(HEADER_TYPE))
    return pa.ListArray.from_arrays(pa.array(list_offsets), values, type=SCHEMA.field("headers").type)
