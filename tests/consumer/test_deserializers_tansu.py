"""On tansu: `key.deserializer` / `value.deserializer` shape what a `Consumer` and a group
member hand out (str: Arrow strings; json, msgpack: parsed columns; a callable's results), and
a value that does not parse fails its partition with the property, offset and cause."""

from __future__ import annotations

import json
import threading
import uuid

import msgpack
import pyarrow as pa
import pytest

from raykafka.driver.consumer import Consumer, ConsumerError

from ..conftest import TANSU_GROUP_SESSION_MS

pytestmark = [pytest.mark.broker, pytest.mark.ray]


@pytest.fixture(scope="module")
def events(bootstrap, kit):
    """One partition: keyed JSON events, then a tombstone (null value)."""
    topic = f"serde-{uuid.uuid4().hex[:8]}"
    kit.create_topic(bootstrap, topic, 1)
    kit.produce(bootstrap, topic, [{"key": f"user-{i}".encode(), "value": json.dumps({"n": i, "tags": ["a"] * i}).encode()}
                                   for i in range(20)] + [{"key": b"user-0", "value": None}])
    return topic


def read(bootstrap: str, topic: str, **config) -> pa.Table:
    with Consumer({"bootstrap.servers": bootstrap, **config}) as consumer:
        consumer.assign(topic, 0, "earliest")
        return consumer.read_all(timeout=30)


def test_str_keys_and_json_values(bootstrap, ray_session, events):
    table = read(bootstrap, events, **{"key.deserializer": "str", "value.deserializer": "json"})
    assert table.schema.field("key").type == pa.string()
    assert pa.types.is_struct(table.schema.field("value").type)
    assert table.column("key").to_pylist()[:3] == ["user-0", "user-1", "user-2"]
    values = table.column("value").to_pylist()
    assert values[:3] == [{"n": 0, "tags": []}, {"n": 1, "tags": ["a"]}, {"n": 2, "tags": ["a", "a"]}]
    assert values[20] is None and table.num_rows == 21
    assert table.column("offset").to_pylist() == list(range(21))


def test_a_callable_and_str_values(bootstrap, ray_session, events):
    table = read(bootstrap, events, **{"key.deserializer": lambda raw: int(raw.split(b"-")[1]),
                                       "value.deserializer": "str"})
    assert table.column("key").to_pylist()[:3] == [0, 1, 2]
    assert table.schema.field("value").type == pa.string()
    assert json.loads(table.column("value")[5].as_py()) == {"n": 5, "tags": ["a"] * 5}


def test_msgpack_values(bootstrap, ray_session, kit):
    topic = f"serde-mp-{uuid.uuid4().hex[:8]}"
    kit.create_topic(bootstrap, topic, 1)
    kit.produce(bootstrap, topic, [{"value": msgpack.packb({"id": i, "raw": bytes([i, 255])})} for i in range(5)])
    table = read(bootstrap, topic, **{"value.deserializer": "msgpack"})
    assert table.column("value").to_pylist() == [{"id": i, "raw": bytes([i, 255])} for i in range(5)]


def test_a_value_that_does_not_parse_fails_its_partition_naming_it(bootstrap, ray_session, kit):
    topic = f"serde-bad-{uuid.uuid4().hex[:8]}"
    kit.create_topic(bootstrap, topic, 1)
    kit.produce(bootstrap, topic, [{"value": b'{"ok": 1}'}, {"value": b'{"ok": 2}'}, {"value": b"not json"}])
    with pytest.raises(ConsumerError, match=f"{topic}/0: .*value.deserializer: {topic}/0 offset 2: JSONDecodeError"):
        read(bootstrap, topic, **{"value.deserializer": "json"})


def test_a_group_member_hands_its_handler_deserialized_batches(bootstrap, events):
    """The member runtime in-process (as `raykafka consume -g` runs it)."""
    from raykafka.actors.group_member_state import MemberRuntime

    got: list[pa.RecordBatch] = []
    done = threading.Event()

    def handle(batch: pa.RecordBatch) -> None:
        got.append(batch)
        if sum(b.num_rows for b in got) >= 21:
            done.set()

    runtime = MemberRuntime({"bootstrap.servers": bootstrap, "group.id": f"serde-{uuid.uuid4().hex[:8]}",
                             "session.timeout.ms": TANSU_GROUP_SESSION_MS, "heartbeat.interval.ms": 500,
                             "auto.offset.reset": "earliest", "key.deserializer": "str",
                             "value.deserializer": "json"}, [events], handle)
    runtime.start()
    try:
        assert done.wait(60), runtime.status()
    finally:
        runtime.stop()
    assert all(b.schema.field("key").type == pa.string() for b in got)
    values = [v for b in got for v in b.column("value").to_pylist()]
    assert values[:2] == [{"n": 0, "tags": []}, {"n": 1, "tags": ["a"]}] and values[20] is None
