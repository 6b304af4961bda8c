"""Partitioners: which partition a message goes to, by the same formulas as librdkafka and Java.

Keyed formulas (n = partition count):
    murmur2, murmur2_random   (murmur2(key) & 0x7fffffff) % n   Java's default, librdkafka's murmur2*
    fnv1a, fnv1a_random       abs(int32(fnv1a_32(key))) % n      librdkafka's rd_fnv1a, which takes the
                              absolute value to match Sarama's NewHashPartitioner
                              (`int32(hash) % n`, negated if negative: the same partitions)
    consistent, consistent_random   crc32(key) % n               librdkafka's rd_crc32 (zlib's crc32)
Null keys: `murmur2`, `fnv1a` and `consistent` hash them as the empty key; the `*_random` ones
pick a random partition (`consistent_random` also for an empty key, as librdkafka does) and, as
librdkafka does, keep it for `sticky.partitioning.linger.ms` (10 ms by default; 0 picks one per
message), so that unkeyed messages fill a few large batches instead of one small one per
partition.

`partition_many` is on the producer's hot path: for many keys it hashes all keys of one length
at once with numpy, column by column, instead of byte by byte per key.
"""

from __future__ import annotations

import random
import struct
import time
import zlib

import numpy as np

from .columns import BinaryColumn
from .errors import ConfigError

__all__ = [
    "murmur2",
    "fnv1a",
    "Partitioner",
    "Murmur2RandomPartitioner",
    "Murmur2Partitioner",
    "Fnv1aPartitioner",
    "Fnv1aRandomPartitioner",
    "ConsistentPartitioner",
    "ConsistentRandomPartitioner",
    "RoundRobinPartitioner",
    "RandomPartitioner",
    "StickyPartitioner",
    "get_partitioner",
    "PARTITIONERS",
]

_M32 = 0xFFFFFFFF
_MURMUR_SEED = 0x9747B28C
_MURMUR_M = 0x5BD1E995
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193
_VECTOR_MIN = 64  # below this many keys the per-key loop is faster than numpy's set-up


# ---------------------------------------------------------------------------- hashes


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (seed 0x9747b28c) as a signed 32-bit int."""
    return _signed(_murmur2_u32(data))


def _murmur2_u32(data: bytes) -> int:
    m = _MURMUR_M
    length = len(data)
    h = (_MURMUR_SEED ^ length) & _M32
    n4 = length >> 2
    if n4:
        for k in struct.unpack_from(f"<{n4}I", data):
            k = (k * m) & _M32
            k ^= k >> 24
            h = ((h * m) & _M32) ^ ((k * m) & _M32)
    rem = length & 3
    if rem:
        i = n4 << 2
        if rem == 3:
            h ^= data[i + 2] << 16
        if rem >= 2:
            h ^= data[i + 1] << 8
        h = ((h ^ data[i]) * m) & _M32
    h ^= h >> 13
    h = (h * m) & _M32
    return h ^ (h >> 15)


def fnv1a(data: bytes) -> int:
    """The 32-bit FNV-1a hash of `data`, unsigned."""
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & _M32
    return h


def _signed(u: int) -> int:
    return u - 0x100000000 if u & 0x80000000 else u


def _fnv1a_abs(u: int) -> int:
    """librdkafka's rd_fnv1a result: abs of the signed hash, with -2**31 staying 2**31 as unsigned."""
    return 0x100000000 - u if u & 0x80000000 else u


# ---------------------------------------------------------------------------- vectorised hashing


def _murmur2_rows(rows: np.ndarray, length: int) -> np.ndarray:
    """murmur2 (unsigned) of every row of a (count, length) uint8 array."""
    m = np.uint32(_MURMUR_M)
    h = np.full(rows.shape[0], (_MURMUR_SEED ^ length) & _M32, dtype=np.uint32)
    n4 = length >> 2
    if n4:
        words = np.ascontiguousarray(rows[:, : n4 * 4]).view("<u4")
        for j in range(n4):
            k = words[:, j] * m
            k ^= k >> np.uint32(24)
            k *= m
            h *= m
            h ^= k
    rem = length & 3
    if rem:
        i = n4 << 2
        if rem == 3:
            h ^= rows[:, i + 2].astype(np.uint32) << np.uint32(16)
        if rem >= 2:
            h ^= rows[:, i + 1].astype(np.uint32) << np.uint32(8)
        h ^= rows[:, i].astype(np.uint32)
        h *= m
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    return h


def _fnv1a_rows(rows: np.ndarray, length: int) -> np.ndarray:
    prime = np.uint32(_FNV_PRIME)
    h = np.full(rows.shape[0], _FNV_OFFSET, dtype=np.uint32)
    for j in range(length):
        h ^= rows[:, j].astype(np.uint32)
        h *= prime
    return h


# ---------------------------------------------------------------------------- partitioners


def _hash_column(keys: BinaryColumn, rows: np.ndarray, rows_fn, scalar_fn) -> np.ndarray:
    """The unsigned hash of each key of `keys` at `rows` (a null key as the empty key), one numpy
    pass per distinct key length, straight from the column's buffer; a length shared by few keys
    is hashed key by key (`scalar_fn`), where numpy's set-up costs more."""
    source = np.frombuffer(keys.data, dtype=np.uint8)
    starts = keys.offsets[rows]
    lengths = keys.offsets[rows + 1] - starts
    if keys.valid is not None:
        lengths = np.where(keys.valid[rows], lengths, 0)
    out = np.empty(len(rows), dtype=np.uint32)
    with np.errstate(over="ignore"):
        for length in np.unique(lengths).tolist():
            where = np.flatnonzero(lengths == length)
            if len(where) < _VECTOR_MIN:
                for i in where.tolist():
                    start = int(starts[i])
                    out[i] = scalar_fn(source[start:start + length].tobytes())
                continue
            matrix = source[starts[where][:, None] + np.arange(length, dtype=np.int64)]
            out[where] = rows_fn(matrix.reshape(len(where), length), length)
    return out


def _check(num_partitions: int) -> None:
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")


class Partitioner:
    """Chooses a partition for a key; `partition_many` is the batched form the producer uses."""

    name = ""

    def partition(self, key: bytes | None, num_partitions: int) -> int:
        return self.partition_many([key], num_partitions)[0]

    def partition_many(self, keys: list[bytes | None], num_partitions: int) -> list[int]:
        raise NotImplementedError

    def partition_column(self, keys: BinaryColumn, num_partitions: int) -> np.ndarray:
        """`partition_many` for keys packed in a column: the same partitions, as an int64 array."""
        return np.asarray(self.partition_many(keys.to_list(), num_partitions), dtype=np.int64)


class _HashPartitioner(Partitioner):
    """A keyed hash modulo the partition count; subclasses say what a null key does."""

    random_null = False  # null keys go to a random partition instead of the empty key's
    random_empty = False  # empty keys too (consistent_random)

    def __init__(self, seed: int | None = None, sticky_ms: int = 0):
        self._random = random.Random(seed)
        self.sticky_s = sticky_ms / 1000
        self._sticky: tuple[int, int, float] | None = None  # (partition, partition count, chosen at)

    def _random_partition(self, n: int) -> int:
        """Where a null key goes: the sticky partition while it lasts, else a new random one."""
        if not self.sticky_s:
            return self._random.randrange(n)
        now = time.monotonic()
        held = self._sticky
        if held is None or held[1] != n or now - held[2] >= self.sticky_s:
            choice = self._random.randrange(n)
            if held is not None and n > 1 and choice == held[0]:
                choice = (choice + 1 + self._random.randrange(n - 1)) % n
            held = self._sticky = (choice, n, now)
        return held[0]

    def _hash(self, key: bytes) -> int:
        raise NotImplementedError

    _rows = None  # vectorised form of _hash, if any

    def _reduce(self, h: int, n: int) -> int:
        return h % n

    def _reduce_many(self, h: np.ndarray, n: int) -> np.ndarray:
        """`_reduce` of every hash in `h` (uint32) at once."""
        return h.astype(np.int64) % n

    def partition(self, key: bytes | None, num_partitions: int) -> int:
        _check(num_partitions)
        if key is None or (not key and self.random_empty):
            if self.random_null:
                return self._random_partition(num_partitions)
            key = b""
        return self._reduce(self._hash(key if type(key) is bytes else bytes(key)), num_partitions)

    def partition_many(self, keys: list[bytes | None], num_partitions: int) -> list[int]:
        _check(num_partitions)
        n = num_partitions
        if self.random_null and self.sticky_s and keys.count(None) == len(keys):
            return [self._random_partition(n)] * len(keys)  # unkeyed: all to the sticky partition
        if len(keys) < _VECTOR_MIN or self._rows is None or self.random_empty:
            return [self.partition(k, n) for k in keys]
        packed = BinaryColumn.from_list([k if k is None or type(k) is bytes else bytes(k) for k in keys])
        return self.partition_column(packed, n).tolist()

    def partition_column(self, keys: BinaryColumn, num_partitions: int) -> np.ndarray:
        """The keys hashed from the column's buffer, without a bytes object per key; null keys
        placed as `partition_many` places them. A partitioner without a vectorised hash, or one
        that sends empty keys to a random partition, goes through the list instead."""
        _check(num_partitions)
        n = num_partitions
        if self._rows is None or self.random_empty or len(keys) < _VECTOR_MIN:
            return super().partition_column(keys, n)
        out = np.empty(len(keys), dtype=np.int64)
        valid = np.ones(len(keys), dtype=bool) if keys.valid is None else keys.valid
        hashed = np.flatnonzero(valid) if self.random_null else np.arange(len(keys))
        out[hashed] = self._reduce_many(_hash_column(keys, hashed, self._rows, self._hash), n)
        if self.random_null:
            nulls = np.flatnonzero(~valid)
            if self.sticky_s:  # all of this call's null keys to the sticky partition
                out[nulls] = self._random_partition(n) if len(nulls) else 0
            else:
                out[nulls] = [self._random_partition(n) for _ in range(len(nulls))]
        return out


class Murmur2Partitioner(_HashPartitioner):
    """librdkafka `murmur2`: Java's formula; a null key hashes as the empty key."""

    name = "murmur2"
    _hash = staticmethod(_murmur2_u32)
    _rows = staticmethod(_murmur2_rows)

    def _reduce(self, h: int, n: int) -> int:
        return (h & 0x7FFFFFFF) % n

    def _reduce_many(self, h: np.ndarray, n: int) -> np.ndarray:
        return (h & np.uint32(0x7FFFFFFF)).astype(np.int64) % n


class Murmur2RandomPartitioner(Murmur2Partitioner):
    """librdkafka `murmur2_random`, Java's default for keyed messages; null keys go to a random partition."""

    name = "murmur2_random"
    random_null = True


class Fnv1aPartitioner(_HashPartitioner):
    """librdkafka `fnv1a` (= Sarama's default hash partitioner); a null key hashes as the empty key."""

    name = "fnv1a"
    _hash = staticmethod(fnv1a)
    _rows = staticmethod(_fnv1a_rows)

    def _reduce(self, h: int, n: int) -> int:
        return _fnv1a_abs(h) % n

    def _reduce_many(self, h: np.ndarray, n: int) -> np.ndarray:
        wide = h.astype(np.int64)
        return np.where(wide & 0x80000000, 0x100000000 - wide, wide) % n


class Fnv1aRandomPartitioner(Fnv1aPartitioner):
    """librdkafka `fnv1a_random`: null keys go to a random partition."""

    name = "fnv1a_random"
    random_null = True


class ConsistentPartitioner(_HashPartitioner):
    """librdkafka `consistent`: crc32 of the key; null and empty keys all land on one partition."""

    name = "consistent"
    _hash = staticmethod(zlib.crc32)


class ConsistentRandomPartitioner(ConsistentPartitioner):
    """librdkafka `consistent_random`: crc32 of the key; null and empty keys go to a random partition."""

    name = "consistent_random"
    random_null = True
    random_empty = True


class RoundRobinPartitioner(Partitioner):
    """Every message (keyed or not) to the next partition in turn, as Java's RoundRobinPartitioner."""

    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def partition_many(self, keys: list[bytes | None], num_partitions: int) -> list[int]:
        _check(num_partitions)
        start = self._next
        self._next = (start + len(keys)) % num_partitions
        return [(start + i) % num_partitions for i in range(len(keys))]


class RandomPartitioner(Partitioner):
    """Every message to a random partition, ignoring its key."""

    name = "random"

    def __init__(self, seed: int | None = None):
        self._random = random.Random(seed)

    def partition_many(self, keys: list[bytes | None], num_partitions: int) -> list[int]:
        _check(num_partitions)
        randrange = self._random.randrange
        return [randrange(num_partitions) for _ in keys]


class StickyPartitioner(Partitioner):
    """Null keys stay on one partition until `next_batch()`, so they fill whole batches; keyed ones use murmur2.

    The producer calls `next_batch()` when the sticky partition's batch is sent (Java's KIP-480).
    """

    name = "sticky"

    def __init__(self, seed: int | None = None):
        self._random = random.Random(seed)
        self._keyed = Murmur2Partitioner()
        self._current: int | None = None
        self._previous: int | None = None

    def next_batch(self) -> None:
        """Move null-keyed messages to a different partition from now on."""
        self._previous = self._current
        self._current = None

    def _sticky(self, n: int) -> int:
        if self._current is None or self._current >= n:
            choice = self._random.randrange(n)
            if n > 1 and choice == self._previous:
                choice = (choice + 1 + self._random.randrange(n - 1)) % n
            self._current = choice
        return self._current

    def partition_many(self, keys: list[bytes | None], num_partitions: int) -> list[int]:
        _check(num_partitions)
        out = self._keyed.partition_many(keys, num_partitions)
        if None in keys:
            sticky = self._sticky(num_partitions)
            for i, k in enumerate(keys):
                if k is None:
                    out[i] = sticky
        return out


PARTITIONERS: dict[str, type[Partitioner]] = {
    "murmur2_random": Murmur2RandomPartitioner,
    "murmur2": Murmur2Partitioner,
    "consistent": ConsistentPartitioner,
    "consistent_random": ConsistentRandomPartitioner,
    "fnv1a": Fnv1aPartitioner,
    "fnv1a_random": Fnv1aRandomPartitioner,
    "random": RandomPartitioner,
    "round_robin": RoundRobinPartitioner,
    "sticky": StickyPartitioner,
}


def get_partitioner(name: str = "murmur2_random", sticky_ms: int = 0) -> Partitioner:
    """A new partitioner for a `partitioner` config value (default `murmur2_random`); with the
    `*_random` ones, null keys keep one partition for `sticky_ms`."""
    try:
        cls = PARTITIONERS[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"partitioner: unknown value {name!r}; expected one of {', '.join(PARTITIONERS)}"
        ) from None
    if issubclass(cls, _HashPartitioner):
        return cls(sticky_ms=sticky_ms)
    return cls()
