"""The message declarations against the codec: round trips of every version, and golden bytes.

Round trips build a value for every field of every version from the declaration itself
(non-default numbers, non-empty strings and arrays, nested structs, tagged fields set),
once with every nullable field null and once with none null. The golden tests are bytes
written out by hand from Kafka's protocol guide, so the codec is checked against the
spec and not only against itself. Last, hypothesis feeds every schema random, truncated and
corrupted bytes.
"""

from __future__ import annotations

import itertools
import struct
import uuid
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raykafka.wire import messages
from raykafka.wire.errors import DecodeError
from raykafka.wire.protocol import (
    Field,
    Schema,
    decode_request,
    decode_response_header,
    encode_request,
    encode_response,
)

from ..tiers import fuzz_examples

SCHEMAS: list[Schema] = [s for api in messages.APIS.values() for s in (api.request, api.response)]
SCHEMAS += [messages.CONSUMER_PROTOCOL_SUBSCRIPTION, messages.CONSUMER_PROTOCOL_ASSIGNMENT]


def schema_versions(schema: Schema) -> list[int]:
    return list(range(schema.versions.low, schema.versions.high + 1))


CASES = [pytest.param(s, v, id=f"{s.name}-v{v}") for s in SCHEMAS for v in schema_versions(s)]

# ---------------------------------------------------------------------------
# Values generated from a declaration


class _Values:
    """Distinct, non-default values for every field present in a version."""

    def __init__(self, version: int, nulls: bool):
        self.version = version
        self.nulls = nulls
        self.counter = itertools.count(3)

    def primitive(self, type: str, default: Any) -> Any:
        n = next(self.counter)
        value: Any
        if type in ("int8", "int16", "int32", "int64"):
            value = n if n % 2 else -n  # negative numbers too
        elif type in ("uint16", "uint32"):
            value = 40000 + n if type == "uint16" else 3_000_000_000 + n  # above the signed range
        elif type == "float64":
            value = n + 0.25
        elif type == "bool":
            value = not default if isinstance(default, bool) else True
        elif type == "string":
            value = f"s{n}-\u00e9"  # non-ASCII: lengths count bytes
        elif type in ("bytes", "records"):
            value = bytes(range(n % 7 + 1))
        elif type == "uuid":
            value = uuid.UUID(int=(n << 64) | n)
        else:  # pragma: no cover
            raise AssertionError(type)
        assert value != default
        return value

    def field(self, field: Field) -> Any:
        if self.nulls and self.version in field.nullable:
            return None
        if field.type == "{}":
            return self.struct(field.fields)
        if field.type == "[]":
            return [self.struct(field.fields) for _ in range(2)]
        if field.item_type is not None:
            return [self.primitive(field.item_type, None) for _ in range(3)]
        return self.primitive(field.type, field.default_for(self.version))

    def struct(self, fields: tuple[Field, ...]) -> dict[str, Any]:
        return {f.name: self.field(f) for f in fields if self.version in f.versions}


def expected(fields: tuple[Field, ...], version: int, value: dict[str, Any]) -> dict[str, Any]:
    """What decoding gives back: the value sent, with absent fields at their defaults."""
    out: dict[str, Any] = {}
    for f in fields:
        if version not in f.versions:
            out[f.name] = f.default_for(version)
        elif f.type == "{}" and value[f.name] is not None:
            out[f.name] = expected(f.fields, version, value[f.name])
        elif f.type == "[]" and value[f.name] is not None:
            out[f.name] = [expected(f.fields, version, item) for item in value[f.name]]
        else:
            out[f.name] = value[f.name]
    return out


def sample(schema: Schema, version: int, nulls: bool = False) -> dict[str, Any]:
    return _Values(version, nulls).struct(schema.fields)


# ---------------------------------------------------------------------------
# Round trips


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize(("schema", "version"), CASES)
def test_round_trip(schema: Schema, version: int, nulls: bool) -> None:
    value = sample(schema, version, nulls)
    data = schema.encode(version, value)
    assert schema.decode(version, data) == expected(schema.fields, version, value)


@pytest.mark.parametrize(("schema", "version"), CASES)
def test_defaults_round_trip(schema: Schema, version: int) -> None:
    """An empty value encodes every field at its default, and decodes to `Schema.default`."""
    nullable_defaults = all(
        f.default is not None or version in f.nullable for f in schema.fields if version in f.versions
    )
    if not nullable_defaults:  # pragma: no cover - every None default is on a nullable field
        pytest.skip("a None default on a field not nullable in this version")
    assert schema.decode(version, schema.encode(version, {})) == schema.default(version)


def test_every_api_has_matching_request_and_response_versions() -> None:
    assert len(messages.APIS) == 29
    for key, api in messages.APIS.items():
        assert api.key == key
        assert api.request.versions.text == api.response.versions.text
        assert api.request.flexible.text == api.response.flexible.text


@pytest.mark.parametrize("api", messages.APIS.values(), ids=lambda a: a.name)
def test_frames_round_trip(api: messages.Api) -> None:
    """Whole frames, both sides: the request and response headers of every version."""
    for version in schema_versions(api.request):
        body = sample(api.request, version)
        frame = encode_request(api, version, 42, "client-\u00e9", body)
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
        got_api, got_version, correlation_id, client_id, got = decode_request(frame[4:], messages.APIS)
        assert (got_api, got_version, correlation_id, client_id) == (api, version, 42, "client-\u00e9")
        assert got == expected(api.request.fields, version, body)

        body = sample(api.response, version)
        frame = encode_response(api, version, 42, body)
        correlation_id, pos = decode_response_header(api, version, frame[4:])
        assert correlation_id == 42
        assert api.response.decode(version, frame[4:], pos) == expected(api.response.fields, version, body)


# ---------------------------------------------------------------------------
# Golden bytes, written out from the protocol guide


def test_api_versions_request_v3_frame() -> None:
    frame = encode_request(messages.API_VERSIONS, 3, 7, "rk", {
        "client_software_name": "raykafka", "client_software_version": "0.1"})
    assert frame == bytes([
        0, 0, 0, 27,                        # size: the 27 bytes after this field
        0, 18,                              # request_api_key: ApiVersions
        0, 3,                               # request_api_version
        0, 0, 0, 7,                         # correlation_id
        0, 2, *b"rk",                       # client_id: int16 length, never compact
        0,                                  # header v2: no tagged fields
        9, *b"raykafka",                    # client_software_name: compact string, length + 1
        4, *b"0.1",                         # client_software_version
        0,                                  # body: no tagged fields
    ])


def test_api_versions_request_v0_is_an_empty_body() -> None:
    frame = encode_request(messages.API_VERSIONS, 0, 1, None, {})
    assert frame == bytes([
        0, 0, 0, 10,                        # size
        0, 18, 0, 0,                        # api key 18, version 0
        0, 0, 0, 1,                         # correlation_id
        0xFF, 0xFF,                         # client_id: null is int16 -1
    ])


def test_metadata_request_v1_one_topic() -> None:
    frame = encode_request(messages.METADATA, 1, 0x01020304, "c", {"topics": [{"name": "foo"}]})
    assert frame == bytes([
        0, 0, 0, 20,                        # size
        0, 3,                               # request_api_key: Metadata
        0, 1,                               # request_api_version
        1, 2, 3, 4,                         # correlation_id
        0, 1, *b"c",                        # client_id
        # header v1: no tagged-field section
        0, 0, 0, 1,                         # topics: int32 count
        0, 3, *b"foo",                      # topics[0].name: int16 length + bytes
    ])


def test_metadata_request_v1_null_topics_means_all() -> None:
    assert messages.METADATA.request.encode(1, {"topics": None}) == b"\xff\xff\xff\xff"
    with pytest.raises(ValueError):  # v0 cannot say null: an empty list meant "all"
        messages.METADATA.request.encode(0, {"topics": None})


def test_metadata_request_v12_flexible() -> None:
    topic_id = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    body = messages.METADATA.request.encode(12, {
        "topics": [{"topic_id": topic_id, "name": None}], "allow_auto_topic_creation": False})
    assert body == bytes([
        2,                                  # topics: compact array, count + 1
        *topic_id.bytes,                    # topics[0].topic_id: 16 bytes
        0,                                  # topics[0].name: compact null string
        0,                                  # topics[0]: no tagged fields
        0,                                  # allow_auto_topic_creation: false
        0,                                  # include_topic_authorized_operations: false
        0,                                  # no tagged fields
    ])


def test_api_versions_response_v3_with_tagged_fields() -> None:
    frame = bytes([
        0, 0, 0, 9,                         # correlation_id; header v0 even for flexible v3
        0, 0,                               # error_code
        3,                                  # api_keys: compact array of 2
        0, 0, 0, 0, 0, 11, 0,               # Produce 0-11, no tagged fields
        0, 18, 0, 0, 0, 4, 0,               # ApiVersions 0-4, no tagged fields
        0, 0, 0, 0,                         # throttle_time_ms
        3,                                  # three tagged fields
        0, 10,                              # tag 0 (supported_features), 10 bytes:
        2, 4, *b"abc",                      #   one item: name "abc",
        0, 1, 0, 2, 0,                      #   min_version 1, max_version 2, no tagged fields
        1, 8, 0, 0, 0, 0, 0, 0, 0, 5,       # tag 1 (finalized_features_epoch), 8 bytes: 5
        9, 2, 0xAB, 0xCD,                   # tag 9: unknown, skipped
    ])
    api = messages.API_VERSIONS
    correlation_id, pos = decode_response_header(api, 3, frame)
    assert (correlation_id, pos) == (9, 4)
    got = api.response.decode(3, frame, pos)
    assert got.error_code == 0
    assert [(k.api_key, k.min_version, k.max_version) for k in got.api_keys] == [(0, 0, 11), (18, 0, 4)]
    assert got.supported_features == [{"name": "abc", "min_version": 1, "max_version": 2}]
    assert got.finalized_features_epoch == 5
    assert got.finalized_features == []
    assert got.zk_migration_ready is False


def test_api_versions_response_v0_has_no_throttle_time() -> None:
    got = messages.API_VERSIONS.response.decode(0, bytes([0, 35, 0, 0, 0, 0]))
    assert got.error_code == 35 and got.api_keys == []
    assert got.throttle_time_ms == 0  # absent in v0: its default


def test_flexible_response_header_skips_tagged_fields() -> None:
    frame = bytes([
        0, 0, 0, 5,                         # correlation_id
        1, 7, 1, 0xEE,                      # header v1: one tagged field, tag 7, one byte
        0, 0, 0, 100,                       # throttle_time_ms
        0, 27,                              # error_code: REBALANCE_IN_PROGRESS
        0,                                  # no tagged fields
    ])
    correlation_id, pos = decode_response_header(messages.HEARTBEAT, 4, frame)
    assert (correlation_id, pos) == (5, 8)
    assert messages.HEARTBEAT.response.decode(4, frame, pos) == {"throttle_time_ms": 100, "error_code": 27}


def test_produce_request_v3_null_transactional_id() -> None:
    body = messages.PRODUCE.request.encode(3, {
        "transactional_id": None, "acks": -1, "timeout_ms": 1500,
        "topic_data": [{"name": "t", "partition_data": [{"index": 2, "records": b"\x01\x02"}]}]})
    assert body == bytes([
        0xFF, 0xFF,                         # transactional_id: null
        0xFF, 0xFF,                         # acks: -1
        0, 0, 0x05, 0xDC,                   # timeout_ms: 1500
        0, 0, 0, 1,                         # topic_data: 1
        0, 1, *b"t",                        # name
        0, 0, 0, 1,                         # partition_data: 1
        0, 0, 0, 2,                         # index
        0, 0, 0, 2, 1, 2,                   # records: int32 length + bytes
    ])


def test_create_topics_response_v5_tagged_config_error() -> None:
    body = bytes([
        0, 0, 0, 0,                         # throttle_time_ms
        2,                                  # topics: 1
        2, *b"t",                           # name
        0, 0,                               # error_code
        0,                                  # error_message: null
        0, 0, 0, 3,                         # num_partitions
        0, 1,                               # replication_factor
        0,                                  # configs: null
        1, 0, 2, 0, 40,                     # tag 0 (topic_config_error_code), 2 bytes: 40
        0,                                  # no tagged fields
    ])
    got = messages.CREATE_TOPICS.response.decode(5, body)
    topic = got.topics[0]
    assert (topic.name, topic.error_message, topic.num_partitions, topic.replication_factor) == ("t", None, 3, 1)
    assert topic.configs is None
    assert topic.topic_config_error_code == 40


def test_delete_groups_request_v1_and_v2() -> None:
    assert messages.DELETE_GROUPS.request.encode(1, {"groups_names": ["g"]}) == bytes([
        0, 0, 0, 1,                         # groups_names: 1
        0, 1, *b"g",                        # "g"
    ])
    assert messages.DELETE_GROUPS.request.encode(2, {"groups_names": ["g"]}) == bytes([
        2,                                  # groups_names: compact, 1
        2, *b"g",                           # "g", compact
        0,                                  # no tagged fields
    ])


def test_describe_configs_response_v4_flexible() -> None:
    body = bytes([
        0, 0, 0, 0,                         # throttle_time_ms
        2,                                  # results: 1
        0, 0,                               # error_code
        0,                                  # error_message: null
        2,                                  # resource_type: topic
        2, *b"t",                           # resource_name
        2,                                  # configs: 1
        13, *b"retention.ms",               # name
        5, *b"1000",                        # value
        0,                                  # read_only
        1,                                  # config_source: DYNAMIC_TOPIC_CONFIG (no is_default after v0)
        0,                                  # is_sensitive
        1,                                  # synonyms: 0
        5,                                  # config_type: LONG
        0,                                  # documentation: null
        0,                                  # no tagged fields (config)
        0,                                  # no tagged fields (result)
        0,                                  # no tagged fields
    ])
    got = messages.DESCRIBE_CONFIGS.response.decode(4, body)
    config = got.results[0].configs[0]
    assert (got.results[0].resource_name, config.name, config.value) == ("t", "retention.ms", "1000")
    assert (config.config_source, config.is_default, config.config_type, config.documentation) == (1, False, 5, None)


def test_consumer_protocol_subscription_v1() -> None:
    body = messages.CONSUMER_PROTOCOL_SUBSCRIPTION.encode(1, {
        "topics": ["a"], "user_data": None, "owned_partitions": [{"topic": "a", "partitions": [0, 5]}]})
    assert body == bytes([
        0, 0, 0, 1, 0, 1, *b"a",            # topics: ["a"]
        0xFF, 0xFF, 0xFF, 0xFF,             # user_data: null bytes, int32 -1
        0, 0, 0, 1,                         # owned_partitions: 1
        0, 1, *b"a",                        # topic
        0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 5, # partitions: [0, 5]
    ])
    got = messages.CONSUMER_PROTOCOL_SUBSCRIPTION.decode(1, body)
    assert got.generation_id == -1 and got.rack_id is None  # later versions' fields: their defaults


def test_defaults_that_matter() -> None:
    fetch = messages.FETCH.request.default(4)
    assert (fetch.replica_id, fetch.max_bytes, fetch.session_epoch) == (-1, 0x7FFFFFFF, -1)
    assert messages.METADATA.request.default(4).allow_auto_topic_creation is True
    assert messages.CREATE_TOPICS.request.default(0).timeout_ms == 60000
    assert messages.PRODUCE.request.default(3).transactional_id is None


def test_truncated_and_trailing_bytes_are_errors() -> None:
    data = messages.METADATA.request.encode(1, {"topics": [{"name": "foo"}]})
    with pytest.raises(DecodeError):
        messages.METADATA.request.decode(1, data[:-1])
    with pytest.raises(DecodeError, match="left over"):
        messages.METADATA.request.decode(1, data + b"\x00")
    assert messages.METADATA.request.decode(1, data + b"\x00", exact=False).topics[0].name == "foo"


# ---------------------------------------------------------------------------
# Hostile bytes: random, truncated or corrupted input raises DecodeError or decodes,
# nothing else escapes, and nothing allocates by a claimed length or hangs.

RESPONSES = [api.response for api in messages.APIS.values()]
RESPONSES += [messages.CONSUMER_PROTOCOL_SUBSCRIPTION, messages.CONSUMER_PROTOCOL_ASSIGNMENT]
REQUESTS = [api.request for api in messages.APIS.values()]

FUZZ = settings(max_examples=fuzz_examples(150), deadline=timedelta(seconds=2), derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


def decode_or_decode_error(schema: Schema, version: int, data: bytes) -> None:
    try:
        schema.decode(version, data)
    except DecodeError:
        pass


@pytest.mark.timeout(120)
@pytest.mark.parametrize("schema", RESPONSES + REQUESTS, ids=lambda s: s.name)
@FUZZ
@given(data=st.data(), junk=st.binary(max_size=300))
def test_random_bytes(schema: Schema, data: st.DataObject, junk: bytes) -> None:
    version = data.draw(st.sampled_from(schema_versions(schema)))
    decode_or_decode_error(schema, version, junk)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("schema", RESPONSES + REQUESTS, ids=lambda s: s.name)
@FUZZ
@given(data=st.data())
def test_truncated_and_corrupted(schema: Schema, data: st.DataObject) -> None:
    version = data.draw(st.sampled_from(schema_versions(schema)))
    valid = bytearray(schema.encode(version, sample(schema, version, data.draw(st.booleans()))))
    cut = data.draw(st.integers(0, len(valid)))
    if data.draw(st.booleans()):
        truncated = bytes(valid[:cut])
        if cut < len(valid):
            with pytest.raises(DecodeError):
                schema.decode(version, truncated)
        return
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(valid) - 1)) if valid else 0
        if valid:
            valid[at] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, data.draw(st.integers(0, 255))]))
    decode_or_decode_error(schema, version, bytes(valid) + data.draw(st.binary(max_size=8)))


@pytest.mark.parametrize("schema", RESPONSES, ids=lambda s: s.name)
def test_huge_claimed_lengths(schema: Schema) -> None:
    """Lengths and counts near the type's maximum fail fast instead of allocating."""
    for version in schema_versions(schema):
        for junk in (b"\xff" * 4 + b"\x7f\xff\xff\xff", b"\x7f\xff\xff\xff" * 3, b"\xff" * 11, b"\x80" * 20):
            decode_or_decode_error(schema, version, junk)


@pytest.mark.parametrize("version", [3, 9])  # a fixed-length and a flexible (compact) records field
def test_a_produce_request_takes_its_record_batch_in_pieces(version):
    """The flusher hands the record batch as (header, rest of header, records) so the request is
    the one copy; the frame is byte for byte the one built from the joined batch."""
    from raykafka.wire.record_encoding import encode_record_batch, encode_record_batch_parts

    parts = encode_record_batch_parts([b"a", b"bc" * 100], [None, b"k"], 7, producer_id=3, base_sequence=0)
    assert isinstance(parts, tuple) and len(parts) == 3

    def frame(records: object) -> bytes:
        return bytes(encode_request(messages.PRODUCE, version, 5, "rk", {
            "transactional_id": None, "acks": 1, "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}]}))

    joined = encode_record_batch([b"a", b"bc" * 100], [None, b"k"], 7, producer_id=3, base_sequence=0)
    assert b"".join(parts) == joined
    assert frame(parts) == frame(joined)
