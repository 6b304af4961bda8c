"""The driver's side of a transactional producer without Ray: which sends it takes, which failure
it keeps for the commit, and the offsets `send_offsets_to_transaction` accepts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raykafka.actors.producer_results import Outcome
from raykafka.driver.producer_transactions import ProducerTransactions, group_offsets
from raykafka.wire.admin import TopicPartition
from raykafka.wire.config import parse_config
from raykafka.wire.errors import TransactionStateError, UnknownTopicError
from raykafka.wire.transactions import GroupOffset


def transactions() -> ProducerTransactions:
    config = parse_config({"bootstrap.servers": "h:1", "transactional.id": "orders-1"})
    return ProducerTransactions(config, owner=None, topic_dispatcher=None, flush=lambda timeout: 0)


def test_sends_are_taken_only_between_begin_and_the_end_of_the_transaction():
    txn = transactions()
    with pytest.raises(TransactionStateError, match="'orders-1'.*begin_transaction"):
        txn.check_send()
    txn._taking_sends = txn._in_transaction = True  # what begin_transaction sets once the owner agreed
    txn.check_send()
    txn._end_sends("commit_transaction", deadline=0)
    with pytest.raises(TransactionStateError):
        txn.check_send()


def test_the_first_failure_of_the_open_transaction_is_kept_for_the_commit():
    txn = transactions()
    first, second = UnknownTopicError("no topic a"), UnknownTopicError("no topic b")
    txn.note_outcomes([Outcome.failed([1], first)])
    assert txn._failure is None  # no transaction open: nothing to keep
    txn._in_transaction = True
    txn.note_outcomes([SimpleNamespace(error=None), Outcome.failed([2], first)])
    txn.note_outcomes([Outcome.failed([3], second)])
    assert txn._failure is first
    txn._ended()
    assert txn._failure is None and not txn._in_transaction


def test_offsets_are_taken_as_a_mapping_or_as_confluent_topic_partitions():
    assert group_offsets({("in", 0): 10, ("in", 1): GroupOffset(20, "m")}) == {
        TopicPartition("in", 0): GroupOffset(10), TopicPartition("in", 1): GroupOffset(20, "m")}
    confluent_like = [SimpleNamespace(topic="in", partition=2, offset=30, metadata=None)]
    assert group_offsets(confluent_like) == {TopicPartition("in", 2): GroupOffset(30)}
    for bad in ({("in", "0"): 1}, {("in", 0): -1}, {("in", 0): True}, {}):
        with pytest.raises(TypeError, match="^offsets"):
            group_offsets(bad)
