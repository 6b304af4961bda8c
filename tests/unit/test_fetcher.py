"""The fetcher's state, without Ray or a broker: what each partition answer of a Fetch means."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from raykafka.wire.config import parse_config
from raykafka.wire.errors import BY_NAME, ConsumerError, CorruptRecordError, RecordTooLargeError
from raykafka.wire.fetcher import Data, Failed, PartitionFetch, Refetch, Reset, Retry, decode_until_bad
from raykafka.wire.record_encoding import encode_record_batch


def answer(records: bytes = b"", error: str | None = None, high_watermark: int = 100) -> SimpleNamespace:
    return SimpleNamespace(error_code=BY_NAME[error].code if error else 0, records=records,
                           high_watermark=high_watermark)


def fetch(offset: int = 0, **config) -> PartitionFetch:
    return PartitionFetch(parse_config({"bootstrap.servers": "x:1", "max.partition.fetch.bytes": 100, **config}),
                          "t", 0, offset)


def test_data_moves_the_position_past_the_whole_batches():
    f = fetch(0)
    one, two = encode_record_batch([b"a", b"b"]), encode_record_batch([b"c"], base_offset=2)
    outcome = f.take(answer(one + two[:-5]))
    assert isinstance(outcome, Data) and (outcome.fetched_at, outcome.next_offset, f.offset) == (0, 2, 2)
    assert f.request() == ("t", 0, 2, 100)


def test_a_first_batch_cut_by_the_size_limit_is_asked_for_whole_then_the_size_goes_back():
    f = fetch(0)
    batch = encode_record_batch([b"x" * 500])
    outcome = f.take(answer(batch[:100]))
    assert outcome == Refetch(len(batch)) and f.request() == ("t", 0, 0, len(batch)) and f.offset == 0
    assert isinstance(f.take(answer(batch)), Data) and f.request() == ("t", 0, 1, 100)


def test_a_cut_too_short_to_tell_the_size_doubles_the_request():
    f = fetch(0)
    assert f.take(answer(encode_record_batch([b"x" * 500])[:8])) == Refetch(200)


def test_a_batch_larger_than_fetch_max_bytes_fails_the_partition_naming_it():
    f = fetch(7, **{"fetch.max.bytes": 300})
    batch = encode_record_batch([b"x" * 500], base_offset=7)
    outcome = f.take(answer(batch[:100]))
    assert isinstance(outcome, Failed) and isinstance(outcome.error, RecordTooLargeError)
    assert "t/0" in str(outcome.error) and "offset 7" in str(outcome.error) and "fetch.max.bytes" in str(outcome.error)


def test_errors_map_to_retry_reset_or_failed():
    assert isinstance(fetch().take(answer(error="NOT_LEADER_OR_FOLLOWER")), Retry)
    assert isinstance(fetch().take(answer(error="REQUEST_TIMED_OUT")), Retry)  # retriable
    reset = fetch(5, **{"auto.offset.reset": "earliest"}).take(answer(error="OFFSET_OUT_OF_RANGE"))
    assert reset == Reset("earliest", 5)
    none = fetch(5, **{"auto.offset.reset": "none"}).take(answer(error="OFFSET_OUT_OF_RANGE"))
    assert isinstance(none, Failed) and isinstance(none.error, ConsumerError) and "offset 5" in str(none.error)
    failed = fetch().take(answer(error="TOPIC_AUTHORIZATION_FAILED"))
    assert isinstance(failed, Failed) and "TOPIC_AUTHORIZATION_FAILED" in str(failed.error)


def _rotten(batch: bytes) -> bytes:
    """`batch` with a byte of its last record flipped: its CRC no longer holds."""
    raw = bytearray(batch)
    raw[-3] ^= 0xFF
    return bytes(raw)


CONFIG = parse_config({"bootstrap.servers": "x:1"})


def test_a_corrupt_batch_ends_the_records_handed_out_after_those_before_it():
    good = encode_record_batch([b"a", b"b"]) + encode_record_batch([b"c"], base_offset=2)
    bad, later = _rotten(encode_record_batch([b"d", b"e"], base_offset=3)), encode_record_batch([b"f"], base_offset=5)
    for data in (good + bad + later, np.frombuffer(good + bad + later, np.uint8)):  # bytes, or from the object store
        batch, after, error = decode_until_bad(data, "t", 1, 1, CONFIG)
        assert batch.column("value").to_pylist() == [b"b", b"c"] and after == 3
        assert isinstance(error, CorruptRecordError) and "t/1: record batch at offset 3 failed its CRC" in str(error)


def test_a_fetch_that_reads_whole_has_no_error_and_a_first_bad_batch_hands_out_nothing():
    good = encode_record_batch([b"a", b"b"])
    assert decode_until_bad(good, "t", 0, 0, CONFIG)[1:] == (2, None)
    batch, after, error = decode_until_bad(_rotten(good) + good, "t", 0, 0, CONFIG)
    assert batch.num_rows == 0 and after == 0 and isinstance(error, CorruptRecordError)
    unreadable_header = good + good[:8] + (-1).to_bytes(4, "big", signed=True) + good[12:]
    batch, after, error = decode_until_bad(unreadable_header, "t", 0, 0, CONFIG)
    assert batch.num_rows == 2 and after == 2 and "negative length" in str(error)
