"""A caller's futures cannot stop the producer: a cancelled future (as `asyncio.wait_for` leaves
one when it times out), an `on_delivery` callback or a done-callback that raises, a
`successes()` queue nobody reads. The message still goes, its outcome still reaches
`on_delivery`, every other future resolves, and flush and close end. On tansu."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import CancelledError, Future

import pytest

from raykafka.driver import message_futures
from raykafka.driver.admin import Admin
from raykafka.driver.message_futures import MessageFuture, set_future, settle_futures
from raykafka.driver.producer import Producer

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(300)]


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topics({name: partitions})


def test_a_send_future_cancelled_by_asyncio_wait_for_does_not_stop_the_producer(
        ray_session, bootstrap, topic_name):
    """`asyncio.wait_for(asyncio.wrap_future(send(...)), 0.2)` times out while the message
    lingers (linger.ms=1500) and cancels its future. The message is delivered all the same
    (on_delivery says where), later sends resolve, and flush and close end at once."""
    topic = topic_name("cancel")
    create_topic(bootstrap, topic)
    told: list[tuple] = []
    delivered = threading.Event()

    def on_delivery(meta, error) -> None:
        told.append((meta, error))
        if len(told) == 3:
            delivered.set()

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1500}, on_delivery=on_delivery)
    try:
        assert producer.send(topic, b"warm-up").result(60).offset == 0  # the pipeline is up

        async def impatient() -> Future:
            future = producer.send(topic, b"cancelled")
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.wrap_future(future), 0.2)
            return future

        cancelled = asyncio.run(impatient())
        assert cancelled.cancelled()
        later = producer.send(topic, b"later")
        start = time.monotonic()
        assert producer.flush(30) == 0
        flushed_in = time.monotonic() - start
        assert later.result(0).offset == 2
        assert delivered.wait(5), told
        assert sorted(m.offset for m, e in told if e is None) == [0, 1, 2]  # the cancelled one went too
        assert flushed_in < 20, f"flush took {flushed_in:.1f}s"
        assert producer.send(topic, b"again").result(30).offset == 3
        with pytest.raises(CancelledError):
            cancelled.result(0)
    finally:
        start = time.monotonic()
        producer.close(30)
    assert time.monotonic() - start < 25


def test_a_cancelled_send_batch_future_does_not_stop_the_producer(ray_session, bootstrap, topic_name):
    topic = topic_name("cancelbatch")
    create_topic(bootstrap, topic)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 200}) as producer:
        batch = producer.send_batch(topic, [b"a", b"b", b"c"])
        assert batch.cancel()  # still lingering: cancellable
        after = producer.send_batch(topic, [b"d", b"e"])
        single = producer.send(topic, b"f")
        assert producer.flush(30) == 0
        assert after.result(0).delivered == 2 and single.result(0).offset == 5  # a, b, c were written
        assert producer.send(topic, b"g").result(30).offset == 6


def test_raising_callbacks_and_an_unread_successes_queue_do_not_stop_the_results_thread(
        ray_session, bootstrap, topic_name):
    """`on_delivery` raising (even SystemExit), a done-callback on a future raising SystemExit,
    and `successes()` never read: every message still resolves and close ends."""
    topic = topic_name("callbacks")
    create_topic(bootstrap, topic, 2)
    calls = []

    def on_delivery(meta, error) -> None:
        calls.append(meta)
        if len(calls) % 2:
            raise SystemExit("a callback that exits")
        raise RuntimeError("a callback bug")

    def exits(future: Future) -> None:
        raise SystemExit("a done-callback that exits")

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 200}, on_delivery=on_delivery,
                        return_successes=True)
    try:
        first = producer.send(topic, b"first")
        first.add_done_callback(exits)  # lingering: the callback runs in the results thread
        assert first.result(30).offset >= 0
        futures = [producer.send(topic, b"m%d" % i) for i in range(20_000)]
        assert producer.flush(60) == 0
        assert all(f.result(0).offset >= 0 for f in futures)
        assert len(calls) == 20_001
        assert producer._poller.is_alive()  # the results thread lives on
    finally:
        start = time.monotonic()
        producer.close(30)
    assert time.monotonic() - start < 25
    assert len(list(producer.successes(timeout=0))) == 20_001  # kept, not lost, for a late reader


def test_message_futures_are_plain_futures_where_their_fields_differ(monkeypatch):
    """Where concurrent.futures keeps other private fields than those `MessageFuture` sets,
    message futures are ordinary Futures, set the ordinary way; a cancelled one stays cancelled."""
    monkeypatch.setattr(message_futures, "SHARED_CONDITION", False)
    shared = threading.Condition()
    future = MessageFuture(shared)
    assert future._condition is not shared
    threading.Timer(0.05, lambda: set_future(future, 7, None)).start()
    assert future.result(5) == 7
    cancelled = MessageFuture(shared)
    assert cancelled.cancel()
    set_future(cancelled, 8, None)  # skipped, not raised
    assert cancelled.cancelled()


def test_settling_skips_a_cancelled_message_future():
    shared = threading.Condition()
    kept, cancelled = MessageFuture(shared), MessageFuture(shared)
    assert cancelled.cancel()
    slow = settle_futures(shared, [(kept, 1, None), (cancelled, 2, None)])
    assert [item[0] for item in slow] == [cancelled]
    for future, meta, error in slow:
        set_future(future, meta, error)
    assert kept.result(0) == 1 and cancelled.cancelled()
