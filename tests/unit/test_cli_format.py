"""`raykafka consume -f`: kcat's format strings, and the value and json formats (no broker)."""

from __future__ import annotations

import json

import pytest

from raykafka.app.args import UsageError
from raykafka.app.cli_consume import Formatter, compile_format
from raykafka.wire.arrow_batches import records_to_arrow
from raykafka.wire.record_encoding import encode_record_batch

T0 = 1_700_000_000_000


@pytest.fixture()
def batch():
    """Three records of partition 4 from offset 7: keyed text with two headers, a null key with
    binary bytes, and a null value."""
    data = encode_record_batch([b"hello", b"\xff\x00bin", None], keys=[b"k1", None, b"k3"],
                               timestamps=[T0, T0 + 1, T0 + 2],
                               headers=[[("h1", b"v1"), ("h2", None)], [], []], base_offset=7)
    (decoded, *_rest) = records_to_arrow(data, "events", 4)
    return decoded


def test_kcats_tokens(batch):
    out = Formatter(r"%t %p %o %k %s\n").render(batch)
    assert out == b"events 4 7 k1 hello\nevents 4 8  \xff\x00bin\nevents 4 9 k3 \n"


def test_lengths_timestamps_headers_percent_and_escapes(batch):
    out = Formatter(r"%K|%S|%T|%h|%%\t\\\0;").render(batch)
    assert out.split(b";")[:3] == [b"2|5|%d|h1=v1,h2=|%%\t\\\0" % T0, b"-1|5|%d||%%\t\\\0" % (T0 + 1),
                                   b"2|-1|%d||%%\t\\\0" % (T0 + 2)]


def test_a_format_adds_no_newline_and_limit_cuts_the_batch(batch):
    assert Formatter("%o,").render(batch, limit=2) == b"7,8,"
    assert Formatter("%o,").render(batch, limit=0) == b""


def test_value_and_json_formats(batch):
    assert Formatter("value").render(batch) == "hello\n\ufffd\x00bin\n\n".encode()
    rows = [json.loads(line) for line in Formatter("json").render(batch).decode().splitlines()]
    assert rows[0] == {"topic": "events", "partition": 4, "offset": 7, "key": "k1", "value": "hello",
                       "timestamp": T0, "headers": [["h1", "v1"], ["h2", None]]}
    assert (rows[1]["key"], rows[2]["value"]) == (None, None)


@pytest.mark.parametrize("fmt, says", [("%x", "unknown token %x"), ("abc%", "ends inside a token"),
                                       (r"\q", r"unknown escape \q"), ("x\\", "ends inside an escape")])
def test_a_bad_format_is_a_usage_error_naming_the_token(fmt, says):
    with pytest.raises(UsageError, match=says.replace("\\", "\\\\")):
        compile_format(fmt)
