"""Wrong input is refused where it is given, with an error naming it: a producer config key of
the wrong type or range is a `ConfigError` naming the key (never a TypeError or OverflowError
from deeper down); a `send`/`send_batch` argument of the wrong type or range is a TypeError or
ValueError naming the argument, not something from inside numpy or pyarrow, and the producer
goes on delivering."""

from __future__ import annotations

import pyarrow as pa
import pytest

from raykafka.driver.admin import Admin
from raykafka.driver.producer import Producer
from raykafka.wire.errors import ConfigError

PRODUCER_KEYS = ["acks", "linger.ms", "batch.size", "batch.num.messages", "compression.type", "enable.idempotence",
                 "max.in.flight.requests.per.connection", "retries", "retry.backoff.ms", "delivery.timeout.ms",
                 "buffer.memory", "max.block.ms", "max.request.size", "partitioner",
                 "sticky.partitioning.linger.ms", "key.serializer", "value.serializer", "request.timeout.ms",
                 "client.id", "transactional.id"]
WRONG_TYPES = [[5], {"a": 1}, object(), b"\x00", 1.5j]


@pytest.mark.parametrize("key", PRODUCER_KEYS)
def test_a_producer_key_of_the_wrong_type_is_a_config_error_naming_it(key):
    for value in WRONG_TYPES:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            Producer({"bootstrap.servers": "127.0.0.1:9", key: value})


@pytest.mark.parametrize("key", ["linger.ms", "max.block.ms", "retry.backoff.ms", "request.timeout.ms",
                                 "delivery.timeout.ms"])
def test_a_wait_longer_than_a_thread_can_wait_is_a_config_error_naming_its_key(key):
    """Such a value used to get as far as a `Condition.wait` in the sender thread (or an actor),
    which raised OverflowError there and left every message pending."""
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        Producer({"bootstrap.servers": "127.0.0.1:9", key: 10 ** 30})


def test_the_producer_s_own_arguments_are_checked_before_anything_starts():
    with pytest.raises(ConfigError, match="config"):
        Producer("127.0.0.1:9092")
    with pytest.raises(TypeError, match="on_delivery"):
        Producer({"bootstrap.servers": "127.0.0.1:9"}, on_delivery="print")
    with pytest.raises(TypeError, match="name"):
        Producer({"bootstrap.servers": "127.0.0.1:9"}, name=5)


@pytest.mark.broker
@pytest.mark.ray
@pytest.mark.timeout(300)
def test_send_and_send_batch_name_the_argument_they_refuse(ray_session, bootstrap, topic_name):
    topic = topic_name("input")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 2})
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        refused = [
            (TypeError, "timestamp", lambda: producer.send(topic, b"v", timestamp="yesterday")),
            (ValueError, "timestamp", lambda: producer.send(topic, b"v", timestamp=1 << 70)),
            (ValueError, "timestamp", lambda: producer.send(topic, b"v", timestamp=float("nan"))),
            (ValueError, "partition", lambda: producer.send(topic, b"v", partition=1 << 40)),
            (TypeError, "partition", lambda: producer.send(topic, b"v", partition=1.0)),
            (TypeError, "headers", lambda: producer.send(topic, b"v", headers=5)),
            (TypeError, "headers", lambda: producer.send(topic, b"v", headers="k=v")),
            (TypeError, "values", lambda: producer.send_batch(topic, 5)),
            (TypeError, "values", lambda: producer.send_batch(topic, "abc")),
            (TypeError, "values", lambda: producer.send_batch(topic)),
            (TypeError, "keys", lambda: producer.send_batch(topic, [b"a"], keys=7)),
            (TypeError, "partitions", lambda: producer.send_batch(topic, [b"a", b"b"], partitions=["0", 1])),
            (TypeError, "partitions", lambda: producer.send_batch(topic, [b"a", b"b"], partitions=[0.5, 1.0])),
            (ValueError, "partitions", lambda: producer.send_batch(topic, [b"a", b"b"], partitions=[1 << 70, None])),
            (ValueError, "partitions", lambda: producer.send_batch(topic, [b"a"], partitions=[1 << 40])),
            (TypeError, "timestamps", lambda: producer.send_batch(topic, [b"a", b"b"], timestamps=["x", 1])),
            (ValueError, "timestamps", lambda: producer.send_batch(topic, [b"a"], timestamps=[1 << 70])),
            (TypeError, "headers", lambda: producer.send_batch(topic, [b"a"], headers=[5])),
            (TypeError, "partitions", lambda: producer.send_batch(
                None, pa.table({"value": [b"a"], "topic": [topic], "partition": ["zero"]}))),
            (ValueError, "topic", lambda: producer.send_batch(None, pa.table({"value": [b"a", b"b"], "topic": [topic, None]}))),
            (ValueError, "colour", lambda: producer.send_batch(topic, pa.table({"value": [b"a"], "colour": ["red"]}))),
        ]
        for error, name, call in refused:
            with pytest.raises(error, match=name) as raised:
                call()
            assert type(raised.value).__module__ in ("builtins", "raykafka.wire.errors"), repr(raised.value)
        # none of it reached the pipeline: the producer goes on, and None timestamps mean "now"
        result = producer.send_batch(topic, [b"a", b"b"], partitions=[0, None], timestamps=[None, 1_700_000_000_000])
        assert result.result(60).delivered == 2
        assert producer.send(topic, b"after", partition=1, timestamp=1_700_000_000_000.0).result(60).offset >= 0
