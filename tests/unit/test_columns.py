"""BinaryColumn: a column of bytes/None in one buffer, cut and joined like the list it stands for."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pyarrow as pa
import pytest

from raykafka.wire.columns import BinaryColumn


def values(n: int, seed: int = 1) -> list:
    rng = random.Random(seed)
    return [None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 40)) for _ in range(n)]


@pytest.mark.parametrize("with_nulls", [True, False])
def test_a_column_reads_cuts_and_joins_as_its_list_does(with_nulls):
    items = values(300) if with_nulls else [v or b"" for v in values(300)]
    col = BinaryColumn.from_list(items)
    assert len(col) == 300 and col.to_list() == items and list(col) == items
    assert col[7] == items[7] and col[-1] == items[-1]
    assert col[10:50].to_list() == items[10:50] and col[::3].to_list() == items[::3]
    idx = [299, 0, 5, 5, 120]
    assert col.take(idx).to_list() == [items[i] for i in idx]
    assert col.lengths().tolist() == [len(v) if v else 0 for v in items]
    assert col.nbytes == sum(len(v) for v in items if v)
    joined = BinaryColumn.concat([col[200:], col[:20], BinaryColumn.from_list([b"x"])])
    assert joined.to_list() == items[200:] + items[:20] + [b"x"]


def test_a_slice_pickles_only_what_it_covers():
    col = BinaryColumn.from_list([b"a" * 1000] * 1000)
    part = col[10:12]
    wire = pickle.dumps(part, protocol=5)
    assert len(wire) < 3000  # two values of 1,000 bytes, not the whole megabyte
    back = pickle.loads(wire)
    assert back.to_list() == [b"a" * 1000] * 2 and int(back.offsets[0]) == 0


def test_from_list_refuses_what_is_not_bytes_and_from_arrow_what_is_not_binary():
    assert BinaryColumn.from_list([b"a", "b"]) is None
    assert BinaryColumn.from_arrow(pa.array([1, 2])) is None


def test_an_arrow_column_is_shared_not_copied_until_pickled():
    arr = pa.array([b"k%d" % i for i in range(100)], pa.binary()).slice(10, 20)
    col = BinaryColumn.from_arrow(arr)
    assert not isinstance(col.data, bytes)  # the Arrow buffer itself
    assert col.to_list() == arr.to_pylist()
    assert pickle.loads(pickle.dumps(col)).to_list() == arr.to_pylist()
    assert np.array_equal(col.lengths(), [len(v) for v in arr.to_pylist()])
