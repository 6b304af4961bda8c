"""Kafka record batch v2 (magic 2): encoding for the producer, decoding for the consumer.

Layout (big-endian), 61 header bytes then the records, possibly compressed as one blob:
    base_offset int64, batch_length int32 (bytes after this field), partition_leader_epoch int32,
    magic int8, crc uint32 (crc32c of everything from attributes to the end), attributes int16
    (bits 0-2 codec, bit 3 timestamp type, bit 4 transactional, bit 5 control),
    last_offset_delta int32, base_timestamp int64, max_timestamp int64, producer_id int64,
    producer_epoch int16, base_sequence int32, record count int32.
Each record: length varint, attributes int8, timestamp_delta varlong, offset_delta varint,
key (varint length, -1 = null), value (likewise), header count varint, then per header a
utf-8 key and a nullable value. Every varint is zigzag-encoded.

Both directions are hot paths (one call per record in pure Python), so the loops are written
out by hand: varint encodings come from a precomputed table, single-byte varints are decoded
inline, and each batch is joined once.

Decoding trusts nothing it reads: `read_batch_header` and `batch_records` check every batch's
length and record count against the bytes present, and decompress each batch to at most
`max.decompressed.batch.bytes` and every batch of one fetch, together, to at most what its
`InflationBudget` allows, for this module's `decode_record_batches` and for
`arrow_batches.records_to_arrow` alike. Malformed input raises `DecodeError`, in time bounded
by its size.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c

from .columns import BinaryColumn, HeaderColumn
from .compression import MAX_DECOMPRESSED_BYTES, Compression
from .compression import compress as _compress
from .compression import decompress as _decompress
from .errors import CorruptRecordError, DecodeError, DecompressedFetchTooLargeError, RecordBatchTooLargeError

__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "Record",
    "RecordBatch",
    "encode_record_batch",
    "encode_control_batch",
    "control_type",
    "encode_headers",
    "encode_header_lists",
    "decode_record_batches",
    "InflationBudget",
    "MAX_INFLATION",
    "read_batch_header",
    "batch_records",
    "batch_record_count",
    "encode_varint",
    "decode_varint",
    "read_uvarint",
    "read_varints",
    "next_offset",
    "cut_batch",
]

CREATE_TIME = 0
LOG_APPEND_TIME = 1

MAGIC = 2
HEADER_SIZE = 61  # bytes before the first record
SEQUENCE_MASK = 0x7FFFFFFF  # a producer's sequence numbers wrap at 2**31
LENGTH_OFFSET = 12  # batch_length counts the bytes after base_offset and itself
_CRC_START = 21  # attributes onward is covered by the crc

# attribute bits; every reader of batches (this module, `arrow_batches`, `fetch`) takes them from here
ATTR_CODEC = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

# base_offset, batch_length, partition_leader_epoch, magic, crc
_PREFIX = struct.Struct(">qiibI")
# attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
# base_sequence, record count
_TAIL = struct.Struct(">hiqqqhii")
_HEAD = struct.Struct(">qiibIhiqqqhii")
BASE_AND_LENGTH = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_AT = 23  # last_offset_delta's place in the header
# the smallest record: length, attributes, timestamp delta, offset delta, key length, value
# length and header count, a byte each
MIN_RECORD_SIZE = 7
_BYTES_TYPES = (bytes, bytearray, memoryview)
_CODECS = frozenset(range(5))
# The most times its own bytes the batches of one fetch may inflate to, together, beyond one
# batch's cap (`InflationBudget`). Honest data inflates a few times (JSON log lines: some 6
# times in zstd or gzip, 3 in lz4 or snappy, which cannot inflate much past 21 times at all);
# a bomb of zeros, many thousand times.
MAX_INFLATION = 100


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class BatchFlags:
    """What a batch's attributes say; for `RecordBatch` and `read_committed.FetchedBatch`."""

    __slots__ = ()
    attributes: int

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


@dataclass(slots=True)
class RecordBatch(BatchFlags):
    base_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[Record]

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_CODEC

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & ATTR_TIMESTAMP_TYPE else CREATE_TIME

    @property
    def is_abort_marker(self) -> bool:
        """A control batch saying its producer's transaction aborted (Java's containsAbortMarker)."""
        return self.is_control and bool(self.records) and control_type(self.records[0].key) == CONTROL_ABORT

    @property
    def is_commit_marker(self) -> bool:
        """A control batch saying its producer's transaction committed."""
        return self.is_control and bool(self.records) and control_type(self.records[0].key) == CONTROL_COMMIT

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """Where the next fetch starts: compaction may leave the batch's tail records missing."""
        return self.base_offset + self.last_offset_delta + 1


# ---------------------------------------------------------------------------- varints


def _uvarint_bytes(u: int) -> bytes:
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zigzag varint (varlong when needed) of a signed 64-bit value."""
    return _uvarint_bytes(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


_TABLE_SIZE = 1 << 14
# _ZZ[n] is the zigzag varint of n for 0 <= n < _TABLE_SIZE: every length and offset delta of
# an ordinary batch is a lookup, not a loop
_ZZ = [encode_varint(n) for n in range(_TABLE_SIZE)]
_NULL = encode_varint(-1)


def _zz(n: int) -> bytes:
    if 0 <= n < _TABLE_SIZE:
        return _ZZ[n]
    return encode_varint(n)


def decode_varint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """Zigzag varint at `pos`: (value, position after it). Malformed input raises `DecodeError`."""
    u, pos = read_uvarint(data, pos)
    return (u >> 1) ^ -(u & 1), pos


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    u = 0
    shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise DecodeError("varint runs past the end of the data")
        b = data[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            return u, pos
        shift += 7
        if shift >= 70:
            raise DecodeError("varint longer than 10 bytes")


# ---------------------------------------------------------------------------- encoding


def read_varints(view: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varint at each of `pos` in `view` (a uint8 array), and the positions after
    them: `decode_varint` over many places at once (numpy). Read as unsigned 64-bit, as Java's
    readVarlong does: a value of 2**62 or more is not sign-flipped."""
    b = view[pos].astype(np.uint64)
    value = b & 0x7F
    after = pos + 1
    more = np.flatnonzero(b & 0x80)
    shift = 7
    while len(more):
        if shift > 63:
            raise DecodeError("varint longer than 10 bytes")
        b = view[after[more]].astype(np.uint64)
        value[more] |= (b & 0x7F) << shift
        after[more] += 1
        more = more[(b & 0x80) != 0]
        shift += 7
    return (value >> 1).view(np.int64) ^ -(value & 1).view(np.int64), after


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
        if keys is None and headers is None and ts_deltas is None and n < _TABLE_SIZE:
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
    tail = _TAIL.pack(attributes, n - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence, n)
    crc = crc32c(body, crc32c(tail))
    prefix = _PREFIX.pack(
        base_offset, HEADER_SIZE - LENGTH_OFFSET + len(body), partition_leader_epoch, MAGIC, crc
    )
    return prefix, tail, body


# ---------------------------------------------------------------------------- control batches

# A control batch (transactional, bit 5 set) holds one control record: its key is version int16
# (0) + type int16, its value (an end-transaction marker) version int16 (0) + coordinator_epoch int32.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_MARKER = struct.Struct(">hi")


def encode_control_batch(commit: bool, producer_id: int, producer_epoch: int, *, base_offset: int = 0,
                         timestamp: int | None = None, coordinator_epoch: int = 0) -> bytes:
    """The marker a transaction coordinator writes when a transaction of `producer_id` ends."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _END_TXN_MARKER.pack(0, coordinator_epoch)
    return encode_record_batch([value], [key], timestamp, base_offset=base_offset, producer_id=producer_id,
                               producer_epoch=producer_epoch, is_transactional=True, is_control=True)


def control_type(key: bytes | None) -> int:
    """The type of a control record from its key (`CONTROL_ABORT`, `CONTROL_COMMIT`, or another
    a newer broker writes)."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError(f"a control record's key holds {0 if key is None else len(key)} bytes, not 4")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"a control record's key has the negative version {version}")
    return kind


# _PLAIN_PREFIX[i]: attributes 0, timestamp delta 0, offset delta i, null key
_PLAIN_PREFIX = [b"\x00\x00" + _ZZ[i] + _NULL for i in range(_TABLE_SIZE)]
_PLAIN_NULL_VALUE = [p + _NULL + b"\x00" for p in _PLAIN_PREFIX]


def _encode_plain(values: list) -> bytes:
    """Records with null keys, no headers and one timestamp: the producer's common case (fewer than 16384)."""
    zz = _ZZ
    size = _TABLE_SIZE
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
    ts_field = _zigzag_constant(0, n) if ts_deltas is None else _zigzag_varints(np.asarray(ts_deltas, np.int64))
    offset_field = _offset_deltas(n)
    key_len_field = _zigzag_constant(-1, n) if keys is None else _zigzag_varints(klen)
    value_len_field = _zigzag_varints(vlen)
    headers_len = 1 if headers is None else np.diff(headers.offsets)  # without headers: a count of 0
    body_len = (1 + ts_field[1] + offset_field[1] + key_len_field[1] + np.maximum(klen, 0)
                + value_len_field[1] + np.maximum(vlen, 0) + headers_len)  # 1: the attributes byte
    one = _zigzag_constant(0, n)  # attributes: a zero byte
    if headers is None:  # each record's header count (0) goes first in the next record's prefix
        trailer = (one[0], np.r_[0, np.ones(n - 1, np.int64)])
        last = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(np.r_[np.zeros(n, np.int64), 1]),
                                                             pa.py_buffer(b"\x00")])  # the last header count
        head = [trailer, _zigzag_varints(body_len), one, ts_field, offset_field, key_len_field]
    else:
        last = _binary(headers, n)
        head = [_zigzag_varints(body_len), one, ts_field, offset_field, key_len_field]
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
    each = pc.binary_join_element_wise(_rows([_zigzag_varints(np.diff(keys.offsets))]), _binary(keys, m),
                                       _rows([_zigzag_varints(vlen)]), _binary(values, m),
                                       pa.scalar(b"", pa.large_binary()), null_handling="replace", null_replacement="")
    each_offsets = np.frombuffer(each.buffers()[1], np.int64, m + 1, each.offset * 8)
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    per_record = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(each_offsets[starts]),
                                                              each.buffers()[2]])
    joined = pc.binary_join_element_wise(_rows([_zigzag_varints(counts)]), per_record,
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
    zz = _zz
    out = [zz(len(hs))]
    for hk, hv in hs:
        if not isinstance(hk, str):
            raise TypeError(f"headers[{i}]: header key must be str, not {type(hk).__name__}")
        hkb = hk.encode("utf-8")
        out.append(zz(len(hkb)))
        out.append(hkb)
        if hv is None:
            out.append(_NULL)
        elif isinstance(hv, _BYTES_TYPES):
            hv = bytes(hv)
            out.append(zz(len(hv)))
            out.append(hv)
        else:
            raise TypeError(f"headers[{i}]: header {hk!r} value must be bytes or None, not {type(hv).__name__}")
    return b"".join(out)


def _zigzag_varints(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's zigzag varint: an (n, width) byte matrix, left-aligned, and each one's length."""
    if len(x) and x.min() == x.max():  # one value for all (fixed-size values, say): encode it once
        return _zigzag_constant(int(x[0]), len(x))
    u = ((x << 1) ^ (x >> 63)).astype(np.uint64)
    top = int(u.max()) if len(u) else 0
    width = max(1, (top.bit_length() + 6) // 7)
    out = np.empty((len(u), width), np.uint8)
    lengths = np.ones(len(u), np.int64)
    rest = u
    for k in range(width):
        byte = (rest & np.uint64(0x7F)).astype(np.uint8)
        rest = rest >> np.uint64(7)
        more = rest != 0
        out[:, k] = byte | (more.astype(np.uint8) << 7)
        lengths += more
    return out, lengths


def _zigzag_constant(value: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`_zigzag_varints` of n times the same value, as read-only broadcasts of one encoding."""
    encoded = np.frombuffer(_zz(value), np.uint8)
    return np.broadcast_to(encoded, (n, len(encoded))), np.broadcast_to(np.int64(len(encoded)), (n,))


_OFFSET_DELTAS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _offset_deltas(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The offset-delta field of n records (0 to n-1), the same for every batch of n: kept."""
    found = _OFFSET_DELTAS.get(n)
    if found is None:
        if len(_OFFSET_DELTAS) >= 8:
            _OFFSET_DELTAS.pop(next(iter(_OFFSET_DELTAS)))
        found = _OFFSET_DELTAS[n] = _zigzag_varints(np.arange(n, dtype=np.int64))
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
    zz = _zz
    for i, v in enumerate(values):
        rec = [b"\x00", zz(ts_deltas[i]) if ts_deltas is not None else b"\x00", zz(i)]
        k = keys[i] if keys is not None else None
        if k is None:
            rec.append(_NULL)
        else:
            rec.append(zz(len(k)))
            rec.append(k)
        if v is None:
            rec.append(_NULL)
        else:
            rec.append(zz(len(v)))
            rec.append(v)
        hs = headers[i] if headers is not None else None
        rec.append(hs if type(hs) is bytes else _encode_header_list(hs, i))  # bytes: encoded already
        body = b"".join(rec)
        append(zz(len(body)))
        append(body)
    return b"".join(parts)


# ---------------------------------------------------------------------------- decoding


class InflationBudget:
    """What the compressed batches of one fetch may still inflate to, together: one batch's cap
    (`max.decompressed.batch.bytes`) plus `MAX_INFLATION` times the fetched bytes. Each batch
    alone may inflate to that cap; without this bound, many batches each under it (twenty of 25
    MiB of zeros, a few KiB on the wire) would inflate to the cap many times over.

    Made for one partition's part of a fetch by `decode_record_batches` and
    `arrow_batches.records_to_arrow`; made for a whole Fetch answer by a fetch loop that decodes
    every partition of it in one process (`actors.group_member`, through `fetcher.decode`), and
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


def read_batch_header(buf: Any, pos: int, end: int, check_crc: bool) -> tuple | None:
    """The header of the batch at `pos` as its 13 fields (in `_HEAD`'s order), checked against
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
    head = _HEAD.unpack_from(buf, pos)
    base_offset, length, _epoch, magic, crc, attributes, _delta, _ts, _max_ts, _pid, _pepoch, _seq, count = head
    batch_end = pos + LENGTH_OFFSET + length
    if length < HEADER_SIZE - LENGTH_OFFSET:
        raise _short_batch_error(buf, pos, end, base_offset, length)
    if batch_end > end:
        return None  # cut at the fetch size limit
    if magic != MAGIC:
        raise DecodeError(f"record batch at offset {base_offset} has magic {magic}; only magic 2 is supported")
    if check_crc and crc32c(memoryview(buf)[pos + _CRC_START : batch_end]) != crc:
        actual = crc32c(memoryview(buf)[pos + _CRC_START : batch_end])
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
        (last_delta,) = _LAST_DELTA.unpack_from(view, pos + _LAST_DELTA_AT)
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
