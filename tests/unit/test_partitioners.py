"""Partitioners: golden hashes from Kafka's and librdkafka's own tests, the partition formulas, null keys."""

from __future__ import annotations

import math
import os
import random
import zlib
from collections import Counter

import pytest

from raykafka.wire.errors import ConfigError
from raykafka.wire.partitioners import (
    ConsistentPartitioner,
    ConsistentRandomPartitioner,
    Fnv1aPartitioner,
    Fnv1aRandomPartitioner,
    Murmur2Partitioner,
    Murmur2RandomPartitioner,
    RandomPartitioner,
    RoundRobinPartitioner,
    StickyPartitioner,
    fnv1a,
    get_partitioner,
    murmur2,
)

# Kafka's clients UtilsTest.testMurmur2
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# librdkafka src/rdmurmur2.c unittest (java_murmur2_results), as unsigned 32-bit
LIBRDKAFKA_MURMUR2 = {
    b"kafka": 0xD067CF64,
    b"giberish123456789": 0x8F552B0C,
    b"1234": 0x9FC97B14,
    b"234": 0xE7C009CA,
    b"34": 0x873930DA,
    b"4": 0x5A4B5CA1,
    b"PreAmbleWillBeRemoved,ThePrePartThatIs": 0x78424F1C,
    b"reAmbleWillBeRemoved,ThePrePartThatIs": 0x4A62B377,
    b"eAmbleWillBeRemoved,ThePrePartThatIs": 0xE0E4E09E,
    b"AmbleWillBeRemoved,ThePrePartThatIs": 0x62B8B43F,
    b"": 0x106E08D9,
}

# partitions the Java client's default partitioner gives with 1000 partitions (kafka-python's test)
JAVA_PARTITIONS_1000 = {b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566, b"\x00 ": 742}

# librdkafka src/rdfnv1a.c unittest: rd_fnv1a results (absolute value of the signed FNV-1a hash)
LIBRDKAFKA_FNV1A_ABS = {
    b"kafka": 0xD33C4E1,
    b"giberish123456789": 0x77A58295,
    b"1234": 0x23BDD03,
    b"234": 0x2DEA3CD2,
    b"34": 0x740FA83E,
    b"4": 0x310CA263,
    b"PreAmbleWillBeRemoved,ThePrePartThatIs": 0x65CBD69C,
    b"reAmbleWillBeRemoved,ThePrePartThatIs": 0x6E49C79A,
    b"eAmbleWillBeRemoved,ThePrePartThatIs": 0x69EED356,
    b"AmbleWillBeRemoved,ThePrePartThatIs": 0x6ABCC023,
    b"": 0x7EE3623B,
}

# FNV-1a 32-bit reference vectors (Fowler/Noll/Vo test suite)
FNV1A_32 = {b"": 0x811C9DC5, b"a": 0xE40C292C, b"foobar": 0xBF9CF968}


@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2.items())
def test_murmur2_kafka_golden(key, expected):
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected"), LIBRDKAFKA_MURMUR2.items())
def test_murmur2_librdkafka_golden(key, expected):
    assert murmur2(key) & 0xFFFFFFFF == expected
    assert -(2**31) <= murmur2(key) < 2**31


@pytest.mark.parametrize(("key", "expected"), JAVA_PARTITIONS_1000.items())
def test_java_default_partitions(key, expected):
    assert Murmur2RandomPartitioner().partition(key, 1000) == expected
    assert Murmur2Partitioner().partition(key, 1000) == expected


@pytest.mark.parametrize(("key", "expected"), FNV1A_32.items())
def test_fnv1a_reference(key, expected):
    assert fnv1a(key) == expected


@pytest.mark.parametrize(("key", "expected"), LIBRDKAFKA_FNV1A_ABS.items())
def test_fnv1a_partition_follows_librdkafka(key, expected):
    for n in (1, 3, 7, 100, 1009):
        assert Fnv1aPartitioner().partition(key, n) == expected % n


def _sarama_hash_partition(h: int, n: int) -> int:
    """Sarama NewHashPartitioner: int32(hash) % n with Go's truncated remainder, negated if negative."""
    s = h - 2**32 if h >= 2**31 else h
    p = int(math.fmod(s, n))  # Go's % truncates toward zero: the result takes the dividend's sign
    return -p if p < 0 else p


def test_fnv1a_matches_sarama_hash_partitioner():
    rng = random.Random(7)
    keys = [rng.randbytes(rng.randrange(0, 30)) for _ in range(2000)]
    p = Fnv1aPartitioner()
    for n in (3, 6, 7, 10):
        assert [p.partition(k, n) for k in keys] == [_sarama_hash_partition(fnv1a(k), n) for k in keys]


def test_consistent_is_crc32():
    p = ConsistentPartitioner()
    for key in (b"", b"a", b"hello", os.urandom(50)):
        assert p.partition(key, 17) == zlib.crc32(key) % 17
    assert p.partition(None, 17) == 0  # crc32 of nothing is 0


def test_null_keys():
    n = 11
    assert Murmur2Partitioner().partition(None, n) == Murmur2Partitioner().partition(b"", n)
    assert Fnv1aPartitioner().partition(None, n) == Fnv1aPartitioner().partition(b"", n)
    for cls in (Murmur2RandomPartitioner, Fnv1aRandomPartitioner, ConsistentRandomPartitioner):
        p = cls(seed=1)
        seen = {p.partition(None, n) for _ in range(500)}
        assert seen == set(range(n)), cls.__name__
    # consistent_random also spreads empty keys; murmur2_random hashes them
    cr = ConsistentRandomPartitioner(seed=2)
    assert len({cr.partition(b"", n) for _ in range(200)}) > 1
    assert {Murmur2RandomPartitioner().partition(b"", n) for _ in range(50)} == {
        (0x106E08D9 & 0x7FFFFFFF) % n
    }


@pytest.mark.parametrize(
    "name", ["murmur2_random", "murmur2", "consistent", "consistent_random", "fnv1a", "fnv1a_random"]
)
def test_partition_many_agrees_with_partition(name):
    rng = random.Random(3)
    keys: list = [rng.randbytes(rng.randrange(0, 25)) for _ in range(3000)]
    keys += [b"user-%06d" % i for i in range(500)]  # many keys of one length
    keys += [bytearray(b"buffer-key"), memoryview(b"view-key")]
    if name == "consistent_random":
        keys = [k for k in keys if len(k)]  # empty keys go to a random partition there
    p = get_partitioner(name)
    for n in (1, 3, 6, 7, 1000):
        many = p.partition_many(keys, n)
        assert many == [p.partition(k, n) for k in keys]
        assert all(0 <= x < n for x in many)
    small = keys[:10]
    assert p.partition_many(small, 7) == [p.partition(k, 7) for k in small]


def test_partition_many_null_keys_random_and_hashed():
    keys = [None, b"a", None, b"b"] * 100
    out = Murmur2RandomPartitioner(seed=4).partition_many(keys, 5)
    assert out[1::2] == [Murmur2Partitioner().partition(k, 5) for k in keys[1::2]]
    assert len(set(out[0::2])) > 1
    out = Murmur2Partitioner().partition_many(keys, 5)
    assert set(out[0::2]) == {Murmur2Partitioner().partition(b"", 5)}


@pytest.mark.parametrize(
    "name", ["murmur2_random", "murmur2", "consistent", "consistent_random", "fnv1a", "fnv1a_random", "round_robin"]
)
def test_partition_column_places_keys_as_partition_many_does(name):
    """Keys packed in a column (as `send_batch` and the Spark sink hand them over) land where the
    same keys in a list do: every length, a length shared by many keys, keys whose hash has its
    top bit set (fnv1a's absolute value), a sliced Arrow array and a null with bytes under it."""
    import pyarrow as pa

    from raykafka.wire.columns import BinaryColumn

    rng = random.Random(5)
    keys: list = [rng.randbytes(rng.randrange(1, 40)) for _ in range(3000)]
    keys += [b"user-%06d" % i for i in range(2000)]
    keys += [b""] * 100 if name != "consistent_random" else []
    for n in (1, 6, 7, 1000):
        expected = get_partitioner(name, 0).partition_many(keys, n)
        got = get_partitioner(name, 0).partition_column(BinaryColumn.from_list(keys), n)
        assert got.tolist() == expected
    # an Arrow slice, with a null whose slot still spans bytes (Arrow allows it)
    whole = pa.array([b"skipped"] + keys, pa.binary())
    mask = pa.array([False] + [i == 7 for i in range(len(keys))])
    column = BinaryColumn.from_arrow(pa.compute.if_else(mask, pa.scalar(None, pa.binary()), whole).slice(1))
    assert column.valid is not None and not column.valid[7]
    listed = keys[:7] + [None] + keys[8:]
    if name.endswith("_random"):  # nulls go to a random partition: only the keyed ones compare
        got = get_partitioner(name, 0).partition_column(column, 7).tolist()
        assert [g for i, g in enumerate(got) if i != 7] == [
            p for i, p in enumerate(get_partitioner(name, 0).partition_many(listed, 7)) if i != 7]
        assert 0 <= got[7] < 7
    else:
        assert get_partitioner(name, 0).partition_column(column, 7).tolist() == \
            get_partitioner(name, 0).partition_many(listed, 7)


def test_partition_column_null_keys_share_the_sticky_partition():
    from raykafka.wire.columns import BinaryColumn

    keys = [None] * 500 + [b"k%d" % i for i in range(500)]
    out = Murmur2RandomPartitioner(seed=1, sticky_ms=10_000).partition_column(BinaryColumn.from_list(keys), 6)
    assert len(set(out[:500].tolist())) == 1
    assert out[500:].tolist() == Murmur2Partitioner().partition_many(keys[500:], 6)


def test_random_partitioner_covers_all():
    counts = Counter(RandomPartitioner(seed=5).partition_many([b"same"] * 7000, 7))
    assert set(counts) == set(range(7))
    assert min(counts.values()) > 800


def test_round_robin_cycles_across_calls():
    p = RoundRobinPartitioner()
    assert p.partition_many([None, b"k", None], 4) == [0, 1, 2]
    assert [p.partition(b"k", 4) for _ in range(3)] == [3, 0, 1]
    assert p.partition_many([None] * 5, 4) == [2, 3, 0, 1, 2]


def test_sticky_partitioner():
    p = StickyPartitioner(seed=6)
    first = p.partition_many([None] * 50, 8)
    assert len(set(first)) == 1
    assert p.partition(None, 8) == first[0]
    keyed = p.partition_many([b"a", None, b"b"], 8)
    assert keyed[0] == Murmur2Partitioner().partition(b"a", 8)
    assert keyed[2] == Murmur2Partitioner().partition(b"b", 8)
    assert keyed[1] == first[0]
    p.next_batch()
    second = p.partition(None, 8)
    assert second != first[0]
    assert p.partition(None, 8) == second
    assert StickyPartitioner().partition(None, 1) == 0


def test_sticky_repicks_when_partitions_shrink():
    p = StickyPartitioner(seed=8)
    while p.partition(None, 10) < 3:
        p.next_batch()
    assert p.partition(None, 3) in range(3)


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("murmur2_random", Murmur2RandomPartitioner),
        ("murmur2", Murmur2Partitioner),
        ("consistent", ConsistentPartitioner),
        ("consistent_random", ConsistentRandomPartitioner),
        ("fnv1a", Fnv1aPartitioner),
        ("fnv1a_random", Fnv1aRandomPartitioner),
        ("random", RandomPartitioner),
        ("round_robin", RoundRobinPartitioner),
        ("sticky", StickyPartitioner),
    ],
)
def test_get_partitioner(name, cls):
    p = get_partitioner(name)
    assert type(p) is cls
    assert p.name == name
    assert get_partitioner(name) is not p  # each producer gets its own state


def test_default_is_murmur2_random():
    assert type(get_partitioner()) is Murmur2RandomPartitioner


@pytest.mark.parametrize("name", ["crc32", "", "Murmur2", None])
def test_unknown_partitioner(name):
    with pytest.raises(ConfigError, match="partitioner"):
        get_partitioner(name)


def test_bad_partition_count():
    with pytest.raises(ValueError, match="num_partitions"):
        Murmur2Partitioner().partition(b"a", 0)


def test_null_keys_stick_to_one_partition_for_sticky_partitioning_linger_ms():
    """As librdkafka: with a `*_random` partitioner, unkeyed messages keep one partition for
    `sticky.partitioning.linger.ms`, then move to another; keyed ones still hash."""
    p = get_partitioner("murmur2_random", sticky_ms=60_000)
    first = p.partition_many([None] * 100, 6)
    assert len(set(first)) == 1
    assert p.partition(None, 6) == first[0]
    mixed = p.partition_many([None, b"k1", None] * 50, 6)
    assert {mixed[i] for i in range(0, 150, 3)} == {first[0]}
    assert mixed[1] == p.partition(b"k1", 6) == (murmur2(b"k1") & 0x7FFFFFFF) % 6
    p.sticky_s = 0.0  # the window is over: a different partition, then one per message
    spread = p.partition_many([None] * 600, 6)
    assert len(set(spread)) == 6
    expired = get_partitioner("murmur2_random", sticky_ms=1)
    a = expired.partition(None, 6)
    expired._sticky = (a, 6, expired._sticky[2] - 1.0)  # chosen a second ago: past its 1 ms
    assert expired.partition(None, 6) != a
