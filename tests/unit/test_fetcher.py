"""The fetcher's state, without Ray or a broker: what each partition answer of a Fetch means."""

from __future__ import annotations

from types import SimpleNamespace

from raykafka.wire.config import parse_config
from raykafka.wire.errors import BY_NAME, ConsumerError, RecordTooLargeError
from raykafka.wire.fetcher import Data, Failed, PartitionFetch, Refetch, Reset, Retry
from raykafka.wire.records import encode_record_batch


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
