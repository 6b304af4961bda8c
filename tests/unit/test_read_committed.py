"""read_committed on batches built by our encoder: interleaved committed and aborted
transactions of two producers, as one partition's log holds them; by Java's rule (the Fetch
response's aborted transactions) and by markers (no list, as tansu 0.6.0 answers)."""

from __future__ import annotations

import pytest

from raykafka.wire.errors import CorruptRecordError
from raykafka.wire.protocol import Struct
from raykafka.wire.read_committed import (
    AbortedTransaction,
    CommittedFilter,
    CommittedReader,
    committed_batches,
)
from raykafka.wire.record_batch import CONTROL_ABORT, CONTROL_COMMIT, control_type
from raykafka.wire.record_decoding import decode_record_batches
from raykafka.wire.record_encoding import encode_control_batch, encode_record_batch

P1, P2, PLAIN = 1000, 2000, 3000
TS = 1_700_000_000_000


def data(offset: int, pid: int, *values: str, transactional: bool = True) -> bytes:
    return encode_record_batch([v.encode() for v in values], timestamps=TS, base_offset=offset, producer_id=pid,
                               producer_epoch=0 if pid >= 0 else -1, base_sequence=offset if pid >= 0 else -1,
                               is_transactional=transactional)


def marker(offset: int, pid: int, commit: bool) -> bytes:
    return encode_control_batch(commit, pid, 0, base_offset=offset, timestamp=TS)


# One partition's log, offset by offset.
LOG = [
    data(0, -1, "plain-0"),  # no producer id
    data(1, P1, "p1-aborted-1", "p1-aborted-2"),  # P1's first transaction: aborted
    data(3, P2, "p2-committed-1", "p2-committed-2"),  # P2's first transaction: committed
    data(5, P1, "p1-aborted-3"),
    marker(6, P1, commit=False),
    data(7, P2, "p2-committed-3"),
    data(8, P1, "p1-committed-1"),  # P1's second transaction: committed
    marker(9, P2, commit=True),
    data(10, P2, "p2-aborted-1"),  # P2's second transaction: aborted
    marker(11, P1, commit=True),
    data(12, PLAIN, "idempotent-1", transactional=False),  # a producer id, not transactional
    marker(13, P2, commit=False),
]
# Given out of order: the filter takes them by first offset.
ABORTED = [AbortedTransaction(P2, 10), AbortedTransaction(P1, 1)]
COMMITTED = ["plain-0", "p2-committed-1", "p2-committed-2", "p2-committed-3", "p1-committed-1", "idempotent-1"]


def values(batches) -> list[str]:
    return [r.value.decode() for b in batches for r in b.records]


def test_aborted_transactions_and_markers_are_dropped() -> None:
    batches = decode_record_batches(b"".join(LOG))
    assert len(batches) == len(LOG)
    assert values(committed_batches(batches, ABORTED)) == COMMITTED


def test_without_aborted_transactions_only_markers_are_dropped() -> None:
    batches = decode_record_batches(b"".join(LOG))
    every = values(b for b in batches if not b.is_control)
    assert values(committed_batches(batches, None)) == every
    assert len(every) == 10


def test_a_fetch_starting_inside_an_aborted_transaction() -> None:
    """The Fetch names a transaction that began before the fetch offset: its later batches drop."""
    batches = decode_record_batches(b"".join(LOG[3:]))
    assert values(committed_batches(batches, [Struct(producer_id=P1, first_offset=1)])) == [
        "p2-committed-3", "p1-committed-1", "p2-aborted-1", "idempotent-1"]


def test_fetches_of_one_partition_in_two_parts() -> None:
    """Each Fetch response brings the aborted transactions that overlap its own range."""
    first, second = decode_record_batches(b"".join(LOG[:6])), decode_record_batches(b"".join(LOG[6:]))
    kept = committed_batches(first, ABORTED) + committed_batches(second, [AbortedTransaction(P2, 10)])
    assert values(kept) == COMMITTED


def test_a_producer_is_judged_by_the_transaction_open_at_each_batch() -> None:
    """P1 commits, then a later transaction of P1 aborts: only the later one is dropped."""
    log = [data(0, P1, "c1"), marker(1, P1, commit=True), data(2, P1, "x1"), data(3, P2, "other"),
           data(4, P1, "x2"), marker(5, P1, commit=False), data(6, P1, "c2")]
    batches = decode_record_batches(b"".join(log))
    assert values(committed_batches(batches, [AbortedTransaction(P1, 2)])) == ["c1", "other", "c2"]


def test_control_batches_decode_as_markers() -> None:
    commit, abort = decode_record_batches(marker(9, P2, True) + marker(10, P1, False))
    for batch, kind in ((commit, CONTROL_COMMIT), (abort, CONTROL_ABORT)):
        assert batch.is_control and batch.is_transactional
        assert control_type(batch.records[0].key) == kind
    assert (commit.producer_id, abort.producer_id, commit.base_offset) == (P2, P1, 9)
    assert abort.is_abort_marker and not commit.is_abort_marker
    plain = decode_record_batches(data(0, P1, "v"))[0]
    assert plain.is_transactional and not plain.is_control and not plain.is_abort_marker


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00", b"\xff\xff\x00\x01"])
def test_a_malformed_control_key_is_named(key) -> None:
    with pytest.raises(CorruptRecordError, match="control record"):
        control_type(key)


def test_keep_is_called_batch_by_batch() -> None:
    batches = decode_record_batches(b"".join(LOG))
    f = CommittedFilter(ABORTED)
    assert [f.keep(b) for b in batches] == [True, False, True, False, False, True, True, False, False, False,
                                            True, False]


def test_by_markers_without_any_list_reads_exactly_the_committed() -> None:
    reader = CommittedReader(by_markers=True)
    assert values(reader.feed(decode_record_batches(b"".join(LOG)), None)) == COMMITTED
    assert reader.held == 0


def test_by_markers_holds_a_batch_until_its_marker_comes() -> None:
    """The first fetch ends before P2's commit marker: P2's batch waits, and with it every batch
    after it; the next fetch brings the marker and releases them in offset order."""
    reader = CommittedReader(by_markers=True)
    assert values(reader.feed(decode_record_batches(b"".join(LOG[:6])), [])) == ["plain-0"]
    assert reader.held == 4
    assert values(reader.feed(decode_record_batches(b"".join(LOG[6:])), [])) == COMMITTED[1:]
    assert reader.held == 0


def test_java_rule_trusts_the_list_and_without_one_hands_out_aborted_records() -> None:
    """Why by_markers exists: a broker that lists no aborted transactions (tansu 0.6.0)."""
    batches = decode_record_batches(b"".join(LOG))
    assert values(CommittedReader().feed(batches, ABORTED)) == COMMITTED
    assert "p1-aborted-1" in values(CommittedReader().feed(batches, []))


def test_by_markers_ignores_control_batches_of_no_producer() -> None:
    leader_change = encode_record_batch([b"\x00\x00\x00\x00\x00\x00"], [b"\x00\x00\x00\x02"], TS, base_offset=2,
                                        is_control=True)
    log = [data(0, P1, "x"), data(1, P2, "c"), leader_change, marker(3, P2, commit=True), marker(4, P1, commit=False)]
    reader = CommittedReader(by_markers=True)
    assert values(reader.feed(decode_record_batches(b"".join(log)), None)) == ["c"]
