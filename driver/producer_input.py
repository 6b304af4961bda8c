"""What `Producer.send` and `send_batch` accept, normalised: the columns of a batch from lists
or a pyarrow Table/RecordBatch (`KAFKA_WRITE_COLUMNS`), headers, timestamps, partitions
and topics checked with an error naming the argument, and each record's size for buffer.memory.

Plain functions, no Ray and no state; called by driver/producer.py and driver/local_pipeline.py
(the same columns in, the same errors), and `check_write_columns`
by the sinks too (`spark_bridge.sink`, `spark_bridge.ray_data`, `spark_bridge.node_writers`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from ..actors.batch import RECORD_OVERHEAD
from ..wire.columns import BinaryColumn, HeaderColumn
from ..wire.errors import MessageTooLargeError
from ..wire.record_encoding import encode_header_lists, encode_headers

MAX_PARTITION = (1 << 31) - 1  # Kafka's partition numbers are int32
MAX_TIMESTAMP = (1 << 63) - 1  # and timestamps int64 ms
# The columns a Kafka write takes from a table: Spark's Kafka sink columns (`value` required;
# `key`, `topic`, `partition`, `headers` optional) and a `timestamp` (ms since the epoch, or an
# Arrow timestamp), which send_batch reads as it reads the others.
KAFKA_WRITE_COLUMNS = ("key", "value", "topic", "partition", "headers", "timestamp")


def check_write_columns(names: list[str]) -> None:
    """Refuse a table without a `value` column, or with a column no Kafka write takes, naming
    it: the one rule of `send_batch` (`batch_columns`) and of the Ray Data and Spark sinks."""
    if "value" not in names:
        raise ValueError(f"a Kafka write needs a 'value' column; the table has {names}")
    unknown = [name for name in names if name not in KAFKA_WRITE_COLUMNS]
    if unknown:
        raise ValueError(f"columns {unknown} are not Kafka sink columns ({', '.join(KAFKA_WRITE_COLUMNS)})")


def record_headers(headers: Any, name: str = "headers") -> list | None:
    """One record's headers as [(str, bytes or None)], from pairs or a dict; None when it has none."""
    if headers is None:
        return None
    if isinstance(headers, str | bytes | bytearray | memoryview) or not isinstance(headers, Iterable):
        raise TypeError(f"{name}: expected (str, bytes) pairs or a dict, not {type(headers).__name__}")
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for item in items:
        try:
            k, v = item
        except (TypeError, ValueError):
            raise TypeError(f"{name}: expected (str, bytes) pairs or a dict, got {item!r}") from None
        if not isinstance(k, str):
            raise TypeError(f"{name}: header key must be str, not {type(k).__name__}")
        if isinstance(v, str):
            v = v.encode("utf-8")
        elif v is not None and not isinstance(v, (bytes, bytearray, memoryview)):
            raise TypeError(f"{name}: header {k!r} value must be bytes, str or None, not {type(v).__name__}")
        out.append((k, None if v is None else bytes(v)))
    return out or None


def timestamp_ms(value: Any, name: str = "timestamp") -> int:
    """A record timestamp in ms since the epoch, or a TypeError/ValueError naming `name`."""
    if type(value) is int and 0 <= value <= MAX_TIMESTAMP:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be an int (ms since the epoch) or None, not {type(value).__name__}")
    if not (math.isfinite(value) and 0 <= value <= MAX_TIMESTAMP):
        raise ValueError(f"{name} must be between 0 and {MAX_TIMESTAMP} ms, not {value!r}")
    return int(value)


def batch_columns(values: Any, keys: Any, headers: Any, partitions: Any, timestamps: Any,
             raw: tuple[bool, bool] = (False, False)) -> tuple:
    """The columns of a `send_batch`, from lists or from a pyarrow Table/RecordBatch.

    `raw`: whether the value and key serializers take bytes as they are, so binary and string
    columns may be sliced to bytes from their buffers."""
    topics = None
    if isinstance(values, (pa.Table, pa.RecordBatch)):
        table = values
        names = table.schema.names
        check_write_columns(names)

        def col(name: str, as_bytes: bool = False) -> list | None:
            if name not in names:
                return None
            column = table.column(name)
            packed = BinaryColumn.from_arrow(column) if as_bytes else None
            return column.to_pylist() if packed is None else packed

        values = col("value", raw[0])
        keys = keys if keys is not None else col("key", raw[1])
        partitions = partitions if partitions is not None else col("partition")
        topics = col("topic")
        if headers is None and "headers" in names:
            headers = encode_headers(table.column("headers"))
        if timestamps is None and "timestamp" in names:
            timestamps = [int(t.timestamp() * 1000) if hasattr(t, "timestamp") else t for t in col("timestamp")]
    if values is None:
        raise TypeError("send_batch: values must be given (a list, or a pyarrow Table/RecordBatch)")
    values = as_list("values", values, pa)
    keys = as_list("keys", keys, pa)
    headers = as_list("headers", headers, pa)
    partitions = as_list("partitions", partitions, pa)
    if timestamps is not None and not isinstance(timestamps, numbers.Real):  # else one for every record
        timestamps = as_list("timestamps", timestamps, pa)
    if headers is not None and not isinstance(headers, HeaderColumn):
        headers = encode_header_lists([record_headers(h, f"headers[{i}]") for i, h in enumerate(headers)])
    return values, keys, headers, partitions, timestamps, topics


def raw_arrow(config: Mapping[str, Any]) -> tuple[bool, bool]:
    """Whether Arrow binary and string value and key columns may be sliced to bytes from their
    buffers (`batch_columns`' `raw`): when the serializer would only have encoded them to utf-8."""
    return config["value.serializer"] in ("bytes", "str"), config["key.serializer"] in ("bytes", "str")


def check_lengths(n: int, keys: Any, headers: Any, partitions: Any, timestamps: Any) -> None:
    """Each column given has one entry per value (a timestamp may be one number for all)."""
    for name, column in (("keys", keys), ("headers", headers), ("partitions", partitions), ("timestamps", timestamps)):
        if column is not None and not isinstance(column, numbers.Real) and len(column) != n:
            raise ValueError(f"{name} has {len(column)} entries for {n} values")


def as_list(name: str, column: Any, pa: Any) -> Any:
    """A `send_batch` column as a list (a BinaryColumn as it is), or a TypeError naming it."""
    if column is None or isinstance(column, list | BinaryColumn):  # HeaderColumn is one too
        return column
    if pa is not None and isinstance(column, pa.Array | pa.ChunkedArray):
        return column.to_pylist()
    if isinstance(column, str | bytes | bytearray | memoryview | Mapping) or not isinstance(column, Iterable):
        raise TypeError(f"send_batch: {name} must be a list (or a sequence) with one entry per record, "
                        f"not {type(column).__name__}")
    return list(column)


def packed(column: Any) -> Any:
    """A list of bytes/None as one BinaryColumn (one buffer to pickle at each actor hop, not a
    bytes object per message); anything else as it is."""
    if isinstance(column, list):
        return BinaryColumn.from_list(column) or column
    return column


def slice_bounds(sizes: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Consecutive record ranges of about `limit` bytes each (at least one record each)."""
    total = int(sizes.sum())
    if total <= limit:
        return [(0, len(sizes))]
    cuts = np.searchsorted(np.cumsum(sizes), np.arange(limit, total, limit), side="right")
    edges = [0, *np.unique(cuts[(cuts > 0) & (cuts < len(sizes))]).tolist(), len(sizes)]
    return list(zip(edges, edges[1:]))  # noqa: B905 (one shorter by design)


def partition_column(partitions: list) -> list[int]:
    """Explicit partitions as ints, -1 where None (numpy does the loop); a TypeError or
    ValueError naming `partitions` for anything else."""
    arr = np.asarray(partitions)
    if arr.dtype.kind not in "iu":
        kinds = set(map(type, partitions))
        if arr.dtype.kind != "O" or not kinds <= {int, type(None)}:
            names = ", ".join(sorted(k.__name__ for k in kinds))
            raise TypeError(f"send_batch: partitions must be ints or None, got {names}")
        arr = np.where(np.equal(arr, None), -1, arr)  # still Python ints: checked before the cast
    low, high = arr.min(), arr.max()
    if low < -1 or high > MAX_PARTITION:
        raise ValueError(f"send_batch: partitions must be between 0 and {MAX_PARTITION} (or None), "
                         f"got {low if low < -1 else high}")
    return arr.astype(np.int64).tolist()


def timestamp_column(timestamps: int | list, now_ms: int) -> int | list[int]:
    """A `send_batch`'s timestamps (one for all, or one per record, None for now) as ms."""
    if not isinstance(timestamps, list):
        return timestamp_ms(timestamps, "timestamps")
    arr = np.asarray(timestamps)
    if arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() > MAX_TIMESTAMP:
        return [now_ms if t is None else timestamp_ms(t, f"timestamps[{i}]") for i, t in enumerate(timestamps)]
    return arr.astype(np.int64).tolist()


def topic_column(topics: list) -> np.ndarray:
    """A `topic` column's names; a ValueError naming the first row without one."""
    if set(map(type, topics)) != {str} or "" in topics:
        row = next(i for i, t in enumerate(topics) if type(t) is not str or not t)
        raise ValueError(f"send_batch: the topic column needs a non-empty str in every row; "
                         f"row {row} has {topics[row]!r}")
    return np.asarray(topics, dtype=object)


def lengths(column: Any) -> np.ndarray:
    if isinstance(column, BinaryColumn):
        return column.lengths()
    if None in column:
        return np.fromiter((len(v) if v is not None else 0 for v in column), dtype=np.int64, count=len(column))
    return np.fromiter(map(len, column), dtype=np.int64, count=len(column))


def record_sizes(values: list, keys: list | None, headers: HeaderColumn | None) -> np.ndarray:
    sizes = lengths(values) + RECORD_OVERHEAD
    if keys is not None:
        sizes += lengths(keys)
    if headers is not None:
        sizes += headers.lengths()
    return sizes


def oversized(sizes: np.ndarray, max_request_size: int) -> np.ndarray:
    """Which records (by `record_sizes`) no request can carry: they fail before they are sent,
    with `too_large_error`."""
    return sizes > max_request_size


def too_large_error(max_request_size: int) -> MessageTooLargeError:
    return MessageTooLargeError(f"message larger than max.request.size={max_request_size}")
