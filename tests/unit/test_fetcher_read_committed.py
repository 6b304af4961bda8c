"""The fetcher's read_committed state, without Ray or a broker: what `PartitionFetch.take` hands
out of each answer, where its fetch position and its decided position stand, and its end."""

from __future__ import annotations

from types import SimpleNamespace

from raykafka.wire.arrow_batches import records_to_arrow
from raykafka.wire.config import parse_config
from raykafka.wire.errors import CorruptRecordError
from raykafka.wire.fetcher import Data, Failed, PartitionFetch
from raykafka.wire.read_committed import AbortedTransaction
from raykafka.wire.record_encoding import encode_control_batch, encode_record_batch

P1, P2 = 7, 8


def txn(offset: int, pid: int, *values: str) -> bytes:
    return encode_record_batch([v.encode() for v in values], base_offset=offset, producer_id=pid, producer_epoch=0,
                               base_sequence=offset, is_transactional=True)


def plain(offset: int, *values: str) -> bytes:
    return encode_record_batch([v.encode() for v in values], base_offset=offset)


def marker(offset: int, pid: int, commit: bool) -> bytes:
    return encode_control_batch(commit, pid, 0, base_offset=offset)


def answer(records: bytes, high_watermark: int, stable: int, aborted=None) -> SimpleNamespace:
    return SimpleNamespace(error_code=0, records=records, high_watermark=high_watermark, last_stable_offset=stable,
                           aborted_transactions=aborted)


def fetch(offset: int = 0, isolation: str = "read_committed") -> PartitionFetch:
    return PartitionFetch(parse_config({"bootstrap.servers": "x:1", "isolation.level": isolation}), "t", 0, offset)


def handed_out(data: Data) -> list[str]:
    batch, _ = records_to_arrow(data.records, "t", 0, data.fetched_at)
    return [v.decode() for v in batch.column("value").to_pylist()]


def test_a_batch_waits_for_its_marker_across_fetches_and_the_position_stays_before_it():
    """No list (tansu): P1's batch at 0 is held while its marker is not fetched; the plain
    record after it waits too (offset order); the marker releases both."""
    f = fetch(0)
    first = f.take(answer(txn(0, P1, "a") + plain(1, "b"), high_watermark=5, stable=5))
    assert isinstance(first, Data) and handed_out(first) == []
    assert (f.offset, first.position, f.high_watermark) == (2, 0, 5)
    second = f.take(answer(marker(2, P1, commit=True) + txn(3, P2, "x") + marker(4, P2, commit=False),
                           high_watermark=5, stable=5))
    assert handed_out(second) == ["a", "b"]
    assert (f.offset, second.fetched_at, second.position) == (5, 0, 5)


def test_the_broker_listing_aborted_transactions_switches_to_javas_rule():
    """Once a response lists an aborted transaction, batches are decided at once: nothing held."""
    f = fetch(0)
    data = f.take(answer(txn(0, P1, "x") + txn(1, P2, "a"), high_watermark=9, stable=9,
                         aborted=[AbortedTransaction(P1, 0)]))
    assert handed_out(data) == ["a"] and data.position == 2 and f.committed.held == 0


def test_a_seek_forgets_what_was_held():
    f = fetch(0)
    f.take(answer(txn(0, P1, "a"), high_watermark=3, stable=3))
    assert f.committed.held == 1
    f.moved_to(2)
    assert f.committed.held == 0 and (f.offset, f.position) == (2, 2)


def test_read_uncommitted_hands_out_the_response_as_it_came_and_ends_at_the_high_watermark():
    f = fetch(0, "read_uncommitted")
    records = txn(0, P1, "a") + marker(1, P1, commit=False)
    data = f.take(answer(records, high_watermark=2, stable=0))
    assert data.records is records and handed_out(data) == ["a"]
    assert (data.position, data.high_watermark) == (2, 2)


def test_a_malformed_control_batch_fails_its_partition_alone():
    """Read for its marker before any decoder sees it: a key too short to name one fails the
    partition (as a corrupt batch does under read_uncommitted), naming it."""
    f = fetch(0)
    bad = encode_record_batch([b"\x00\x00\x00\x00\x00\x00"], [b"\x00"], base_offset=0, producer_id=P1,
                              producer_epoch=0, is_transactional=True, is_control=True)
    outcome = f.take(answer(bad, high_watermark=1, stable=1))
    assert isinstance(outcome, Failed) and isinstance(outcome.error, CorruptRecordError)
    assert "t/0" in str(outcome.error) and "control record" in str(outcome.error)
