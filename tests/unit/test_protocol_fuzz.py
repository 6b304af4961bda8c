"""Property tests: the protocol decoder on hostile response frames, as the connection reads them
(header, then body), ends within a bound with a result or a `DecodeError`; so does a hostile
Fetch response read all the way into Arrow, as the consumers read it.

Valid values are drawn from each message's own declaration, encoded, then cut, overwritten or
extended. Every decode runs under `cpu_bound` (tests/unit/conftest.py)."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raykafka.wire import messages
from raykafka.wire.arrow_batches import records_to_arrow
from raykafka.wire.errors import DecodeError
from raykafka.wire.protocol import Api, Field, decode_response_header, encode_response
from raykafka.wire.record_encoding import encode_record_batch

from ..tiers import fuzz_examples

BOUND = 2.0  # CPU seconds for one frame of a few KiB; an honest one takes well under a millisecond
FUZZ = settings(max_examples=fuzz_examples(60), deadline=2000, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_INTS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _primitive(kind: str, nullable: bool) -> st.SearchStrategy:
    if kind in _INTS:
        bits = _INTS[kind]
        base: st.SearchStrategy = st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    elif kind in ("uint16", "uint32"):
        base = st.integers(0, 2 ** int(kind[4:]) - 1)
    elif kind == "float64":
        base = st.floats(allow_nan=False)
    elif kind == "bool":
        base = st.booleans()
    elif kind == "string":
        base = st.text(max_size=8)
    elif kind in ("bytes", "records"):
        base = st.binary(max_size=16)
    else:
        base = st.builds(uuid.UUID, bytes=st.binary(min_size=16, max_size=16))
    return base | st.none() if nullable else base


def values(fields: tuple[Field, ...], version: int) -> st.SearchStrategy:
    """Valid values of a struct of `fields` at `version`, from the declaration alone."""
    present = {}
    for f in fields:
        if version not in f.versions:
            continue
        nullable = version in f.nullable
        if f.type == "{}":
            one = values(f.fields, version)
            strategy = one | st.none() if nullable else one
        elif f.type == "[]":
            many = st.lists(values(f.fields, version), max_size=3)
            strategy = many | st.none() if nullable else many
        elif f.item_type is not None:
            many = st.lists(_primitive(f.item_type, False), max_size=3)
            strategy = many | st.none() if nullable else many
        else:
            strategy = _primitive(f.type, nullable)
        present[f.name] = strategy
    return st.fixed_dictionaries({}, optional=present)


def _versions(api: Api) -> list[int]:
    return list(range(api.response.versions.low, api.response.versions.high + 1))


def _decode_frame(api: Api, version: int, frame: bytes, cpu_bound) -> object:
    """What the connection does with a frame: header, then body; a result or a DecodeError."""
    with cpu_bound(BOUND, f"{api.name} v{version} response {frame[:64].hex()}"):
        try:
            _, pos = decode_response_header(api, version, frame)
            return api.response.decode(version, frame, pos)
        except DecodeError:
            return None


def _mangle(data: st.DataObject, frame: bytes) -> bytes:
    buf = bytearray(frame)
    how = data.draw(st.sampled_from(["cut", "overwrite", "extend", "lengths"]))
    if how == "cut":
        return bytes(buf[:data.draw(st.integers(0, len(buf)))])
    if how == "extend":
        return bytes(buf) + data.draw(st.binary(min_size=1, max_size=32))
    if how == "lengths":  # a 4-byte run anywhere set to a length-like edge value
        at = data.draw(st.integers(0, max(0, len(buf) - 4)))
        edge = data.draw(st.sampled_from([-1, -2, 0x7FFFFFFF, 0x7FFF, 0xFFFF, 1 << 24]))
        buf[at:at + 4] = struct.pack(">i", edge)[:len(buf) - at]
        return bytes(buf)
    for _ in range(data.draw(st.integers(1, 4))):
        if buf:
            buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(
                st.sampled_from([0x00, 0x7F, 0x80, 0xFF]) | st.integers(0, 255))
    return bytes(buf)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("api", list(messages.APIS.values()), ids=lambda a: a.name)
@FUZZ
@given(data=st.data())
def test_hostile_response_frames_end_in_a_result_or_a_decode_error(cpu_bound, api, data):
    version = data.draw(st.sampled_from(_versions(api)))
    value = data.draw(values(api.response.fields, version))
    correlation_id = data.draw(st.integers(0, 2**31 - 1))
    frame = encode_response(api, version, correlation_id, value)[4:]  # as the read loop has it: no size
    decoded = _decode_frame(api, version, frame, cpu_bound)
    assert decoded is not None, "a valid frame did not decode"
    _decode_frame(api, version, _mangle(data, frame), cpu_bound)


@st.composite
def fetch_frames(draw) -> tuple[int, bytes]:
    """A Fetch response of one or two partitions, each holding a few real record batches."""
    version = draw(st.sampled_from([4, 11, 12, 13]))
    partitions = []
    for index in range(draw(st.integers(1, 2))):
        batches, base = [], 0
        for _ in range(draw(st.integers(1, 3))):
            n = draw(st.integers(1, 5))
            batches.append(encode_record_batch([b"v%d" % i for i in range(n)], keys=[b"k"] * n,
                                               headers=[[("h", b"x")]] * n, timestamps=7, base_offset=base,
                                               compression=draw(st.sampled_from([0, 1, 2, 3, 4]))))
            base += n
        partitions.append({"partition_index": index, "error_code": 0, "high_watermark": base,
                           "records": b"".join(batches)})
    topic = {"topic": "t", "topic_id": uuid.UUID(int=1), "partitions": partitions}
    frame = encode_response(messages.FETCH, version, 1, {"responses": [topic]})[4:]
    return version, frame


@pytest.mark.timeout(300)
@settings(max_examples=fuzz_examples(300), deadline=2000, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(fetch_frames(), st.booleans(), st.data())
def test_a_hostile_fetch_response_read_into_arrow_ends_in_batches_or_a_decode_error(cpu_bound, fetched, check_crc,
                                                                                     data):
    """The consumers' whole read: response frame, then each partition's records into Arrow."""
    version, frame = fetched
    frame = _mangle(data, frame)
    response = _decode_frame(messages.FETCH, version, frame, cpu_bound)
    if response is None:
        return
    for topic in response.responses:
        for part in topic.partitions:
            with cpu_bound(BOUND, f"records_to_arrow on {bytes(part.records or b'')[:64].hex()}"):
                try:
                    records_to_arrow(part.records, "t", part.partition_index, check_crc=check_crc)
                except DecodeError:
                    pass


@pytest.mark.parametrize(("kind", "encoded"), [("string", struct.pack(">h", -2)), ("bytes", struct.pack(">i", -7)),
                                               ("array", struct.pack(">i", -3))], ids=["string", "bytes", "array"])
def test_a_negative_length_other_than_null_is_refused(kind, encoded):
    """-1 is null; any other negative length is malformed, not a null that slipped through."""
    if kind == "string":  # Metadata v2: cluster_id, a nullable string, after brokers
        frame = struct.pack(">i", 0) + encoded + struct.pack(">ii", -1, 0)
        with pytest.raises(DecodeError, match="negative length -2"):
            messages.METADATA.response.decode(2, frame)
    elif kind == "bytes":  # SaslAuthenticate v1: error_code, error_message (nullable), auth_bytes
        frame = struct.pack(">hh", 0, -1) + encoded + struct.pack(">q", 0)
        with pytest.raises(DecodeError, match="negative length -7"):
            messages.SASL_AUTHENTICATE.response.decode(1, frame)
    else:  # Fetch v4: aborted_transactions, a nullable array
        frame = (struct.pack(">i", 0) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1)
                 + struct.pack(">ihqq", 0, 0, 0, 0) + encoded + struct.pack(">i", -1))
        with pytest.raises(DecodeError, match="negative length -3"):
            messages.FETCH.response.decode(4, frame)


def test_a_tagged_field_count_beyond_the_bytes_is_refused():
    frame = struct.pack(">i", 0) + b"\xff\xff\xff\xff\x0f"  # header v1: a tag count of 2**32-1
    with pytest.raises(DecodeError, match="4294967295 tagged fields claimed"):
        decode_response_header(messages.METADATA, 12, frame)
