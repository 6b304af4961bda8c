"""Consumer-side `key.deserializer` / `value.deserializer` on Arrow batches: bytes, str, json,
msgpack and callables; nulls stay null; what does not parse is named (property, record, cause)."""

from __future__ import annotations

import json
import pickle

import msgpack
import pyarrow as pa
import pytest

from raykafka.wire.arrow_batches import SCHEMA
from raykafka.wire.config import parse_config
from raykafka.wire.errors import ConfigError, DeserializationError
from raykafka.wire.serde import Deserializers, concat_batches, require_raw


def fetched(values: list, keys: list | None = None, first_offset: int = 0) -> pa.RecordBatch:
    """A batch as the consumer fetches it: Spark's Kafka source schema, binary key and value."""
    n = len(values)
    return pa.RecordBatch.from_pydict({
        "key": keys or [None] * n, "value": values, "topic": ["t"] * n, "partition": [3] * n,
        "offset": list(range(first_offset, first_offset + n)), "timestamp": [0] * n, "timestampType": [0] * n,
        "headers": [[]] * n}, schema=SCHEMA)


def test_bytes_leaves_the_batch_as_fetched():
    batch = fetched([b"a"])
    assert Deserializers.from_config(parse_config({"bootstrap.servers": "h:1"}))(batch) is batch


def test_str_gives_arrow_string_columns():
    out = Deserializers("str", "str")(fetched([b"v\xc3\xa9", None], [b"k", None]))
    assert out.schema.field("key").type == pa.string() and out.schema.field("value").type == pa.string()
    assert out.column("value").to_pylist() == ["vé", None] and out.column("key").to_pylist() == ["k", None]
    assert out.schema.names == SCHEMA.names
    assert out.column("offset").to_pylist() == [0, 1]


def test_json_gives_a_parsed_column_typed_by_arrow():
    values = [json.dumps({"user": "ann", "n": 1}).encode(), None, json.dumps({"user": "bob", "n": 2, "x": [1]}).encode()]
    out = Deserializers("bytes", "json")(fetched(values))
    assert pa.types.is_struct(out.schema.field("value").type)
    assert out.column("value").to_pylist() == [{"user": "ann", "n": 1, "x": None}, None,
                                               {"user": "bob", "n": 2, "x": [1]}]
    assert out.schema.field("key").type == pa.binary()


def test_msgpack_gives_a_parsed_column_with_bytes_kept_binary():
    out = Deserializers("bytes", "msgpack")(fetched([msgpack.packb({"id": 7, "blob": b"\x00\xff"}), msgpack.packb(None)]))
    assert out.column("value").to_pylist() == [{"id": 7, "blob": b"\x00\xff"}, None]


def test_a_callable_gets_each_non_null_raw_value():
    seen = []

    def upper(raw: bytes) -> str:
        seen.append(raw)
        return raw.decode().upper()

    out = Deserializers(len, upper)(fetched([b"abc", None], [b"kk", b"k"]))
    assert out.column("value").to_pylist() == ["ABC", None]
    assert out.column("key").to_pylist() == [2, 1]
    assert seen == [b"abc"]


@pytest.mark.parametrize(
    ("deserializers", "batch", "message"),
    [
        (Deserializers("bytes", "json"), fetched([b"{}", b"{not json"], first_offset=40),
         "value.deserializer: t/3 offset 41: JSONDecodeError"),
        (Deserializers("str", "bytes"), fetched([b"a", b"b"], [b"ok", b"\xff\xfe"], first_offset=7),
         "key.deserializer: t/3 offset 8: not UTF-8"),
        (Deserializers("bytes", "msgpack"), fetched([b"\xc1"], first_offset=2), "value.deserializer: t/3 offset 2: "),
        (Deserializers("bytes", lambda raw: 1 / 0), fetched([b"x"], first_offset=9),
         "value.deserializer: t/3 offset 9: ZeroDivisionError"),
        (Deserializers("bytes", "json"), fetched([b"1", b'"text"'], first_offset=5),
         "value.deserializer: t/3 offset 5: the values from here to offset 6 have no common Arrow type"),
    ],
)
def test_what_does_not_deserialize_is_named(deserializers, batch, message):
    with pytest.raises(DeserializationError, match=message) as info:
        deserializers(batch)
    again = pickle.loads(pickle.dumps(info.value))  # it crosses Ray actors
    assert str(again) == str(info.value) and (again.topic, again.partition) == ("t", 3)


def test_an_empty_batch_has_the_deserialized_schema():
    out = Deserializers("str", "json")(fetched([]))
    assert out.num_rows == 0 and out.schema.field("key").type == pa.string()
    assert out.schema == Deserializers("str", "json").schema


def test_concat_retypes_a_parsed_column_that_differs_between_batches():
    d = Deserializers("bytes", "json")
    first = d(fetched([b'{"a": 1}']))
    second = d(fetched([b'{"a": 2.5, "b": "x"}', b"null"], first_offset=1))
    table = concat_batches([first, second], d.schema)
    assert table.column("value").to_pylist() == [{"a": 1.0, "b": None}, {"a": 2.5, "b": "x"}, None]
    assert table.column("offset").to_pylist() == [0, 1, 2]
    assert concat_batches([], d.schema).schema == d.schema


def test_readers_of_raw_columns_refuse_deserializers():
    with pytest.raises(ConfigError, match="value.deserializer: read_kafka gives the key and value as binary"):
        require_raw({"bootstrap.servers": "h:1", "value.deserializer": "str"}, "read_kafka", "cast them")
    require_raw({"bootstrap.servers": "h:1", "value.deserializer": "bytes"}, "read_kafka", "cast them")


def test_the_ray_data_source_refuses_deserializers_before_touching_the_broker():
    from raykafka.spark_bridge.ray_data import KafkaDatasource

    with pytest.raises(ConfigError, match="key.deserializer: KafkaDatasource"):
        KafkaDatasource(["t"], {"bootstrap.servers": "127.0.0.1:1", "key.deserializer": "json"})
