"""`SharedColumn`: positions into columns in the object store, cut and joined without the values.

Reading is tested here with plain dict keys standing in for object refs (`read` only looks them
up); the producer tests send large batches through the real pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from raykafka.actors.batch import MessageBatch
from raykafka.actors.shared_column import SharedColumn, positions_at, read_fetched, shared_refs
from raykafka.wire.columns import BinaryColumn

VALUES_A = [b"a%d" % i for i in range(10)]
VALUES_B = [b"bb%d" % i if i % 3 else None for i in range(6)]
FETCHED = {"A": BinaryColumn.from_list(VALUES_A), "B": BinaryColumn.from_list(VALUES_B)}


def shared(ref: str, n: int) -> SharedColumn:
    return SharedColumn([(ref, range(n))])


def read(column: SharedColumn) -> list:
    return column.read(FETCHED).to_list()


def test_positions_stay_a_range_while_consecutive():
    assert positions_at(range(10, 20), np.array([2, 3, 4])) == range(12, 15)
    assert positions_at(range(10, 20), np.array([7])) == range(17, 18)
    cut = positions_at(range(10, 20), np.array([4, 2]))
    assert isinstance(cut, np.ndarray) and cut.tolist() == [14, 12]
    assert positions_at(np.array([5, 6, 9]), np.array([2, 0])).tolist() == [9, 5]


def test_slices_and_takes_read_the_same_values_as_the_list():
    column = SharedColumn.concat([shared("A", 10), shared("B", 6)])
    whole = VALUES_A + VALUES_B
    assert len(column) == 16 and read(column) == whole
    assert read(column[3:12]) == whole[3:12]
    assert read(column[12:]) == whole[12:]
    idx = [15, 0, 1, 2, 11, 10, 9, 4]
    taken = column.take(idx)
    assert read(taken) == [whole[i] for i in idx]
    assert len(taken.segments) == 4  # one per run inside one segment: [15], [0 1 2], [11 10], [9 4]
    assert taken.segments[1][1] == range(0, 3)
    with pytest.raises(ValueError):
        column[::2]


def test_concat_joins_a_range_that_continues_the_one_before():
    joined = SharedColumn.concat([shared("A", 10)[0:4], shared("A", 10)[4:7], shared("B", 6)[0:2]])
    assert [(ref, p) for ref, p in joined.segments] == [("A", range(0, 7)), ("B", range(0, 2))]
    assert read(joined) == VALUES_A[:7] + VALUES_B[:2]
    assert SharedColumn.concat([shared("A", 10)[5:], shared("A", 10)[:5]]).segments[1][1] == range(0, 5)


def test_read_fetched_leaves_other_columns_as_they_are():
    columns = [shared("B", 6)[1:3], [b"x"], None, SharedColumn.concat([shared("A", 10)[:1], shared("B", 6)[:1]])]
    refs = shared_refs(columns)
    assert refs == ["B", "A"]  # each once, in the order met
    out = read_fetched(columns, refs, [FETCHED["B"], FETCHED["A"]])
    assert out[0].to_list() == VALUES_B[1:3] and out[1] == [b"x"] and out[2] is None
    assert out[3].to_list() == [VALUES_A[0], VALUES_B[0]]


def test_message_batches_cut_and_join_shared_values_and_id_ranges():
    batch = MessageBatch("t", ids=range(100, 110), values=shared("A", 10), nbytes=200)
    part = batch.take([2, 3, 4], partition=1)
    assert part.ids == range(102, 105) and part.values.segments[0][1] == range(2, 5)
    scattered = batch.take([1, 5])
    assert scattered.ids.tolist() == [101, 105] and read(scattered.values) == [VALUES_A[1], VALUES_A[5]]
    joined = MessageBatch.concat([batch.slice(0, 4), batch.slice(4, 10)])
    assert joined.ids == range(100, 110) and read(joined.values) == VALUES_A
    mixed = MessageBatch.concat([batch.slice(0, 2), scattered])
    assert mixed.ids.tolist() == [100, 101, 101, 105]
