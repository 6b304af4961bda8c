"""The stream's planner without Ray or a broker: Spark's maxOffsetsPerTrigger share, data loss,
and batch ids that a batch handed again keeps."""

import pytest

from raykafka.spark_bridge.offsets import PartitionRange, check_range, subscribed_topics
from raykafka.spark_bridge.streaming import Bounds, cap_ranges, plan_batch
from raykafka.wire.admin import TopicPartition
from raykafka.wire.errors import ConfigError, DataLossError


def test_cap_shares_the_limit_by_backlog_and_moves_every_partition_with_records():
    ranges = [PartitionRange("t", 0, 0, 900), PartitionRange("t", 1, 50, 150), PartitionRange("t", 2, 7, 7),
              PartitionRange("t", 3, 0, 1)]
    capped = cap_ranges(ranges, 100)
    assert [r.count for r in capped] == [89, 9, 0, 1]  # 100 * 900/1001, 100 * 100/1001, -, at least 1
    assert [r.start for r in capped] == [0, 50, 7, 0]
    assert sum(r.count for r in capped) <= 100 + len(ranges)
    assert cap_ranges(ranges, None) == ranges
    assert cap_ranges(ranges, 1001) == ranges


def test_plan_goes_from_the_position_to_the_end_and_its_id_is_the_sum_of_starts():
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    bounds = {a: Bounds(0, 500), b: Bounds(0, 20)}
    batch = plan_batch({a: 100, b: 20}, bounds, None, None, True)
    assert [(r.start, r.end) for r in batch.ranges] == [(100, 500), (20, 20)]
    assert batch.batch_id == 120 and batch.count == 400
    again = plan_batch({a: 100, b: 20}, bounds, None, None, True)
    assert again == batch  # the same position plans the same batch, with the same id
    bounded = plan_batch({a: 100, b: 20}, bounds, {a: 300, b: 20}, 50, True)
    assert [(r.start, r.end) for r in bounded.ranges] == [(100, 150), (20, 20)]


def test_a_position_outside_the_log_is_data_loss_or_skipped_with_a_warning(caplog):
    with pytest.raises(DataLossError, match=r"t/3: range \[5, 40\) is outside the partition's log \[10, 40\)"):
        check_range("t", 3, 5, 40, 10, 40, True)
    with pytest.raises(DataLossError, match=r"range \[50, 50\).*\[0, 40\)"):
        check_range("t", 3, 50, 50, 0, 40, True)
    assert check_range("t", 3, 5, 40, 10, 40, False) == PartitionRange("t", 3, 10, 40)
    assert check_range("t", 3, 50, 60, 0, 40, False) == PartitionRange("t", 3, 40, 40)
    assert "data loss" in caplog.text
    a = TopicPartition("t", 0)
    with pytest.raises(DataLossError):
        plan_batch({a: 3}, {a: Bounds(10, 20)}, None, None, True)
    assert plan_batch({a: 3}, {a: Bounds(10, 20)}, None, None, False).ranges == (PartitionRange("t", 0, 10, 20),)


def test_subscribe_pattern_matches_whole_names_and_one_subscription_is_required():
    assert subscribed_topics(None, r"events-\d+", ["events-1", "events-2x", "my-events-3", "events-10"]) == [
        "events-1", "events-10"]
    assert subscribed_topics("a", None, []) == ["a"]
    with pytest.raises(ConfigError, match="exactly one"):
        subscribed_topics("a", "a.*", [])
    with pytest.raises(ConfigError, match="exactly one"):
        subscribed_topics(None, None, [])
    with pytest.raises(ConfigError, match="not a regular expression"):
        subscribed_topics(None, "(", [])


def test_stream_options_are_checked_when_the_stream_is_built():
    from raykafka.spark_bridge.streaming import KafkaStream

    config = {"bootstrap.servers": "127.0.0.1:9"}
    with pytest.raises(ConfigError, match="max_offsets_per_trigger must be at least 1"):
        KafkaStream("t", config, max_offsets_per_trigger=0)
    with pytest.raises(ConfigError, match="trigger_interval must not be negative"):
        KafkaStream("t", config, trigger_interval=-1)
    with pytest.raises(ConfigError, match="endingOffsets: earliest"):
        KafkaStream("t", config, ending_offsets="earliest")
    with pytest.raises(ConfigError, match="exactly one"):
        KafkaStream(None, config)
    with pytest.raises(ValueError, match="no.such.key"):
        KafkaStream("t", {**config, "no.such.key": 1})
