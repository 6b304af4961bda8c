"""Record batch v2 written, for the producer: `encode_record_batch` (and its unjoined
`encode_record_batch_parts`, which a Produce request copies once), the transaction markers a
coordinator writes (`encode_control_batch`), and each record's headers (`encode_headers` from an
Arrow column, `encode_header_lists` from Python lists). The layout is `record_batch`'s.

A hot path (one call per record in pure Python), so the loops are written out by hand: varint
encodings come from a precomputed table (`varints.VARINTS`), and each batch is joined once.
Large batches whose values arrive in one buffer are encoded column-wise instead (numpy writes
every record's varint fields at once, Arrow joins them in one pass).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c

from .columns import BinaryColumn, HeaderColumn
from .compression import compress as _compress
from .record_batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_KEY,
    END_TXN_MARKER,
    HEADER_SIZE,
    LENGTH_OFFSET,
    MAGIC,
    PREFIX,
    TAIL,
)
from .varints import (
    NULL_VARINT,
    VARINT_TABLE_SIZE,
    VARINTS,
    encode_varint,
    varint_bytes,
    zigzag_constant,
    zigzag_varints,
)

__all__ = [
    "encode_record_batch",
    "encode_record_batch_parts",
    "encode_control_batch",
    "encode_headers",
    "encode_header_lists",
    "prepare_columnar",
]

_BYTES_TYPES = (bytes, bytearray, memoryview)
_CODECS = frozenset(range(5))


def _as_bytes_list(items: list, what: str) -> list:
    """`items` with every element bytes or None; other buffers are copied, anything else is a TypeError."""
    if isinstance(items, BinaryColumn):
        return items.to_list()
    kinds = set(map(type, items))
    if kinds <= {bytes, type(None)}:
        return items
    out = list(items)
    for i, v in enumerate(out):
        if v is None or type(v) is bytes:
            continue
        if isinstance(v, _BYTES_TYPES):
            out[i] = bytes(v)
        else:
            raise TypeError(
                f"{what}[{i}] must be bytes, bytearray, memoryview or None, not {type(v).__name__}"
            )
    return out


def encode_record_batch(values, keys=None, timestamps=None, headers=None, **options: Any) -> bytes:
    """One v2 record batch holding `values` (with `keys`, `timestamps` in ms and `headers`, each per record).

    `keys` None means all null; `timestamps` None means now, an int means the same for all;
    `headers` per record a list of (str, bytes or None) pairs, or a `HeaderColumn`. The
    options (`compression`, `producer_id`, `base_sequence`, ...) are `encode_record_batch_parts`'.
    """
    return b"".join(encode_record_batch_parts(values, keys, timestamps, headers, **options))


def encode_record_batch_parts(
    values,
    keys=None,
    timestamps=None,
    headers=None,
    *,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
) -> tuple[bytes, bytes, bytes | memoryview]:
    """`encode_record_batch` as (header, rest of header, records), not joined: a Produce request
    takes the pieces as they are and copies them once, into the request."""
    if compression not in _CODECS:
        raise ValueError(
            f"compression must be one of 0-4 (none, gzip, snappy, lz4, zstd), not {compression!r}"
        )
    n = len(values)
    if n == 0:
        raise ValueError("a record batch needs at least one record")
    if keys is not None and len(keys) != n:
        raise ValueError(f"keys has {len(keys)} entries for {n} values")
    if headers is not None:
        if len(headers) != n:
            raise ValueError(f"headers has {len(headers)} entries for {n} values")
        if isinstance(headers, HeaderColumn):
            if headers.nbytes == n:  # a count of 0 each
                headers = None
        elif not any(headers):
            headers = None

    if timestamps is None:
        timestamps = int(time.time() * 1000)
    if not hasattr(timestamps, "__len__"):
        base_ts = max_ts = int(timestamps)
        ts_deltas = None
    else:
        if len(timestamps) != n:
            raise ValueError(f"timestamps has {len(timestamps)} entries for {n} values")
        base_ts = int(timestamps[0])
        max_ts = int(max(timestamps))
        ts_deltas = [int(t) - base_ts for t in timestamps]
        if not any(ts_deltas):
            ts_deltas = None

    if (headers is None or isinstance(headers, HeaderColumn)) and _columnar(values, keys):
        body = _encode_columns(values, keys, ts_deltas, headers)
    else:
        if isinstance(headers, HeaderColumn):
            headers = headers.to_list()  # each record's headers, encoded already
        values = _as_bytes_list(values, "values")
        if keys is not None:
            keys = _as_bytes_list(keys, "keys")
            if not any(k is not None for k in keys):
                keys = None
        if keys is None and headers is None and ts_deltas is None and n < VARINT_TABLE_SIZE:
            body = _encode_plain(values)
        else:
            body = _encode_general(values, keys, ts_deltas, headers)

    attributes = int(compression)
    if attributes:
        body = _compress(attributes, body)
    if is_transactional:
        attributes |= ATTR_TRANSACTIONAL
    if is_control:
        attributes |= ATTR_CONTROL
    tail = TAIL.pack(attributes, n - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence, n)
    crc = crc32c(body, crc32c(tail))
    prefix = PREFIX.pack(
        base_offset, HEADER_SIZE - LENGTH_OFFSET + len(body), partition_leader_epoch, MAGIC, crc
    )
    return prefix, tail, body


def encode_control_batch(commit: bool, producer_id: int, producer_epoch: int, *, base_offset: int = 0,
                         timestamp: int | None = None, coordinator_epoch: int = 0) -> bytes:
    """The marker a transaction coordinator writes when a transaction of `producer_id` ends."""
    key = CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = END_TXN_MARKER.pack(0, coordinator_epoch)
    return encode_record_batch([value], [key], timestamp, base_offset=base_offset, producer_id=producer_id,
                               producer_epoch=producer_epoch, is_transactional=True, is_control=True)


# _PLAIN_PREFIX[i]: attributes 0, timestamp delta 0, offset delta i, null key
_PLAIN_PREFIX = [b"\x00\x00" + VARINTS[i] + NULL_VARINT for i in range(VARINT_TABLE_SIZE)]
_PLAIN_NULL_VALUE = [p + NULL_VARINT + b"\x00" for p in _PLAIN_PREFIX]


def _encode_plain(values: list) -> bytes:
    """Records with null keys, no headers and one timestamp: the producer's common case (fewer than 16384)."""
    zz = VARINTS
    size = VARINT_TABLE_SIZE
    plain_prefix = _PLAIN_PREFIX
    parts: list[bytes] = []
    append = parts.append
    for i, v in enumerate(values):
        prefix = plain_prefix[i]
        if v is None:
            rec = _PLAIN_NULL_VALUE[i]
            append(zz[len(rec)])
            append(rec)
            continue
        vn = len(v)
        vl = zz[vn] if vn < size else encode_varint(vn)
        length = len(prefix) + len(vl) + vn + 1
        append(zz[length] if length < size else encode_varint(length))
        append(prefix)
        append(vl)
        append(v)
        append(b"\x00")
    return b"".join(parts)


# below this many records, or bytes, the column-wise encoder's fixed cost (about 0.25 ms of numpy
# and Arrow set-up) is more than a Python step per record. Measured: even at 800 records of 100 B
# (390 against 410 us); 1,000 of 1 KiB take 0.41 ms column-wise against 1.34 ms record by record
COLUMNAR_MIN = 800
COLUMNAR_MIN_BYTES = 256 << 10


def prepare_columnar() -> None:
    """Run the column-wise encoder once on two records: Arrow sets up its compute kernels on
    first use (about 0.3 s), which a process that will encode large batches had better pay
    while it starts than on its first message."""
    _encode_columns(BinaryColumn.from_list([b"", b"x"]), BinaryColumn.from_list([None, b"k"]), [0, 1])


def _columnar(values: Any, keys: Any) -> bool:
    """Whether to encode column-wise: values (and keys) already in one buffer, as they arrive
    from the pipeline, and enough of them."""
    if keys is not None and not isinstance(keys, BinaryColumn):
        return False
    return isinstance(values, BinaryColumn) and (len(values) >= COLUMNAR_MIN or values.nbytes >= COLUMNAR_MIN_BYTES)


def _encode_columns(values: BinaryColumn, keys: BinaryColumn | None, ts_deltas: list | None,
                    headers: HeaderColumn | None = None) -> memoryview:
    """Records built as columns: numpy writes every record's varint fields at once into a
    small prefix per record, then Arrow joins prefix, key, value-length, value and headers of
    each record in one C++ pass. No Python step per record."""
    n = len(values)
    vlen = np.where(values.valid, np.diff(values.offsets), -1) if values.valid is not None else np.diff(values.offsets)
    if keys is None:
        klen = np.full(n, -1, np.int64)
    else:
        klen = np.where(keys.valid, np.diff(keys.offsets), -1) if keys.valid is not None else np.diff(keys.offsets)
    ts_field = zigzag_constant(0, n) if ts_deltas is None else zigzag_varints(np.asarray(ts_deltas, np.int64))
    offset_field = _offset_deltas(n)
    key_len_field = zigzag_constant(-1, n) if keys is None else zigzag_varints(klen)
    value_len_field = zigzag_varints(vlen)
    headers_len = 1 if headers is None else np.diff(headers.offsets)  # without headers: a count of 0
    body_len = (1 + ts_field[1] + offset_field[1] + key_len_field[1] + np.maximum(klen, 0)
                + value_len_field[1] + np.maximum(vlen, 0) + headers_len)  # 1: the attributes byte
    one = zigzag_constant(0, n)  # attributes: a zero byte
    if headers is None:  # each record's header count (0) goes first in the next record's prefix
        trailer = (one[0], np.r_[0, np.ones(n - 1, np.int64)])
        last = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(np.r_[np.zeros(n, np.int64), 1]),
                                                             pa.py_buffer(b"\x00")])  # the last header count
        head = [trailer, zigzag_varints(body_len), one, ts_field, offset_field, key_len_field]
    else:
        last = _binary(headers, n)
        head = [zigzag_varints(body_len), one, ts_field, offset_field, key_len_field]
    if keys is None:  # no key between them: the value's length joins the prefix
        columns = [_rows([*head, value_len_field]), _binary(values, n), last]
    else:
        columns = [_rows(head), _binary(keys, n), _rows([value_len_field]), _binary(values, n), last]
    joined = pc.binary_join_element_wise(*columns, pa.scalar(b"", pa.large_binary()),
                                         null_handling="replace", null_replacement="")
    offsets = np.frombuffer(joined.buffers()[1], np.int64, n + 1, joined.offset * 8)
    return memoryview(joined.buffers()[2])[int(offsets[0]):int(offsets[-1])]


def encode_headers(column: Any) -> HeaderColumn | None:
    """A list<struct<key: string, value: binary or string>> Arrow column (Spark's Kafka sink
    `headers`) as each record's encoded headers; None if no record has any.

    Every header's key length, key, value length and value are joined in one Arrow pass; a
    record's headers lie next to each other in that result, so its part is one range of it, to
    which Arrow joins the record's header count."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    t = column.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(t.value_type):
        raise TypeError(f"headers: expected a list of struct<key: string, value: binary>, not {t}")
    names = [f.name for f in t.value_type]
    if "key" not in names or "value" not in names:
        raise TypeError(f"headers: each header needs a 'key' and a 'value' field, not {names}")
    n = len(column)
    counts = pc.fill_null(pc.list_value_length(column), 0).to_numpy().astype(np.int64)
    if not counts.any():
        return None
    flat = pc.list_flatten(column)
    key, value = pc.struct_field(flat, [names.index("key")]), pc.struct_field(flat, [names.index("value")])
    if not (pa.types.is_string(key.type) or pa.types.is_large_string(key.type)):
        raise TypeError(f"headers: a header key must be a string, not {key.type}")
    if key.null_count:
        raise TypeError("headers: a header key must be a string, not null")
    if pa.types.is_string(value.type) or pa.types.is_large_string(value.type):
        value = value.cast(pa.large_binary())
    elif not (pa.types.is_binary(value.type) or pa.types.is_large_binary(value.type)):
        raise TypeError(f"headers: a header value must be binary, string or null, not {value.type}")
    keys, values = BinaryColumn.from_arrow(key), BinaryColumn.from_arrow(value)
    m = len(keys)
    vlen = np.diff(values.offsets) if values.valid is None else np.where(values.valid, np.diff(values.offsets), -1)
    each = pc.binary_join_element_wise(_rows([zigzag_varints(np.diff(keys.offsets))]), _binary(keys, m),
                                       _rows([zigzag_varints(vlen)]), _binary(values, m),
                                       pa.scalar(b"", pa.large_binary()), null_handling="replace", null_replacement="")
    each_offsets = np.frombuffer(each.buffers()[1], np.int64, m + 1, each.offset * 8)
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    per_record = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(each_offsets[starts]),
                                                              each.buffers()[2]])
    joined = pc.binary_join_element_wise(_rows([zigzag_varints(counts)]), per_record,
                                         pa.scalar(b"", pa.large_binary()))
    offsets = np.frombuffer(joined.buffers()[1], np.int64, n + 1, joined.offset * 8).copy()
    return HeaderColumn(joined.buffers()[2], offsets)


def encode_header_lists(headers: list) -> HeaderColumn | None:
    """Per record a list of (str key, bytes or None value) pairs, or None, as each record's
    encoded headers; None if no record has any. A Python step per header: for `send`'s
    messages, whose headers are checked one by one as they are sent anyway."""
    if not any(headers):
        return None
    parts = [_encode_header_list(hs, i) for i, hs in enumerate(headers)]
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)), out=offsets[1:])
    return HeaderColumn(b"".join(parts), offsets)


def _encode_header_list(hs: list | None, i: int) -> bytes:
    """One record's headers in the record format: count, then each key and value with its length."""
    if not hs:
        return b"\x00"
    zz = varint_bytes
    out = [zz(len(hs))]
    for hk, hv in hs:
        if not isinstance(hk, str):
            raise TypeError(f"headers[{i}]: header key must be str, not {type(hk).__name__}")
        hkb = hk.encode("utf-8")
        out.append(zz(len(hkb)))
        out.append(hkb)
        if hv is None:
            out.append(NULL_VARINT)
        elif isinstance(hv, _BYTES_TYPES):
            hv = bytes(hv)
            out.append(zz(len(hv)))
            out.append(hv)
        else:
            raise TypeError(f"headers[{i}]: header {hk!r} value must be bytes or None, not {type(hv).__name__}")
    return b"".join(out)


_OFFSET_DELTAS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _offset_deltas(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The offset-delta field of n records (0 to n-1), the same for every batch of n: kept."""
    found = _OFFSET_DELTAS.get(n)
    if found is None:
        if len(_OFFSET_DELTAS) >= 8:
            _OFFSET_DELTAS.pop(next(iter(_OFFSET_DELTAS)))
        found = _OFFSET_DELTAS[n] = zigzag_varints(np.arange(n, dtype=np.int64))
    return found


def _rows(fields: list[tuple[np.ndarray, np.ndarray]]) -> Any:
    """Fields laid end to end per record, as an Arrow large_binary array of one value per record.

    Built byte position by byte position (a row per position of each field, a column per
    record): numpy is quick along 10,000 records and slow across a field's 1 to 3 bytes. Then
    each field's bytes past its length are dropped, reading the records in order."""
    grid = np.stack([m[:, k] for m, _ in fields for k in range(m.shape[1])])
    keep = np.ones(grid.shape, bool)
    row = 0
    for m, lengths in fields:
        for k in range(m.shape[1]):
            if lengths.strides != (0,):  # lengths that vary (a constant one is a broadcast)
                np.greater(lengths, k, out=keep[row])
            elif lengths[0] <= k:
                keep[row] = False
            row += 1
    offsets = np.zeros(grid.shape[1] + 1, np.int64)
    np.cumsum(sum(lengths for _, lengths in fields), out=offsets[1:])
    return pa.Array.from_buffers(pa.large_binary(), grid.shape[1], [None, pa.py_buffer(offsets),
                                                                    pa.py_buffer(grid.T[keep.T])])


def _binary(column: BinaryColumn | None, n: int) -> Any:
    """A column as an Arrow large_binary array over its own buffer (nulls and None: empty)."""
    if column is None:
        return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(np.zeros(n + 1, np.int64)),
                                                            pa.py_buffer(b"")])
    validity = None
    if column.valid is not None:
        validity = pa.py_buffer(np.packbits(column.valid, bitorder="little"))
    offsets = np.ascontiguousarray(column.offsets, np.int64)
    return pa.Array.from_buffers(pa.large_binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(column.data)])


def _encode_general(values: list, keys: list | None, ts_deltas: list | None, headers: list | None) -> bytes:
    parts: list[bytes] = []
    append = parts.append
    zz = varint_bytes
    for i, v in enumerate(values):
        rec = [b"\x00", zz(ts_deltas[i]) if ts_deltas is not None else b"\x00", zz(i)]
        k = keys[i] if keys is not None else None
        if k is None:
            rec.append(NULL_VARINT)
        else:
            rec.append(zz(len(k)))
            rec.append(k)
        if v is None:
            rec.append(NULL_VARINT)
        else:
            rec.append(zz(len(v)))
            rec.append(v)
        hs = headers[i] if headers is not None else None
        rec.append(hs if type(hs) is bytes else _encode_header_list(hs, i))  # bytes: encoded already
        body = b"".join(rec)
        append(zz(len(body)))
        append(body)
    return b"".join(parts)
