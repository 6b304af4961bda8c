"""A transactional producer on a bad day, on tansu: an actor of its pipeline killed in the middle
of a transaction (the transaction owner itself, a broker worker, a leader dispatcher). The transaction
cannot commit (`TransactionAbortableError`, in bounded time); `abort_transaction` replaces the
pipeline and initializes the transactional.id again, and the next transaction commits. A
read_committed read holds exactly the committed transactions' messages."""

from __future__ import annotations

import time

import pytest
import ray

from raykafka.driver.admin import Admin
from raykafka.wire.errors import TransactionAbortableError

from ..tiers import default_keeps
from .test_transactions_producer import SEND_TIMEOUT, read_ours, transactional
from .test_transactions_wire import PARTITIONS

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(300)]


def _send(producer, topic, name, n=300):
    values = [f"{name}-{i}".encode() for i in range(n)]
    futures = [producer.send(topic, v, key=v) for v in values]
    return values, futures


# the default tier keeps the death of the transaction's own actor
@pytest.mark.parametrize("role", default_keeps(["transaction_owner", "broker_worker", "leader_dispatcher"],
                                                kept=["transaction_owner"]))
def test_a_death_mid_transaction_aborts_it_and_the_next_commits_through_a_new_pipeline(
        ray_session, bootstrap, topic_name, live_actors, kill_actor, role):
    topic = topic_name("txn-heal")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: PARTITIONS})
    with transactional(bootstrap, f"tx-{topic}", **{"delivery.timeout.ms": 120_000}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        first, _ = _send(producer, topic, "first")
        producer.commit_transaction(SEND_TIMEOUT)
        first_epoch = producer.producer_epoch

        producer.begin_transaction()
        _send(producer, topic, "doomed")
        assert producer.flush(SEND_TIMEOUT) == 0
        (name,) = [n for n in ray.util.list_named_actors() if n.startswith(f"{producer.name}/{role}")][:1]
        kill_actor(name)
        _, after = _send(producer, topic, "doomed-after")
        t0 = time.monotonic()
        with pytest.raises(TransactionAbortableError):
            producer.commit_transaction(SEND_TIMEOUT)
        assert time.monotonic() - t0 < 30, "the commit knew in bounded time"
        assert all(f.done() for f in after)
        producer.abort_transaction(SEND_TIMEOUT)
        assert producer.healed == 1 and producer.pipeline_prefix == f"{producer.name}~1/"
        assert producer.producer_epoch > first_epoch or producer.producer_id != producer.heals_done[0].producer_ids[0]

        producer.begin_transaction()
        second, futures = _send(producer, topic, "second")
        producer.commit_transaction(SEND_TIMEOUT)
        assert all(f.result(0).offset >= 0 for f in futures)
    ours, _listed = read_ours(bootstrap, topic)
    assert sorted(ours) == sorted(first + second)
    assert live_actors(producer.name) == []
