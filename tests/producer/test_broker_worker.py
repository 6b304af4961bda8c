"""The BrokerWorker (actors/broker_worker.py) without Ray: `CallerOrder` takes each caller's
calls in the order it numbered them; a worker built without Ray, against the mock cluster,
writes a partition's batches in the caller's order even when its calls start out of order (Ray
does not promise an async actor starts one caller's calls in order), feeds the compression
ratios its Flusher measures to its `AggregatorState` without a Ray call, takes a second
broker whose `host` call runs after the first `add` for it, and, while its broker is slower than
the messages come, gathers them into larger batches rather than queueing a small one a request."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from raykafka.actors.batch import MessageBatch
from raykafka.actors.broker_worker import BrokerWorker
from raykafka.actors.caller_order import CallerOrder
from raykafka.mock import MockCluster
from raykafka.wire import messages
from raykafka.wire.config import parse_config

from ..reference import measured

pytestmark = pytest.mark.timeout(60)


class Calls:
    """Stands in for an actor handle: `handle.method.remote(*args)` is recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, method: str) -> SimpleNamespace:
        return SimpleNamespace(remote=lambda *args: self.calls.append((method, args)))


def batch(partition: int, *values: bytes) -> MessageBatch:
    return measured(MessageBatch(topic="t", partition=partition, ids=list(range(len(values))), values=list(values)))


async def stop(worker: BrokerWorker) -> None:
    """The worker's brokers stopped where they stand: their timers and Flushers, their connections closed."""
    for broker in worker.brokers.values():
        broker.timer.cancel()
        for task in broker.flusher.tasks:
            task.cancel()
        await broker.flusher.conn.close()


def test_a_callers_calls_are_taken_in_its_order_whatever_order_they_come_in():
    order = CallerOrder()
    assert order.take("a", 1, "a1") == []  # early: held for a0
    assert order.take("b", 0, "b0") == ["b0"]  # another caller is not held by it
    assert order.waiting() == 1
    assert order.take("a", 2, "a2") == []
    assert order.take("a", 0, "a0") == ["a0", "a1", "a2"]
    assert order.take("a", 3, "a3") == ["a3"]
    assert order.waiting() == 0


def test_calls_that_start_out_of_order_reach_the_broker_in_the_callers_order():
    with MockCluster(n_brokers=2, topics={"t": 2}) as cluster:  # partition p is led by broker p + 1
        config = parse_config({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": False,
                               "linger.ms": 0, "compression.type": "lz4"})
        ctx = SimpleNamespace(config=config, retry_handler=Calls(), prefix="p/", transactions=None,
                              window=8)

        async def scenario() -> BrokerWorker:
            worker = BrokerWorker(ctx, 7, 1, "127.0.0.1", cluster.brokers[1].port)  # broker 1, generation 7
            try:
                later = asyncio.ensure_future(worker.add(7, "ld", 1, [batch(0, b"c" * 200, b"d" * 200)]))
                await asyncio.sleep(0.05)  # the second call started first: it waits for the first
                assert cluster.records("t", 0) == [] and worker.orders[7].waiting() == 1
                await worker.add(7, "ld", 0, [batch(0, b"a" * 200, b"b" * 200)])
                await later
                # broker 2 placed here as generation 8: its first add runs before its `host`
                second = asyncio.ensure_future(worker.add(8, "ld2", 0, [batch(1, b"x" * 200)]))
                await asyncio.sleep(0.05)
                assert not second.done() and 8 in worker.hosting
                await worker.host(8, 2, "127.0.0.1", cluster.brokers[2].port)
                await second
                deadline = time.monotonic() + 10
                while len(cluster.records("t", 0)) < 4 or len(cluster.records("t", 1)) < 1:
                    assert time.monotonic() < deadline, "the batches reached the mock"
                    await asyncio.sleep(0.01)
            finally:
                await stop(worker)
            return worker

        worker = asyncio.run(asyncio.wait_for(scenario(), 30))
        assert [r.value for r in cluster.records("t", 0)] == [b"a" * 200, b"b" * 200, b"c" * 200, b"d" * 200]
        assert [r.value for r in cluster.records("t", 1)] == [b"x" * 200]
    state = worker.brokers[7].state
    assert "t" in state.ratios, "the Flusher's measured ratio reached the AggregatorState"
    assert state.ratios["t"] < 0.5  # 200 repeated bytes compress well
    assert sorted(broker.node_id for broker in worker.brokers.values()) == [1, 2]


@pytest.mark.parametrize("exit_call_first", [True, False], ids=["exit-call-first", "close-call-first"])
def test_at_close_a_worker_exits_only_once_every_broker_placed_on_it_has_closed(monkeypatch, exit_call_first):
    """A retry let broker generation 7 go (`close(7, last=False)`), and the producer's close tells
    the worker, then hosting none, to exit (`close(None, last=True)`): whichever call Ray starts
    first, the worker exits after generation 7 has closed, not while it still flushes."""
    import ray

    events: list[str] = []
    monkeypatch.setattr(ray.actor, "exit_actor", lambda: events.append("exit"))
    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        config = parse_config({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
        ctx = SimpleNamespace(config=config, retry_handler=Calls(), prefix="p/", transactions=None, window=8,
                              timeout=5.0)

        async def scenario() -> None:
            worker = BrokerWorker(ctx, 7, 1, "127.0.0.1", cluster.brokers[1].port)
            await worker.host(8, 1, "127.0.0.1", cluster.brokers[1].port)  # placed again, on the same process
            await worker.close(8, last=False)
            broker, release = worker.brokers[7], asyncio.Event()
            closing = broker.close

            async def slow_close() -> None:  # still flushing when the exit call comes
                await release.wait()
                await closing()
                events.append("closed 7")

            broker.close = slow_close
            calls = [lambda: worker.close(7, last=False), lambda: worker.close(None, last=True)]
            tasks = [asyncio.ensure_future(call()) for call in (calls[::-1] if exit_call_first else calls)]
            await asyncio.sleep(0.2)
            assert events == [] and 7 in worker.brokers
            release.set()
            polled = asyncio.ensure_future(worker.poll(5.0))  # the driver takes the closed mailbox
            await asyncio.gather(*tasks, polled)
            assert polled.result().closed and worker.brokers == {} and worker.orders == {}

        asyncio.run(asyncio.wait_for(scenario(), 30))
    assert events == ["closed 7", "exit"]


def test_while_the_broker_is_slower_than_the_messages_come_they_gather_into_larger_batches():
    """One request in flight, each answered after 0.4 s, and a message every 10 ms for 0.8 s
    (linger.ms=5): what lingers while the Flusher cannot put a request on the wire stays in the
    worker and goes as one batch once it can (as the Java producer drains a partition only when a
    request can go). Handed on every linger, it had queued behind as a request of ~5 records per
    50 ms, falling further behind with every request."""
    n = 80
    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        config = parse_config({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": False,
                               "linger.ms": 5, "max.in.flight.requests.per.connection": 1})
        ctx = SimpleNamespace(config=config, retry_handler=Calls(), prefix="p/", transactions=None, window=8)
        cluster.delay(messages.PRODUCE, 0.4)

        async def scenario() -> None:
            worker = BrokerWorker(ctx, 7, 1, "127.0.0.1", cluster.brokers[1].port)
            try:
                for i in range(n):
                    await worker.add(7, "ld", i, [batch(0, b"m%03d" % i)])
                    await asyncio.sleep(0.01)
                deadline = time.monotonic() + 20
                while len(cluster.records("t", 0)) < n:
                    assert time.monotonic() < deadline, "every message reached the mock"
                    await asyncio.sleep(0.02)
            finally:
                await stop(worker)

        asyncio.run(asyncio.wait_for(scenario(), 40))
        requests = cluster.faults["delay/Produce"]
        assert [r.value for r in cluster.records("t", 0)] == [b"m%03d" % i for i in range(n)]
    # 0.8 s of messages at 0.4 s a request: a handful of requests, not one per linger (~16)
    assert requests <= 8, requests
