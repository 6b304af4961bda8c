"""What a producer heals from, without Ray: the batches it keeps until their messages end, and
which unanswered messages the log already holds (driver/producer_heal.py)."""

from __future__ import annotations

from concurrent.futures import Future

from raykafka.actors.batch import MessageBatch
from raykafka.actors.producer_results import Outcome
from raykafka.driver.producer_heal import KeptBatches, acked_ends, written_outcomes
from raykafka.driver.producer_ledger import Ledger
from raykafka.wire.fetch import WrittenRecord


def sent(ledger: Ledger, topic: str, values: list[bytes], keys: list[bytes] | None = None,
         stamps: list[int] | None = None) -> MessageBatch:
    """Messages sent alone, gathered into one batch as the sender hands them on."""
    ids = []
    for v in values:
        ledger.reserve(len(v))
        ids.append(ledger.add(Future(), topic, 0, len(v)))
    return MessageBatch(topic=topic, ids=ids, values=list(values), keys=keys,
                        timestamps=stamps if stamps is not None else 1000, partition=2, base_sequence=40,
                        producer_id=7, retries=3)


def test_kept_batches_give_back_only_the_unended_messages_fresh_for_a_new_pipeline():
    ledger = Ledger()
    kept = KeptBatches()
    first = sent(ledger, "t", [b"a", b"b", b"c"])
    second = sent(ledger, "u", [b"d"])
    kept.keep([first, second], ledger)
    ledger.settle([Outcome([0, 2], "t", 1, 10)])
    again = kept.unresolved(ledger)
    assert [(b.topic, list(b.ids), list(b.values)) for b in again] == [("t", [1], [b"b"]), ("u", [3], [b"d"])]
    assert all((b.partition, b.base_sequence, b.producer_id, b.retries) == (-1, -1, -1, 0) for b in again)
    ledger.settle([Outcome([1, 3], "t", 1, 12)])
    kept.prune(ledger)
    assert len(kept) == 0


def test_a_send_batch_is_kept_by_its_records_that_have_not_ended():
    ledger = Ledger()
    state = ledger.add_batch(4, Future(), 40)
    batch = MessageBatch(topic="t", ids=range(state.start, state.start + 4), values=[b"w", b"x", b"y", b"z"])
    kept = KeptBatches()
    kept.keep([batch], ledger)
    ledger.settle([Outcome(range(1, 3), "t", 0, 5)])
    assert [list(b.values) for b in kept.unresolved(ledger)] == [[b"w", b"z"]]


def test_the_logs_records_end_the_earliest_alike_messages_and_the_rest_go_again():
    ledger = Ledger()
    batch = sent(ledger, "t", [b"x", b"y", b"x", b"z"], keys=[b"k", b"k", b"k", b"k"], stamps=[5, 5, 6, 7])
    written = {("t", 0): [WrittenRecord(100, 5, b"k", b"x"), WrittenRecord(101, 5, b"k", b"y"),
                          WrittenRecord(102, 6, b"k", b"x")],
               ("t", 1): [WrittenRecord(9, 5, b"other", b"x")]}  # not one of ours: a different key
    found = written_outcomes([batch], written)
    assert sorted((o.ids[0], o.partition, o.first_offset) for o in found) == [(0, 0, 100), (1, 0, 101), (2, 0, 102)]


def test_a_record_stamped_at_log_append_still_ends_its_message_the_timestamp_only_chooses():
    ledger = Ledger()
    batch = sent(ledger, "t", [b"x", b"x"], stamps=[5, 6])
    found = written_outcomes([batch], {("t", 3): [WrittenRecord(50, 6, None, b"x"),
                                                  WrittenRecord(51, 99_999, None, b"x")]})
    assert [(o.ids[0], o.first_offset) for o in found] == [(1, 50), (0, 51)]


def test_acked_ends_keep_the_furthest_acknowledged_offset_of_each_partition():
    ends: dict = {}
    acked_ends(ends, [Outcome(range(0, 3), "t", 0, 10), Outcome(range(3, 4), "t", 0, 5),
                      Outcome.failed([5], RuntimeError("x"), "t", 1), Outcome(range(6, 8), "t", 1, -1)])
    assert ends == {("t", 0): 13}
