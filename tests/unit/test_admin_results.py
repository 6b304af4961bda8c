"""Admin's typed results from decoded answers, without a broker: members described from the
consumer-protocol bytes librdkafka 2.x wrote (captured from its JoinGroup and SyncGroup), config
entries of both DescribeConfigs layouts, lag, and when a group counts as inactive."""

from __future__ import annotations

from raykafka.wire.admin import (
    GroupDescription,
    MemberDescription,
    PartitionOffsets,
    config_entry,
    member_description,
)
from raykafka.wire.protocol import Struct

# librdkafka's subscription (v3) to topics t and u: empty user data, no owned partitions,
# generation -1, rack "" ...
LIBRDKAFKA_SUBSCRIPTION = bytes([
    0, 3,                                   # version 3
    0, 0, 0, 2, 0, 1, *b"t", 0, 1, *b"u",   # topics
    0, 0, 0, 0,                             # user_data: empty
    0, 0, 0, 0,                             # owned_partitions: none
    0xFF, 0xFF, 0xFF, 0xFF,                 # generation_id: -1
    0, 0,                                   # rack_id: ""
])
# ... and the assignment (v0) its range leader wrote for the only member: u 0-1, t 0-2
LIBRDKAFKA_ASSIGNMENT = bytes([
    0, 0,                                   # version 0
    0, 0, 0, 2,                             # assigned_partitions: 2 topics
    0, 1, *b"u", 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1,
    0, 1, *b"t", 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2,
    0, 0, 0, 0,                             # user_data: empty
])


def member(metadata: bytes, assignment: bytes) -> Struct:
    return Struct(member_id="rdkafka-1", group_instance_id=None, client_id="rdkafka", client_host="/10.0.0.7",
                  member_metadata=metadata, member_assignment=assignment)


def test_a_consumer_member_is_described_from_librdkafkas_bytes() -> None:
    described = member_description(member(LIBRDKAFKA_SUBSCRIPTION, LIBRDKAFKA_ASSIGNMENT), consumer=True)
    assert described == MemberDescription("rdkafka-1", None, "rdkafka", "/10.0.0.7", ("t", "u"),
                                          {"t": (0, 1, 2), "u": (0, 1)})


def test_a_member_without_bytes_has_no_subscription_nor_assignment() -> None:
    # tansu 0.6 sends neither; a member between JoinGroup and SyncGroup has no assignment yet
    described = member_description(member(b"", b""), consumer=True)
    assert (described.topics, described.assignment) == ((), {})


def test_another_protocols_bytes_are_not_read_as_the_consumer_protocol() -> None:
    described = member_description(member(b"connect-bytes", b"\x00\x01junk"), consumer=False)
    assert (described.topics, described.assignment) == ((), {})


def test_config_entries_of_both_describe_configs_layouts() -> None:
    old = Struct(name="retention.ms", value="1000", read_only=False, is_default=True, config_source=-1,
                 is_sensitive=False)
    assert config_entry(old, 0).source == "DEFAULT_CONFIG"
    new = Struct(name="sasl.jaas.config", value=None, read_only=True, is_default=False, config_source=4,
                 is_sensitive=True)
    entry = config_entry(new, 4)
    assert (entry.source, entry.value, entry.read_only, entry.sensitive) == ("STATIC_BROKER_CONFIG", None, True, True)
    assert config_entry(Struct(new, config_source=42), 4).source == "UNKNOWN"


def test_lag_is_end_minus_committed_and_unknown_without_either() -> None:
    assert PartitionOffsets("t", 0, 4, 0, 10).lag == 6
    assert PartitionOffsets("t", 0, None, 0, 10).lag is None
    assert PartitionOffsets("t", 0, 4, None, None).lag is None  # the topic is gone
    assert PartitionOffsets("t", 0, 12, 0, 10).lag == -2  # committed past the end (a recreated topic)


def test_a_group_is_inactive_only_empty_or_dead_and_without_members() -> None:
    someone = MemberDescription("m", None, "", "", (), {})
    assert GroupDescription("g", "Empty", "consumer", "", (), 1).inactive
    assert GroupDescription("g", "Dead", "", "", (), 1).inactive
    assert not GroupDescription("g", "Stable", "consumer", "range", (someone,), 1).inactive
    assert not GroupDescription("g", "PreparingRebalance", "consumer", "", (), 1).inactive
    assert not GroupDescription("g", "Empty", "consumer", "", (someone,), 1).inactive
