"""`BinaryColumn`: many values (bytes or None) in one buffer with offsets, Arrow's binary layout.

The producer's batches cross five actors; a list of a hundred thousand `bytes` objects costs a
pickle and an unpickle of each at every hop, one buffer and one offsets array cost two copies.
A column behaves as a read-only sequence of bytes/None, and is cut (`take`, slices) and joined
(`concat`) without a Python object per value; only what a slice covers is pickled.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np


class BinaryColumn:
    __slots__ = ("data", "offsets", "valid")

    def __init__(self, data: Any, offsets: np.ndarray, valid: np.ndarray | None = None):
        self.data = data  # bytes or any buffer (numpy, pyarrow): values live at data[offsets[i]:offsets[i+1]]
        self.offsets = offsets  # int64, one more than the values
        self.valid = valid  # bool per value (False: None), or None when every value is set

    # -- making one ----------------------------------------------------------------

    @classmethod
    def from_arrow(cls, column: Any) -> BinaryColumn | None:
        """A binary or string Arrow array/chunked array, its buffers shared; None for other types."""
        import pyarrow as pa

        if isinstance(column, pa.ChunkedArray):
            chunks = [c for c in column.chunks if len(c)]
            if len(chunks) != 1:
                parts = [cls.from_arrow(c) for c in chunks]
                if any(p is None for p in parts):
                    return None
                return cls.concat(parts) if parts else cls(b"", np.zeros(1, np.int64))
            column = chunks[0]
        t = column.type
        if pa.types.is_binary(t) or pa.types.is_string(t):
            width: Any = np.int32
        elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
            width = np.int64
        else:
            return None
        n = len(column)
        validity, offsets, data = column.buffers()
        bounds = np.frombuffer(offsets, dtype=width)[column.offset:column.offset + n + 1].astype(np.int64)
        valid = None
        if column.null_count:
            valid = column.is_valid().to_numpy(zero_copy_only=False)
        return cls(data if data is not None else b"", bounds, valid)

    @classmethod
    def from_list(cls, items: Sequence[Any]) -> BinaryColumn | None:
        """`items` packed, if every one is bytes or None; else None (the caller keeps the list)."""
        kinds = set(map(type, items))
        if not kinds <= {bytes, type(None)}:
            return None
        valid = None
        if type(None) in kinds:
            valid = np.fromiter((v is not None for v in items), dtype=bool, count=len(items))
            items = [b"" if v is None else v for v in items]
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(b"".join(items), offsets, valid)

    # -- reading -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        """Each value's length, 0 for None."""
        out = np.diff(self.offsets)
        if self.valid is not None:
            out = np.where(self.valid, out, 0)
        return out

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1] - self.offsets[0]) if len(self.offsets) else 0

    def _bytes(self) -> bytes:
        """The buffer from the first value to the end of the last, as bytes."""
        start, stop = int(self.offsets[0]), int(self.offsets[-1])
        data = self.data
        if isinstance(data, bytes):
            return data if (start, stop) == (0, len(data)) else data[start:stop]
        return np.frombuffer(data, dtype=np.uint8)[start:stop].tobytes()

    def to_list(self) -> list:
        blob = self._bytes()
        ends = (self.offsets - self.offsets[0]).tolist()
        out = [blob[a:b] for a, b in zip(ends, ends[1:])]  # noqa: B905 (one shorter by design)
        if self.valid is not None:
            for i in np.flatnonzero(~self.valid).tolist():
                out[i] = None
        return out

    def __iter__(self) -> Iterator[bytes | None]:
        return iter(self.to_list())

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                return self.take(np.arange(start, stop, step))
            stop = max(start, stop)
            valid = None if self.valid is None else self.valid[start:stop]
            return type(self)(self.data, self.offsets[start:stop + 1], valid)
        i = range(len(self))[key]
        if self.valid is not None and not self.valid[i]:
            return None
        return np.frombuffer(self.data, dtype=np.uint8)[int(self.offsets[i]):int(self.offsets[i + 1])].tobytes()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} values, {self.nbytes} bytes)"

    # -- cutting and joining ---------------------------------------------------------

    def take(self, idx: Sequence[int] | np.ndarray) -> BinaryColumn:
        """The values at `idx` (each in range), in that order, in a new buffer: gathered by
        Arrow's `take` over this column's own buffers (seen as a large_binary array, no copy),
        value by value rather than through an index per byte."""
        import pyarrow as pa

        idx = np.asarray(idx, dtype=np.int64)
        source = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(self), [None, pa.py_buffer(np.ascontiguousarray(self.offsets, dtype=np.int64)),
                                           pa.py_buffer(self.data)])
        taken = source.take(pa.array(idx, pa.int64()))
        _, offsets, data = taken.buffers()
        bounds = np.frombuffer(offsets, dtype=np.int64)[taken.offset:taken.offset + len(taken) + 1]
        valid = None if self.valid is None else self.valid[idx]
        return type(self)(data if data is not None else b"", bounds, valid)

    @classmethod
    def concat(cls, columns: Sequence[BinaryColumn]) -> BinaryColumn:
        blobs, offsets, shift = [], [np.zeros(1, np.int64)], 0
        for c in columns:
            blobs.append(c._bytes())
            offsets.append(c.offsets[1:] - c.offsets[0] + shift)
            shift += c.nbytes
        valid = None
        if any(c.valid is not None for c in columns):
            valid = np.concatenate([c.valid if c.valid is not None else np.ones(len(c), bool) for c in columns])
        return cls(b"".join(blobs), np.concatenate(offsets), valid)

    def __reduce__(self) -> tuple:
        """Pickled compact (only the bytes the values cover, offsets from 0), the bytes as a numpy
        array: Ray moves those out of band into its object store and hands the receiver a view."""
        start, stop = int(self.offsets[0]), int(self.offsets[-1])
        data = np.frombuffer(self.data, dtype=np.uint8)[start:stop]
        return type(self), (data, self.offsets - start, self.valid)


class HeaderColumn(BinaryColumn):
    """Each record's headers as Kafka's record format has them: the header count, then each
    key and value after its length (`record_encoding.encode_headers`). Built in a few Arrow passes from
    a DataFrame's headers column, it crosses the actors as one buffer and the flusher copies
    each record's part as it is: no Python object per header anywhere on the way."""

    __slots__ = ()

    @classmethod
    def empty(cls, n: int) -> HeaderColumn:
        """`n` records without headers (a count of 0 each)."""
        return cls(b"\x00" * n, np.arange(n + 1, dtype=np.int64))
