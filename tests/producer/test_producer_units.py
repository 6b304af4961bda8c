"""Driver-side pieces of the producer, without Ray: futures, serializers, config."""

from __future__ import annotations

import threading
import time

import pytest

from raykafka.driver.producer import _MessageFuture
from raykafka.wire.serde import get_serializer, serialize_many


def test_message_futures_share_a_condition_but_wait_for_their_own_result():
    shared = threading.Condition()
    mine, other = _MessageFuture(shared), _MessageFuture(shared)
    threading.Timer(0.05, lambda: other.set_result(1)).start()  # wakes `mine`'s waiter too
    threading.Timer(0.3, lambda: mine.set_result(2)).start()
    start = time.monotonic()
    assert mine.result(5) == 2 and time.monotonic() - start >= 0.25
    late = _MessageFuture(shared)
    with pytest.raises(TimeoutError):
        late.result(0.1)


def test_serializers_turn_values_into_bytes_and_refuse_what_they_cannot():
    assert get_serializer("json")({"a": 1}) == b'{"a":1}'
    assert get_serializer("str")("é") == "é".encode()
    assert get_serializer("bytes")("text") == b"text"
    assert get_serializer(lambda v: v * 2)(b"ab") == b"abab"
    with pytest.raises(TypeError, match="int"):
        get_serializer("bytes")(5)
    with pytest.raises(TypeError, match=r"values\[1\]"):
        serialize_many(get_serializer("bytes"), [b"a", 5], "values")
    values = [b"a", None]
    assert serialize_many(get_serializer("bytes"), values, "values") is values  # no per-record work
    with pytest.raises(ValueError, match="serializer"):
        get_serializer("yaml")


class _Method:
    def __init__(self, call):
        self.remote = call


class _Dispatcher:
    """Stands in for a dispatcher actor handle: records what it is handed, or fails like a dead actor."""

    def __init__(self, dead: bool = False):
        from concurrent.futures import Future

        self.taken: list = []
        self.route_answer: Future = Future()
        self.dead = dead
        self.dispatch = _Method(self._dispatch)
        self.route = _Method(lambda topic: self)  # the "ref" whose future() is the answer

    def _dispatch(self, batches):
        if self.dead:
            raise RuntimeError("the actor died")
        self.taken.append(batches)
        return None

    def future(self):
        return self.route_answer


def test_topic_routes_hold_a_topic_until_its_route_then_account_for_every_batch(monkeypatch):
    """A topic's first batch goes to the TopicDispatcher and its route is asked for; batches
    meanwhile wait, in order. When the route comes and handing over fails, the held batches come
    back as failed with the cause (none is dropped); when no route can be given, they go to the
    TopicDispatcher."""
    from raykafka.actors import calls
    from raykafka.actors.batch import MessageBatch
    from raykafka.driver.topic_routes import TopicRoutes

    monkeypatch.setattr(calls.CallWindow, "submit", lambda self, ref: None)  # no Ray here
    topic_dispatcher, woken = _Dispatcher(), []
    routes = TopicRoutes(topic_dispatcher, 8, lambda: woken.append(1))
    first, second, third = (MessageBatch(topic="t", ids=[i]) for i in range(3))
    assert routes.send([first]) == []
    assert topic_dispatcher.taken == [[first]] and routes.held == {"t": []}
    assert routes.send([second]) == [] and routes.send([third]) == []
    assert routes.held == {"t": [second, third]}

    dead = _Dispatcher(dead=True)
    topic_dispatcher.route_answer.set_result(dead)
    assert woken and routes.has_answers()
    failed = routes.send([])
    assert [batches for batches, _ in failed] == [[second, third]]
    assert "the actor died" in str(failed[0][1])
    assert routes.direct["t"][0] is dead and routes.held == {}

    other = _Dispatcher()
    routes.topic_dispatcher = other
    unknown = MessageBatch(topic="nowhere", ids=[9])
    routes.send([unknown])
    other.route_answer.set_exception(RuntimeError("no such topic"))
    later = MessageBatch(topic="nowhere", ids=[10])
    assert routes.send([later]) == []
    assert other.taken == [[unknown], [later]] and "nowhere" in routes.undirected
