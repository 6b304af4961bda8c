"""Transactions through the producer pipeline on tansu: `init_transactions`, `begin_transaction`,
`commit_transaction`, `abort_transaction`, `send_offsets_to_transaction`; a send outside a
transaction refused at once; a zombie fenced by a second producer with the same transactional.id.

Read back two ways (helpers of test_transactions_wire.py): our read_committed Fetch deciding by
the markers, which must hold exactly the committed records and leave no transactional batch
below the last stable offset without its marker; and a read_committed confluent-kafka consumer,
which reads every committed record, plus the aborted ones exactly while tansu lists no aborted
transactions in its Fetch responses (tansu 0.6.0 lists none and serves them).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from raykafka.driver.admin import Admin
from raykafka.driver.producer import Producer
from raykafka.wire.admin import TopicPartition
from raykafka.wire.cluster import Cluster
from raykafka.wire.config import parse_config
from raykafka.wire.errors import (
    ConfigError,
    MessageTooLargeError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionStateError,
    UnknownTopicError,
)

from ..tiers import default_keeps
from .test_transactions_wire import (
    PARTITIONS,
    check_confluent_read,
    read_committed_confluent,
    read_committed_ours,
)

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(300)]

SEND_TIMEOUT = 60  # s: generous bound on one transaction's messages on a shared 2-core machine


def transactional(bootstrap: str, tid: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 2, **extra})


def read_ours(bootstrap: str, topic: str) -> tuple[list[bytes], bool]:
    async def read() -> tuple[list[bytes], bool]:
        cluster = Cluster(parse_config({"bootstrap.servers": bootstrap}))
        try:
            return await read_committed_ours(cluster, topic)
        finally:
            await cluster.close()

    return asyncio.run(read())


def test_commit_abort_commit_reads_back_exactly_the_committed_messages(ray_session, bootstrap, topic_name):
    topic, source = topic_name("txn-out"), topic_name("txn-in")
    group = f"g-{topic}"
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: PARTITIONS, source: PARTITIONS})
    rows = {name: [f"{name}-{i}".encode() for i in range(200)] for name in ("first", "aborted", "second")}
    outcomes = {}
    with transactional(bootstrap, f"tx-{topic}") as producer:
        producer.init_transactions()
        assert producer.producer_id >= 0 and producer.producer_epoch >= 0
        for name, commit, offset in (("first", True, 10), ("aborted", False, 99), ("second", True, 20)):
            producer.begin_transaction()
            half = len(rows[name]) // 2
            singles = [producer.send(topic, v, key=v) for v in rows[name][:half]]  # keys spread the partitions
            batch = producer.send_batch(topic, rows[name][half:], keys=rows[name][half:])
            producer.send_offsets_to_transaction({(source, 0): offset}, group)
            if commit:
                producer.commit_transaction(SEND_TIMEOUT)
            else:
                producer.abort_transaction(SEND_TIMEOUT)
            # every message ended once, before the transaction did: delivered with its offset
            outcomes[name] = ([f.result(0) for f in singles], batch.result(0))
    for name, (metas, result) in outcomes.items():
        assert all(m.offset >= 0 for m in metas), name
        assert result.failed == 0 and (result.offsets >= 0).all(), (name, result.errors[:3])
    assert {m.partition for m in outcomes["first"][0]} == set(range(PARTITIONS))  # both were added

    committed = rows["first"] + rows["second"]
    ours, listed = read_ours(bootstrap, topic)  # also: every transactional batch has its marker
    assert sorted(ours) == sorted(committed)
    check_confluent_read(bootstrap, topic, committed, rows["aborted"], listed)
    with Admin(bootstrap) as admin:  # the aborted transaction's offsets are not kept
        assert admin.committed_offsets(group) == {TopicPartition(source, 0): 20}


def test_an_open_transaction_is_read_once_it_commits(ray_session, bootstrap, topic_name):
    """Its messages acknowledged, a transaction still open is not read (read_committed stops at
    the last stable offset); once it commits, it is."""
    topic = topic_name("txn-open")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: PARTITIONS})
    rows = [b"open-%d" % i for i in range(50)]
    with transactional(bootstrap, f"tx-{topic}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        assert producer.send_batch(topic, rows, keys=rows).result(SEND_TIMEOUT).failed == 0
        while_open, _ = read_ours(bootstrap, topic)
        confluent_while_open = read_committed_confluent(bootstrap, topic)
        producer.commit_transaction(SEND_TIMEOUT)
    assert while_open == [] and confluent_while_open == []
    after, _ = read_ours(bootstrap, topic)
    assert sorted(after) == sorted(rows) == sorted(read_committed_confluent(bootstrap, topic))


def test_a_send_outside_a_transaction_is_refused_at_once(ray_session, bootstrap, topic_name):
    topic = topic_name("txn-outside")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: PARTITIONS})
    with transactional(bootstrap, f"tx-{topic}") as producer:
        for when in ("before init_transactions", "before begin_transaction", "after commit_transaction"):
            with pytest.raises(TransactionStateError, match="begin_transaction"):
                producer.send(topic, b"outside")
            with pytest.raises(TransactionStateError, match="begin_transaction"):
                producer.send_batch(topic, [b"outside"])
            assert producer.pending() == 0, when
            if when == "before init_transactions":
                with pytest.raises(TransactionStateError):  # begin before init: the owner refuses
                    producer.begin_transaction()
                producer.init_transactions()
            elif when == "before begin_transaction":
                producer.begin_transaction()
                producer.send(topic, b"inside").result(SEND_TIMEOUT)
                producer.commit_transaction(SEND_TIMEOUT)
    ours, _ = read_ours(bootstrap, topic)
    assert ours == [b"inside"]
    with Producer({"bootstrap.servers": bootstrap}) as plain, pytest.raises(TransactionStateError):
        plain.begin_transaction()


@pytest.mark.parametrize("cause", [UnknownTopicError, MessageTooLargeError])
def test_a_failed_message_makes_the_transaction_abortable_and_the_next_one_commits(ray_session, bootstrap,
                                                                                     topic_name, cause):
    """A message failed in the pipeline (its topic does not exist) or refused where it was given
    (larger than max.request.size): the transaction cannot commit, as in Java."""
    topic = topic_name("txn-abortable")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: PARTITIONS})
    with transactional(bootstrap, f"tx-{topic}", **{"max.request.size": 10_000}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        kept = producer.send(topic, b"in-the-failed-transaction")
        if cause is UnknownTopicError:
            lost = producer.send(f"no-such-topic-{uuid.uuid4().hex[:8]}", b"x")
        else:
            lost = producer.send_batch(topic, [b"fits", b"x" * 20_000])
        with pytest.raises(TransactionAbortableError, match=cause.__name__):
            producer.commit_transaction(SEND_TIMEOUT)
        failed = lost.exception(0) if cause is UnknownTopicError else lost.result(0).errors[1]
        assert isinstance(failed, cause)
        assert kept.result(0).offset >= 0  # written, and aborted below
        with pytest.raises(TransactionAbortableError):  # the caller must abort, not commit
            producer.commit_transaction(SEND_TIMEOUT)
        producer.abort_transaction(SEND_TIMEOUT)
        # a message failed in the pipeline may leave a gap in its partition's sequence: the abort
        # renews the epoch (a new pipeline); one refused where it was given was never numbered
        assert producer.healed == (1 if cause is UnknownTopicError else 0)
        producer.begin_transaction()
        producer.send(topic, b"next").result(SEND_TIMEOUT)
        producer.commit_transaction(SEND_TIMEOUT)
    ours, _ = read_ours(bootstrap, topic)
    assert ours == [b"next"]


@pytest.mark.parametrize(("later_partition", "refused_by"),
                         default_keeps([(0, "produce to"), (1, "AddPartitionsToTxn")], kept=[(0, "produce to")]),
                         ids=["produce-fenced", "add-partitions-fenced"])
def test_a_second_producer_with_the_same_transactional_id_fences_the_first(ray_session, bootstrap, topic_name,
                                                                            later_partition, refused_by):
    """The zombie's later message fails fenced: by its Produce to a partition already in its
    transaction, or by the AddPartitionsToTxn its Flusher asks for first; its commit and every
    later call raise `ProducerFencedError`."""
    topic = topic_name("txn-fenced")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: PARTITIONS})
    tid = f"tx-{topic}"
    zombie = transactional(bootstrap, tid, **{"max.block.ms": 10_000})
    fresh = transactional(bootstrap, tid)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        first = zombie.send(topic, b"zombie-before", partition=0).result(SEND_TIMEOUT)
        fresh.init_transactions()  # fences the zombie and aborts its open transaction
        assert fresh.producer_epoch != zombie.producer_epoch or fresh.producer_id != zombie.producer_id
        later = zombie.send(topic, b"zombie-after", partition=later_partition)
        with pytest.raises(ProducerFencedError, match=refused_by):
            later.result(SEND_TIMEOUT)  # the message ends, failed, naming the fencing
        with pytest.raises(ProducerFencedError):
            zombie.commit_transaction(SEND_TIMEOUT)
        with pytest.raises(ProducerFencedError):  # fatal: every later call says so
            zombie.begin_transaction()
        fresh.begin_transaction()
        fresh.send(topic, b"fresh", partition=1).result(SEND_TIMEOUT)
        fresh.commit_transaction(SEND_TIMEOUT)
    finally:
        zombie.close()
        fresh.close()
    assert first.offset >= 0
    ours, listed = read_ours(bootstrap, topic)
    assert ours == [b"fresh"]  # the zombie's record, aborted by the second init, is not read
    check_confluent_read(bootstrap, topic, [b"fresh"], [b"zombie-before"], listed)


@pytest.mark.parametrize(("given", "named"), [
    ({"transactional.id": 7}, "transactional.id: expected a non-empty string"),
    ({"transactional.id": "t", "acks": 1}, "acks: transactional.id makes the producer transactional"),
    ({"transactional.id": "t", "transaction.timeout.ms": "soon"}, "transaction.timeout.ms: expected an integer"),
])
def test_a_wrong_transactional_config_is_refused_before_any_actor_starts(bootstrap, given, named):
    with pytest.raises(ConfigError, match=f"^{named}"):
        Producer({"bootstrap.servers": bootstrap, **given})
