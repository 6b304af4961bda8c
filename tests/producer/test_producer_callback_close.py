"""`close()` and `flush()` called from a delivery callback (`on_delivery`, or a done-callback of a
message's future), on the thread that delivers the reports, which they would wait for. As Java
does: `close()` there is `close(0)` (nothing more delivered, what is unresolved ends saying so,
every actor stopped, and it returns), and `flush()` there raises `FlushInCallbackError`; from any
other thread, even while a callback runs, both behave as ever. On tansu, with Ray."""

from __future__ import annotations

import threading

import pytest

from raykafka.driver.admin import Admin
from raykafka.driver.producer import Producer
from raykafka.wire.errors import FlushInCallbackError, ProducerClosedError

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(300)]

RETURNS_WITHIN = 30.0  # s a call from the callback is given before the test calls it stuck


def _topic(bootstrap: str, topic_name) -> str:
    topic = topic_name("callback")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 1})
    return topic


def test_close_from_a_callback_is_close_0_and_returns(ray_session, bootstrap, topic_name, live_actors):
    """The first delivery's callback sends 100 more messages, then closes the producer: close
    returns, the 100 end with a ProducerClosedError naming the callback's close, and no actor of
    the producer is left."""
    topic = _topic(bootstrap, topic_name)
    later: list = []
    returned = threading.Event()

    def on_delivery(meta, error):
        if later:
            return
        later.extend(producer.send(topic, b"later-%d" % i) for i in range(100))
        producer.close()
        returned.set()

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000}, on_delivery=on_delivery)
    try:
        assert producer.send(topic, b"first").result(30).offset >= 0
        assert returned.wait(RETURNS_WITHIN), "close() from on_delivery never returned"
        errors = [f.exception(10) for f in later]
        assert all(isinstance(e, ProducerClosedError) for e in errors), errors[:3]
        assert "closed by a delivery callback" in str(errors[0])
        assert live_actors(producer.name) == []
        with pytest.raises(ProducerClosedError):
            producer.send(topic, b"after")
    finally:
        producer.close(10)


def test_flush_from_a_callback_raises_and_other_threads_still_flush(ray_session, bootstrap, topic_name):
    """flush() in the callback raises FlushInCallbackError at once; meanwhile, with that callback
    still running, flush() from the test's own thread is not refused (it waits, as ever, here
    for its timeout); once the callback returns, flush and close work."""
    topic = _topic(bootstrap, topic_name)
    outcomes: list = []
    called, release = threading.Event(), threading.Event()

    def on_delivery(meta, error):
        if outcomes:
            return
        try:
            outcomes.append(producer.flush())
        except Exception as exc:  # noqa: BLE001 - what flush raised is the outcome under test
            outcomes.append(exc)
        called.set()
        release.wait(RETURNS_WITHIN)

    producer = Producer({"bootstrap.servers": bootstrap}, on_delivery=on_delivery)
    try:
        producer.send(topic, b"first")
        assert called.wait(RETURNS_WITHIN), "flush() from on_delivery never returned"
        (outcome,) = outcomes
        assert isinstance(outcome, FlushInCallbackError), outcome
        assert "on_delivery" in str(outcome)
        assert producer.flush(0.5) >= 0  # the callback still runs: this thread waits, it is not refused
        release.set()
        assert producer.send(topic, b"second") is not None and producer.flush(30) == 0
    finally:
        release.set()
        producer.close(10)


def test_flush_and_close_from_a_futures_done_callback_act_as_from_on_delivery(ray_session, bootstrap, topic_name,
                                                                              live_actors):
    """A future's done-callback runs on the thread that sets it, as on_delivery does: there
    flush() raises FlushInCallbackError and close() is close(0), returning; no actor is left."""
    topic = _topic(bootstrap, topic_name)
    raised: list = []
    returned = threading.Event()

    def done(_future):
        try:
            producer.flush()
        except Exception as exc:  # noqa: BLE001 - what flush raised is the outcome under test
            raised.append(exc)
        producer.close()
        returned.set()

    # lingering, so that the future is still pending when its callback is added
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 500})
    try:
        producer.send(topic, b"first").add_done_callback(done)
        assert returned.wait(RETURNS_WITHIN), "close() from a done-callback never returned"
        assert [type(e) for e in raised] == [FlushInCallbackError]
        assert live_actors(producer.name) == []
    finally:
        producer.close(10)
