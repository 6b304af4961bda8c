"""Idempotence's rules (`PartitionSequences`, `EndedSequences`), without Ray."""

from __future__ import annotations

from raykafka.actors.batch import FIN, MessageBatch
from raykafka.actors.idempotence import EndedSequences, PartitionSequences, SequenceSpan
from raykafka.wire.errors import BrokerConnectionError


def batch(n: int) -> MessageBatch:
    return MessageBatch(topic="t", partition=0, ids=list(range(n)), values=[b"v"] * n)


def test_batches_are_numbered_once_in_the_order_they_leave_and_wrap_at_2_31():
    seq = PartitionSequences(7, 0)
    a, b = batch(3), batch(2)
    seq.number(a)
    seq.number(b)
    seq.number(a)  # a retry keeps its numbers
    assert [(x.producer_id, x.base_sequence) for x in (a, b)] == [(7, 0), (7, 3)]
    assert seq.next_sequence == 5
    control = MessageBatch.control("t", 0, FIN)
    seq.number(control)
    assert control.base_sequence < 0
    seq.next_sequence = 0x7FFFFFFF
    c = batch(2)
    seq.number(c)
    assert (c.base_sequence, seq.next_sequence) == (0x7FFFFFFF, 1)
    off = PartitionSequences()
    d = batch(1)
    off.number(d)
    assert d.base_sequence < 0  # without idempotence nothing is numbered


def test_reset_renumbers_only_when_every_batch_before_has_ended():
    seq = PartitionSequences(7, 0)
    for _ in range(3):
        seq.number(batch(2))  # sequences 0, 2, 4
    ids = iter([(8, 0)])
    assert not seq.reset(7, 0, 4, lambda pid, numbering: 2, lambda: next(ids))  # 2 still unresolved
    assert not seq.reset(6, 0, 4, lambda pid, numbering: 4, lambda: next(ids))  # stale producer id
    assert seq.reset(7, 0, 4, lambda pid, numbering: 4, lambda: next(ids))
    assert (seq.producer_id, seq.numbering, seq.next_sequence) == (8, 1, 0)
    again = batch(2)
    again.producer_id, again.numbering, again.base_sequence = 7, 0, 4  # numbered under the old id
    seq.number(again)
    assert (again.producer_id, again.numbering, again.base_sequence) == (8, 1, 0)


def test_reset_keeps_the_id_when_it_cannot_tell_or_cannot_get_a_new_one():
    seq = PartitionSequences(7, 0)

    def cannot_tell(pid: int, numbering: int) -> int:
        raise TimeoutError

    def no_broker() -> tuple[int, int]:
        raise BrokerConnectionError("down")

    assert not seq.reset(7, 0, 0, cannot_tell, lambda: (8, 0))
    assert not seq.reset(7, 0, 0, lambda pid, numbering: 0, no_broker)
    assert (seq.producer_id, seq.numbering) == (7, 0)


def test_ended_sequences_move_the_first_unresolved_past_contiguous_spans():
    ended = EndedSequences()
    assert ended.first_unresolved("t", 0, 7, 0) == 0
    ended.ended(SequenceSpan("t", 0, 7, 0, 2, 2))  # 2-3 ended first
    assert ended.first_unresolved("t", 0, 7, 0) == 0
    ended.ended(SequenceSpan("t", 0, 7, 0, 0, 2))
    assert ended.first_unresolved("t", 0, 7, 0) == 4
    assert ended.first_unresolved("t", 0, 7, 1) == 0  # another numbering
