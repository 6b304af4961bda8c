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
