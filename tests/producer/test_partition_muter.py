"""One batch in flight per partition: the Flusher's `PartitionMuter`, without Ray.

First the type alone (mute, hold, chaser, SYN); then a Flusher (a BrokerWorker's part that owns
the connection), built without Ray, against one
broker of the mock cluster: a batch waiting for the wire while the batch before it fails is
retried behind it, never sent ahead of its retry.
"""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest

from raykafka.actors.batch import MessageBatch, ProduceSet
from raykafka.actors.flusher import Flusher, PartitionMuter
from raykafka.actors.producer_results import Mailbox
from raykafka.mock import MockCluster
from raykafka.wire import messages
from raykafka.wire.config import parse_config
from raykafka.wire.errors import BY_NAME, BrokerConnectionError, BrokerError

from ..reference import Calls, measured

pytestmark = pytest.mark.timeout(60)

REQUEST_TIMED_OUT = BY_NAME["REQUEST_TIMED_OUT"].code
MESSAGE_TOO_LARGE = BY_NAME["MESSAGE_TOO_LARGE"].code


def batch(partition: int, *values: bytes, topic: str = "t") -> MessageBatch:
    return measured(MessageBatch(topic=topic, partition=partition, ids=list(range(len(values))), values=list(values)))


def test_a_failure_mutes_its_partition_only_and_hold_picks_its_batches_with_the_cause():
    muter = PartitionMuter()
    a0, b0, a1 = batch(0, b"a"), batch(0, b"b"), batch(1, b"c")
    assert muter.hold([a0, a1]) == []
    cause = BrokerError(REQUEST_TIMED_OUT, "t/0")
    muter.mute(("t", 0), cause, 3)
    assert ("t", 0) in muter and ("t", 1) not in muter and ("u", 0) not in muter
    assert muter.hold([a1, b0]) == [(b0, cause, True)]
    later = BrokerConnectionError("dropped")
    muter.mute(("t", 0), later, 5)  # a later failure: the newest cause, the newest request
    assert muter.hold([a0]) == [(a0, later, True)]


def test_a_chaser_unmutes_only_after_the_request_that_muted_and_a_syn_opens_at_once():
    muter = PartitionMuter()
    muter.mute(("t", 0), BrokerError(REQUEST_TIMED_OUT), 4)
    muter.chased(("t", 0), 4)  # a chaser queued before request 4 was answered: still muted
    assert ("t", 0) in muter
    muter.chased(("t", 0), 5)  # it came through after request 4: the partition is open again
    assert ("t", 0) not in muter
    muter.chased(("t", 0), 9)  # a late chaser changes nothing
    muter.mute(("t", 1), BrokerError(REQUEST_TIMED_OUT), 7)
    muter.open(("t", 1))  # SYN: the LeaderDispatcher chose this broker anew
    assert muter.hold([batch(1, b"x")]) == []


def test_a_batch_waiting_for_the_wire_when_the_one_before_fails_is_retried_after_it_not_sent():
    """Idempotence off, one request in flight: batch 1 of t/0 is on the wire, batch 2 of t/0
    waits for the connection. Batch 1 fails without being written (REQUEST_TIMED_OUT). Batch 2
    must not go on the wire then: the broker is still the leader and would write it before
    batch 1's retry. Both come back to the retry loop, batch 1 first."""
    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        answer_first = threading.Event()
        default = cluster.default_handlers[messages.PRODUCE.key]
        produced = []

        async def produce(version, body, broker):
            produced.append([p.records for t in body.topic_data for p in t.partition_data])
            if len(produced) == 1:  # the first request: answered only when the test says so
                await asyncio.to_thread(answer_first.wait, 10)
                cluster.fail_next(messages.PRODUCE, REQUEST_TIMED_OUT, 1, topic="t", partition=0)
            return default(version, body, broker)

        cluster.set_handler(messages.PRODUCE, produce)
        config = parse_config({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": False,
                               "max.in.flight.requests.per.connection": 1})
        retry_handler, results = Calls(), Mailbox()
        ctx = SimpleNamespace(config=config, retry_handler=retry_handler, prefix="p/", transactions=None)
        first, second = batch(0, b"a", b"b"), batch(0, b"c", b"d")

        async def scenario() -> None:
            flusher = Flusher(ctx, 1, "127.0.0.1", cluster.brokers[1].port, mailbox=results)
            try:
                await flusher.submit([ProduceSet([first])])  # on the wire
                sending = flusher.submit([ProduceSet([second])])
                await until(lambda: not flusher.inbox)  # the sender took it: it waits for the slot
                answer_first.set()
                await sending
                await until(lambda: len(retry_handler.batches("retry")) + len(results.entries) == 2)
            finally:
                for task in flusher.tasks:
                    task.cancel()
                await flusher.conn.close()

        asyncio.run(asyncio.wait_for(scenario(), 30))
    assert cluster.records("t", 0) == [], "nothing written: the second batch never went on the wire"
    assert len(produced) == 1
    assert [(b.values, b.retries) for b in retry_handler.batches("retry")] == [([b"a", b"b"], 1), ([b"c", b"d"], 1)]
    assert results.entries == []


async def until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def test_a_cut_holds_its_partition_uncounted_unless_a_failure_came_first():
    """A batch refused as too large is cut, not failed: what its partition holds meanwhile goes
    round uncounted, as the halves do; a cut behind a failure keeps the failure's cause, counted."""
    muter = PartitionMuter()
    a0, b0 = batch(0, b"a"), batch(1, b"b")
    too_large = BrokerError(MESSAGE_TOO_LARGE, "t/0")
    muter.mute(("t", 0), too_large, 2, counted=False)
    assert muter.hold([a0]) == [(a0, too_large, False)]
    muter.mute(("t", 0), BrokerError(REQUEST_TIMED_OUT, "t/0"), 3)  # a failure after the cut counts
    assert muter.hold([a0])[0].counted
    timed_out = BrokerError(REQUEST_TIMED_OUT, "t/1")
    muter.mute(("t", 1), timed_out, 4)
    muter.mute(("t", 1), too_large, 6, counted=False)  # a cut behind the failure
    assert muter.hold([b0]) == [(b0, timed_out, True)]
    muter.chased(("t", 1), 5)  # the cut's request is the newest: a chaser before it leaves it muted
    assert ("t", 1) in muter

