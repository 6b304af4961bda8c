"""Declarations of the Kafka messages this client speaks, every version Kafka defines.

Each API is declared once with the facts of Kafka's message definitions (field versions,
nullable versions, defaults, tags); `protocol.py` encodes and decodes every version from
them. Field names are the snake_case of Kafka's. The consumer-protocol payloads at the end
are not APIs: they travel as bytes inside JoinGroup/SyncGroup, each behind an int16 version
that the group code writes and reads itself, so only their bodies are declared here.
"""

from __future__ import annotations

from .protocol import Api, Field, Schema

# ApiVersions: which versions of each API the broker speaks; the first request on a connection.
API_VERSIONS = Api(
    18, "ApiVersions",
    request=Schema("ApiVersionsRequest", "0-4", "3+", [
        Field("client_software_name", "string", "3+"),
        Field("client_software_version", "string", "3+"),
    ]),
    response=Schema("ApiVersionsResponse", "0-4", "3+", [
        Field("error_code", "int16", "0+"),
        Field("api_keys", "[]", "0+", fields=[
            Field("api_key", "int16", "0+"),
            Field("min_version", "int16", "0+"),
            Field("max_version", "int16", "0+"),
        ]),
        Field("throttle_time_ms", "int32", "1+"),
        Field("supported_features", "[]", "3+", tag=0, tagged="3+", fields=[
            Field("name", "string", "3+"),
            Field("min_version", "int16", "3+"),
            Field("max_version", "int16", "3+"),
        ]),
        Field("finalized_features_epoch", "int64", "3+", default=-1, tag=1, tagged="3+"),
        Field("finalized_features", "[]", "3+", tag=2, tagged="3+", fields=[
            Field("name", "string", "3+"),
            Field("max_version_level", "int16", "3+"),
            Field("min_version_level", "int16", "3+"),
        ]),
        Field("zk_migration_ready", "bool", "3+", default=False, tag=3, tagged="3+"),
    ]),
)


# Metadata: brokers, topics, partitions and their leaders.
METADATA = Api(
    3, "Metadata",
    request=Schema("MetadataRequest", "0-12", "9+", [
        Field("topics", "[]", "0+", nullable="1+", fields=[
            Field("topic_id", "uuid", "10+"),
            Field("name", "string", "0+", nullable="10+"),
        ]),
        Field("allow_auto_topic_creation", "bool", "4+", default=True),
        Field("include_cluster_authorized_operations", "bool", "8-10"),
        Field("include_topic_authorized_operations", "bool", "8+"),
    ]),
    response=Schema("MetadataResponse", "0-12", "9+", [
        Field("throttle_time_ms", "int32", "3+"),
        Field("brokers", "[]", "0+", fields=[
            Field("node_id", "int32", "0+"),
            Field("host", "string", "0+"),
            Field("port", "int32", "0+"),
            Field("rack", "string", "1+", nullable="1+", default=None),
        ]),
        Field("cluster_id", "string", "2+", nullable="2+", default=None),
        Field("controller_id", "int32", "1+", default=-1),
        Field("topics", "[]", "0+", fields=[
            Field("error_code", "int16", "0+"),
            Field("name", "string", "0+", nullable="12+"),
            Field("topic_id", "uuid", "10+"),
            Field("is_internal", "bool", "1+", default=False),
            Field("partitions", "[]", "0+", fields=[
                Field("error_code", "int16", "0+"),
                Field("partition_index", "int32", "0+"),
                Field("leader_id", "int32", "0+"),
                Field("leader_epoch", "int32", "7+", default=-1),
                Field("replica_nodes", "[]int32", "0+"),
                Field("isr_nodes", "[]int32", "0+"),
                Field("offline_replicas", "[]int32", "5+"),
            ]),
            Field("topic_authorized_operations", "int32", "8+", default=-2147483648),
        ]),
        Field("cluster_authorized_operations", "int32", "8-10", default=-2147483648),
    ]),
)


# Produce: record batches to partition leaders.
PRODUCE = Api(
    0, "Produce",
    request=Schema("ProduceRequest", "0-11", "9+", [
        Field("transactional_id", "string", "3+", nullable="3+", default=None),
        Field("acks", "int16", "0+"),
        Field("timeout_ms", "int32", "0+"),
        Field("topic_data", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("partition_data", "[]", "0+", fields=[
                Field("index", "int32", "0+"),
                Field("records", "records", "0+", nullable="0+"),
            ]),
        ]),
    ]),
    response=Schema("ProduceResponse", "0-11", "9+", [
        Field("responses", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("partition_responses", "[]", "0+", fields=[
                Field("index", "int32", "0+"),
                Field("error_code", "int16", "0+"),
                Field("base_offset", "int64", "0+"),
                Field("log_append_time_ms", "int64", "2+", default=-1),
                Field("log_start_offset", "int64", "5+", default=-1),
                Field("record_errors", "[]", "8+", fields=[
                    Field("batch_index", "int32", "8+"),
                    Field("batch_index_error_message", "string", "8+", nullable="8+", default=None),
                ]),
                Field("error_message", "string", "8+", nullable="8+", default=None),
                Field("current_leader", "{}", "10+", tag=0, tagged="10+", fields=[
                    Field("leader_id", "int32", "10+", default=-1),
                    Field("leader_epoch", "int32", "10+", default=-1),
                ]),
            ]),
        ]),
        Field("throttle_time_ms", "int32", "1+", default=0),
        Field("node_endpoints", "[]", "10+", tag=0, tagged="10+", fields=[
            Field("node_id", "int32", "10+"),
            Field("host", "string", "10+"),
            Field("port", "int32", "10+"),
            Field("rack", "string", "10+", nullable="10+", default=None),
        ]),
    ]),
)


# Fetch: record batches from partition leaders (incremental fetch sessions from v7).
FETCH = Api(
    1, "Fetch",
    request=Schema("FetchRequest", "0-17", "12+", [
        Field("cluster_id", "string", "12+", nullable="12+", default=None, tag=0, tagged="12+"),
        Field("replica_id", "int32", "0-14", default=-1),
        Field("replica_state", "{}", "15+", tag=1, tagged="15+", fields=[
            Field("replica_id", "int32", "15+", default=-1),
            Field("replica_epoch", "int64", "15+", default=-1),
        ]),
        Field("max_wait_ms", "int32", "0+"),
        Field("min_bytes", "int32", "0+"),
        Field("max_bytes", "int32", "3+", default=2147483647),
        Field("isolation_level", "int8", "4+", default=0),
        Field("session_id", "int32", "7+", default=0),
        Field("session_epoch", "int32", "7+", default=-1),
        Field("topics", "[]", "0+", fields=[
            Field("topic", "string", "0-12"),
            Field("topic_id", "uuid", "13+"),
            Field("partitions", "[]", "0+", fields=[
                Field("partition", "int32", "0+"),
                Field("current_leader_epoch", "int32", "9+", default=-1),
                Field("fetch_offset", "int64", "0+"),
                Field("last_fetched_epoch", "int32", "12+", default=-1),
                Field("log_start_offset", "int64", "5+", default=-1),
                Field("partition_max_bytes", "int32", "0+"),
                Field("replica_directory_id", "uuid", "17+", tag=0, tagged="17+"),
            ]),
        ]),
        Field("forgotten_topics_data", "[]", "7+", fields=[
            Field("topic", "string", "7-12"),
            Field("topic_id", "uuid", "13+"),
            Field("partitions", "[]int32", "7+"),
        ]),
        Field("rack_id", "string", "11+", default=""),
    ]),
    response=Schema("FetchResponse", "0-17", "12+", [
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16", "7+"),
        Field("session_id", "int32", "7+", default=0),
        Field("responses", "[]", "0+", fields=[
            Field("topic", "string", "0-12"),
            Field("topic_id", "uuid", "13+"),
            Field("partitions", "[]", "0+", fields=[
                Field("partition_index", "int32", "0+"),
                Field("error_code", "int16", "0+"),
                Field("high_watermark", "int64", "0+"),
                Field("last_stable_offset", "int64", "4+", default=-1),
                Field("log_start_offset", "int64", "5+", default=-1),
                Field("diverging_epoch", "{}", "12+", tag=0, tagged="12+", fields=[
                    Field("epoch", "int32", "12+", default=-1),
                    Field("end_offset", "int64", "12+", default=-1),
                ]),
                Field("current_leader", "{}", "12+", tag=1, tagged="12+", fields=[
                    Field("leader_id", "int32", "12+", default=-1),
                    Field("leader_epoch", "int32", "12+", default=-1),
                ]),
                Field("snapshot_id", "{}", "12+", tag=2, tagged="12+", fields=[
                    Field("end_offset", "int64", "0+", default=-1),
                    Field("epoch", "int32", "0+", default=-1),
                ]),
                Field("aborted_transactions", "[]", "4+", nullable="4+", fields=[
                    Field("producer_id", "int64", "4+"),
                    Field("first_offset", "int64", "4+"),
                ]),
                Field("preferred_read_replica", "int32", "11+", default=-1),
                Field("records", "records", "0+", nullable="0+"),
            ]),
        ]),
        Field("node_endpoints", "[]", "16+", tag=0, tagged="16+", fields=[
            Field("node_id", "int32", "16+"),
            Field("host", "string", "16+"),
            Field("port", "int32", "16+"),
            Field("rack", "string", "16+", nullable="16+", default=None),
        ]),
    ]),
)


# ListOffsets: the offset for a timestamp, or the earliest/latest offset (-2/-1).
LIST_OFFSETS = Api(
    2, "ListOffsets",
    request=Schema("ListOffsetsRequest", "0-9", "6+", [
        Field("replica_id", "int32", "0+"),
        Field("isolation_level", "int8", "2+"),
        Field("topics", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("partitions", "[]", "0+", fields=[
                Field("partition_index", "int32", "0+"),
                Field("current_leader_epoch", "int32", "4+", default=-1),
                Field("timestamp", "int64", "0+"),
                Field("max_num_offsets", "int32", "0", default=1),
            ]),
        ]),
    ]),
    response=Schema("ListOffsetsResponse", "0-9", "6+", [
        Field("throttle_time_ms", "int32", "2+"),
        Field("topics", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("partitions", "[]", "0+", fields=[
                Field("partition_index", "int32", "0+"),
                Field("error_code", "int16", "0+"),
                Field("old_style_offsets", "[]int64", "0"),
                Field("timestamp", "int64", "1+", default=-1),
                Field("offset", "int64", "1+", default=-1),
                Field("leader_epoch", "int32", "4+", default=-1),
            ]),
        ]),
    ]),
)


# FindCoordinator: the broker coordinating a group (key_type 0) or a transaction (1).
FIND_COORDINATOR = Api(
    10, "FindCoordinator",
    request=Schema("FindCoordinatorRequest", "0-6", "3+", [
        Field("key", "string", "0-3"),
        Field("key_type", "int8", "1+", default=0),
        Field("coordinator_keys", "[]string", "4+"),
    ]),
    response=Schema("FindCoordinatorResponse", "0-6", "3+", [
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16", "0-3"),
        Field("error_message", "string", "1-3", nullable="1-3"),
        Field("node_id", "int32", "0-3"),
        Field("host", "string", "0-3"),
        Field("port", "int32", "0-3"),
        Field("coordinators", "[]", "4+", fields=[
            Field("key", "string", "4+"),
            Field("node_id", "int32", "4+"),
            Field("host", "string", "4+"),
            Field("port", "int32", "4+"),
            Field("error_code", "int16", "4+"),
            Field("error_message", "string", "4+", nullable="4+"),
        ]),
    ]),
)


# JoinGroup: enter a classic consumer group; the leader receives every member's metadata.
JOIN_GROUP = Api(
    11, "JoinGroup",
    request=Schema("JoinGroupRequest", "0-9", "6+", [
        Field("group_id", "string", "0+"),
        Field("session_timeout_ms", "int32", "0+"),
        Field("rebalance_timeout_ms", "int32", "1+", default=-1),
        Field("member_id", "string", "0+"),
        Field("group_instance_id", "string", "5+", nullable="5+", default=None),
        Field("protocol_type", "string", "0+"),
        Field("protocols", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("metadata", "bytes", "0+"),
        ]),
        Field("reason", "string", "8+", nullable="8+", default=None),
    ]),
    response=Schema("JoinGroupResponse", "0-9", "6+", [
        Field("throttle_time_ms", "int32", "2+"),
        Field("error_code", "int16", "0+"),
        Field("generation_id", "int32", "0+", default=-1),
        Field("protocol_type", "string", "7+", nullable="7+", default=None),
        Field("protocol_name", "string", "0+", nullable="7+"),
        Field("leader", "string", "0+"),
        Field("skip_assignment", "bool", "9+", default=False),
        Field("member_id", "string", "0+"),
        Field("members", "[]", "0+", fields=[
            Field("member_id", "string", "0+"),
            Field("group_instance_id", "string", "5+", nullable="5+", default=None),
            Field("metadata", "bytes", "0+"),
        ]),
    ]),
)


# SyncGroup: the leader hands out assignments; every member receives its own.
SYNC_GROUP = Api(
    14, "SyncGroup",
    request=Schema("SyncGroupRequest", "0-5", "4+", [
        Field("group_id", "string", "0+"),
        Field("generation_id", "int32", "0+"),
        Field("member_id", "string", "0+"),
        Field("group_instance_id", "string", "3+", nullable="3+", default=None),
        Field("protocol_type", "string", "5+", nullable="5+", default=None),
        Field("protocol_name", "string", "5+", nullable="5+", default=None),
        Field("assignments", "[]", "0+", fields=[
            Field("member_id", "string", "0+"),
            Field("assignment", "bytes", "0+"),
        ]),
    ]),
    response=Schema("SyncGroupResponse", "0-5", "4+", [
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16", "0+"),
        Field("protocol_type", "string", "5+", nullable="5+", default=None),
        Field("protocol_name", "string", "5+", nullable="5+", default=None),
        Field("assignment", "bytes", "0+"),
    ]),
)


# Heartbeat: keep a group membership alive.
HEARTBEAT = Api(
    12, "Heartbeat",
    request=Schema("HeartbeatRequest", "0-4", "4+", [
        Field("group_id", "string", "0+"),
        Field("generation_id", "int32", "0+"),
        Field("member_id", "string", "0+"),
        Field("group_instance_id", "string", "3+", nullable="3+", default=None),
    ]),
    response=Schema("HeartbeatResponse", "0-4", "4+", [
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16", "0+"),
    ]),
)


# LeaveGroup: leave a group (several members at once from v3).
LEAVE_GROUP = Api(
    13, "LeaveGroup",
    request=Schema("LeaveGroupRequest", "0-5", "4+", [
        Field("group_id", "string", "0+"),
        Field("member_id", "string", "0-2"),
        Field("members", "[]", "3+", fields=[
            Field("member_id", "string", "3+"),
            Field("group_instance_id", "string", "3+", nullable="3+", default=None),
            Field("reason", "string", "5+", nullable="5+", default=None),
        ]),
    ]),
    response=Schema("LeaveGroupResponse", "0-5", "4+", [
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16", "0+"),
        Field("members", "[]", "3+", fields=[
            Field("member_id", "string", "3+"),
            Field("group_instance_id", "string", "3+", nullable="3+"),
            Field("error_code", "int16", "3+"),
        ]),
    ]),
)


# OffsetCommit: store a group's consumed offsets.
OFFSET_COMMIT = Api(
    8, "OffsetCommit",
    request=Schema("OffsetCommitRequest", "0-9", "8+", [
        Field("group_id", "string", "0+"),
        Field("generation_id_or_member_epoch", "int32", "1+", default=-1),
        Field("member_id", "string", "1+"),
        Field("group_instance_id", "string", "7+", nullable="7+", default=None),
        Field("retention_time_ms", "int64", "2-4", default=-1),
        Field("topics", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("partitions", "[]", "0+", fields=[
                Field("partition_index", "int32", "0+"),
                Field("committed_offset", "int64", "0+"),
                Field("committed_leader_epoch", "int32", "6+", default=-1),
                Field("commit_timestamp", "int64", "1", default=-1),
                Field("committed_metadata", "string", "0+", nullable="0+"),
            ]),
        ]),
    ]),
    response=Schema("OffsetCommitResponse", "0-9", "8+", [
        Field("throttle_time_ms", "int32", "3+"),
        Field("topics", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("partitions", "[]", "0+", fields=[
                Field("partition_index", "int32", "0+"),
                Field("error_code", "int16", "0+"),
            ]),
        ]),
    ]),
)


# OffsetFetch: read a group's committed offsets (several groups at once from v8).
OFFSET_FETCH = Api(
    9, "OffsetFetch",
    request=Schema("OffsetFetchRequest", "0-9", "6+", [
        Field("group_id", "string", "0-7"),
        Field("topics", "[]", "0-7", nullable="2-7", fields=[
            Field("name", "string", "0-7"),
            Field("partition_indexes", "[]int32", "0-7"),
        ]),
        Field("groups", "[]", "8+", fields=[
            Field("group_id", "string", "8+"),
            Field("member_id", "string", "9+", nullable="9+", default=None),
            Field("member_epoch", "int32", "9+", default=-1),
            Field("topics", "[]", "8+", nullable="8+", fields=[
                Field("name", "string", "8+"),
                Field("partition_indexes", "[]int32", "8+"),
            ]),
        ]),
        Field("require_stable", "bool", "7+", default=False),
    ]),
    response=Schema("OffsetFetchResponse", "0-9", "6+", [
        Field("throttle_time_ms", "int32", "3+"),
        Field("topics", "[]", "0-7", fields=[
            Field("name", "string", "0-7"),
            Field("partitions", "[]", "0-7", fields=[
                Field("partition_index", "int32", "0-7"),
                Field("committed_offset", "int64", "0-7"),
                Field("committed_leader_epoch", "int32", "5-7", default=-1),
                Field("metadata", "string", "0-7", nullable="0-7"),
                Field("error_code", "int16", "0-7"),
            ]),
        ]),
        Field("error_code", "int16", "2-7", default=0),
        Field("groups", "[]", "8+", fields=[
            Field("group_id", "string", "8+"),
            Field("topics", "[]", "8+", fields=[
                Field("name", "string", "8+"),
                Field("partitions", "[]", "8+", fields=[
                    Field("partition_index", "int32", "8+"),
                    Field("committed_offset", "int64", "8+"),
                    Field("committed_leader_epoch", "int32", "8+", default=-1),
                    Field("metadata", "string", "8+", nullable="8+"),
                    Field("error_code", "int16", "8+"),
                ]),
            ]),
            Field("error_code", "int16", "8+", default=0),
        ]),
    ]),
)


# CreateTopics.
CREATE_TOPICS = Api(
    19, "CreateTopics",
    request=Schema("CreateTopicsRequest", "0-7", "5+", [
        Field("topics", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("num_partitions", "int32", "0+"),
            Field("replication_factor", "int16", "0+"),
            Field("assignments", "[]", "0+", fields=[
                Field("partition_index", "int32", "0+"),
                Field("broker_ids", "[]int32", "0+"),
            ]),
            Field("configs", "[]", "0+", fields=[
                Field("name", "string", "0+"),
                Field("value", "string", "0+", nullable="0+"),
            ]),
        ]),
        Field("timeout_ms", "int32", "0+", default=60000),
        Field("validate_only", "bool", "1+", default=False),
    ]),
    response=Schema("CreateTopicsResponse", "0-7", "5+", [
        Field("throttle_time_ms", "int32", "2+"),
        Field("topics", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("topic_id", "uuid", "7+"),
            Field("error_code", "int16", "0+"),
            Field("error_message", "string", "1+", nullable="0+"),
            Field("topic_config_error_code", "int16", "5+", tag=0, tagged="5+"),
            Field("num_partitions", "int32", "5+", default=-1),
            Field("replication_factor", "int16", "5+", default=-1),
            Field("configs", "[]", "5+", nullable="5+", fields=[
                Field("name", "string", "5+"),
                Field("value", "string", "5+", nullable="5+"),
                Field("read_only", "bool", "5+"),
                Field("config_source", "int8", "5+", default=-1),
                Field("is_sensitive", "bool", "5+"),
            ]),
        ]),
    ]),
)


# DeleteTopics: by name, or by topic id from v6.
DELETE_TOPICS = Api(
    20, "DeleteTopics",
    request=Schema("DeleteTopicsRequest", "0-6", "4+", [
        Field("topics", "[]", "6+", fields=[
            Field("name", "string", "6+", nullable="6+", default=None),
            Field("topic_id", "uuid", "6+"),
        ]),
        Field("topic_names", "[]string", "0-5"),
        Field("timeout_ms", "int32", "0+"),
    ]),
    response=Schema("DeleteTopicsResponse", "0-6", "4+", [
        Field("throttle_time_ms", "int32", "1+"),
        Field("responses", "[]", "0+", fields=[
            Field("name", "string", "0+", nullable="6+"),
            Field("topic_id", "uuid", "6+"),
            Field("error_code", "int16", "0+"),
            Field("error_message", "string", "5+", nullable="5+", default=None),
        ]),
    ]),
)


# CreatePartitions: grow a topic to a new partition count.
CREATE_PARTITIONS = Api(
    37, "CreatePartitions",
    request=Schema("CreatePartitionsRequest", "0-3", "2+", [
        Field("topics", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("count", "int32", "0+"),
            Field("assignments", "[]", "0+", nullable="0+", fields=[
                Field("broker_ids", "[]int32", "0+"),
            ]),
        ]),
        Field("timeout_ms", "int32", "0+"),
        Field("validate_only", "bool", "0+"),
    ]),
    response=Schema("CreatePartitionsResponse", "0-3", "2+", [
        Field("throttle_time_ms", "int32", "0+"),
        Field("results", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("error_code", "int16", "0+"),
            Field("error_message", "string", "0+", nullable="0+", default=None),
        ]),
    ]),
)


# InitProducerId: a producer id and epoch for idempotent or transactional producing.
INIT_PRODUCER_ID = Api(
    22, "InitProducerId",
    request=Schema("InitProducerIdRequest", "0-5", "2+", [
        Field("transactional_id", "string", "0+", nullable="0+"),
        Field("transaction_timeout_ms", "int32", "0+"),
        Field("producer_id", "int64", "3+", default=-1),
        Field("producer_epoch", "int16", "3+", default=-1),
    ]),
    response=Schema("InitProducerIdResponse", "0-5", "2+", [
        Field("throttle_time_ms", "int32", "0+"),
        Field("error_code", "int16", "0+"),
        Field("producer_id", "int64", "0+", default=-1),
        Field("producer_epoch", "int16", "0+"),
    ]),
)


# AddPartitionsToTxn: partitions a transaction writes to, before its first Produce to them
# (v4+ batch several transactions and are spoken between brokers; a client speaks v0-3).
# The two common structs of Kafka's definition, each used twice:
_ADD_PARTITIONS_TO_TXN_TOPIC = [
    Field("name", "string", "0+"),
    Field("partitions", "[]int32", "0+"),
]
_ADD_PARTITIONS_TO_TXN_TOPIC_RESULT = [
    Field("name", "string", "0+"),
    Field("results_by_partition", "[]", "0+", fields=[
        Field("partition_index", "int32", "0+"),
        Field("partition_error_code", "int16", "0+"),
    ]),
]
ADD_PARTITIONS_TO_TXN = Api(
    24, "AddPartitionsToTxn",
    request=Schema("AddPartitionsToTxnRequest", "0-5", "3+", [
        Field("transactions", "[]", "4+", fields=[
            Field("transactional_id", "string", "4+"),
            Field("producer_id", "int64", "4+"),
            Field("producer_epoch", "int16", "4+"),
            Field("verify_only", "bool", "4+", default=False),
            Field("topics", "[]", "4+", fields=_ADD_PARTITIONS_TO_TXN_TOPIC),
        ]),
        Field("v3_and_below_transactional_id", "string", "0-3"),
        Field("v3_and_below_producer_id", "int64", "0-3"),
        Field("v3_and_below_producer_epoch", "int16", "0-3"),
        Field("v3_and_below_topics", "[]", "0-3", fields=_ADD_PARTITIONS_TO_TXN_TOPIC),
    ]),
    response=Schema("AddPartitionsToTxnResponse", "0-5", "3+", [
        Field("throttle_time_ms", "int32", "0+"),
        Field("error_code", "int16", "4+"),
        Field("results_by_transaction", "[]", "4+", fields=[
            Field("transactional_id", "string", "4+"),
            Field("topic_results", "[]", "4+", fields=_ADD_PARTITIONS_TO_TXN_TOPIC_RESULT),
        ]),
        Field("results_by_topic_v3_and_below", "[]", "0-3", fields=_ADD_PARTITIONS_TO_TXN_TOPIC_RESULT),
    ]),
)


# AddOffsetsToTxn: a consumer group whose offsets the transaction commits (TxnOffsetCommit next).
ADD_OFFSETS_TO_TXN = Api(
    25, "AddOffsetsToTxn",
    request=Schema("AddOffsetsToTxnRequest", "0-4", "3+", [
        Field("transactional_id", "string", "0+"),
        Field("producer_id", "int64", "0+"),
        Field("producer_epoch", "int16", "0+"),
        Field("group_id", "string", "0+"),
    ]),
    response=Schema("AddOffsetsToTxnResponse", "0-4", "3+", [
        Field("throttle_time_ms", "int32", "0+"),
        Field("error_code", "int16", "0+"),
    ]),
)


# EndTxn: commit or abort the transaction; the coordinator writes the markers.
END_TXN = Api(
    26, "EndTxn",
    request=Schema("EndTxnRequest", "0-4", "3+", [
        Field("transactional_id", "string", "0+"),
        Field("producer_id", "int64", "0+"),
        Field("producer_epoch", "int16", "0+"),
        Field("committed", "bool", "0+"),
    ]),
    response=Schema("EndTxnResponse", "0-4", "3+", [
        Field("throttle_time_ms", "int32", "0+"),
        Field("error_code", "int16", "0+"),
    ]),
)


# TxnOffsetCommit: a group's offsets, to the group coordinator, visible once the transaction commits.
TXN_OFFSET_COMMIT = Api(
    28, "TxnOffsetCommit",
    request=Schema("TxnOffsetCommitRequest", "0-4", "3+", [
        Field("transactional_id", "string", "0+"),
        Field("group_id", "string", "0+"),
        Field("producer_id", "int64", "0+"),
        Field("producer_epoch", "int16", "0+"),
        Field("generation_id", "int32", "3+", default=-1),
        Field("member_id", "string", "3+", default=""),
        Field("group_instance_id", "string", "3+", nullable="3+", default=None),
        Field("topics", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("partitions", "[]", "0+", fields=[
                Field("partition_index", "int32", "0+"),
                Field("committed_offset", "int64", "0+"),
                Field("committed_leader_epoch", "int32", "2+", default=-1),
                Field("committed_metadata", "string", "0+", nullable="0+"),
            ]),
        ]),
    ]),
    response=Schema("TxnOffsetCommitResponse", "0-4", "3+", [
        Field("throttle_time_ms", "int32", "0+"),
        Field("topics", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("partitions", "[]", "0+", fields=[
                Field("partition_index", "int32", "0+"),
                Field("error_code", "int16", "0+"),
            ]),
        ]),
    ]),
)


# DescribeGroups: state, protocol and members of groups.
DESCRIBE_GROUPS = Api(
    15, "DescribeGroups",
    request=Schema("DescribeGroupsRequest", "0-5", "5+", [
        Field("groups", "[]string", "0+"),
        Field("include_authorized_operations", "bool", "3+"),
    ]),
    response=Schema("DescribeGroupsResponse", "0-5", "5+", [
        Field("throttle_time_ms", "int32", "1+"),
        Field("groups", "[]", "0+", fields=[
            Field("error_code", "int16", "0+"),
            Field("group_id", "string", "0+"),
            Field("group_state", "string", "0+"),
            Field("protocol_type", "string", "0+"),
            Field("protocol_data", "string", "0+"),
            Field("members", "[]", "0+", fields=[
                Field("member_id", "string", "0+"),
                Field("group_instance_id", "string", "4+", nullable="4+", default=None),
                Field("client_id", "string", "0+"),
                Field("client_host", "string", "0+"),
                Field("member_metadata", "bytes", "0+"),
                Field("member_assignment", "bytes", "0+"),
            ]),
            Field("authorized_operations", "int32", "3+", default=-2147483648),
        ]),
    ]),
)


# ListGroups: the groups a broker coordinates.
LIST_GROUPS = Api(
    16, "ListGroups",
    request=Schema("ListGroupsRequest", "0-5", "3+", [
        Field("states_filter", "[]string", "4+"),
        Field("types_filter", "[]string", "5+"),
    ]),
    response=Schema("ListGroupsResponse", "0-5", "3+", [
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16", "0+"),
        Field("groups", "[]", "0+", fields=[
            Field("group_id", "string", "0+"),
            Field("protocol_type", "string", "0+"),
            Field("group_state", "string", "4+"),
            Field("group_type", "string", "5+"),
        ]),
    ]),
)


# DeleteGroups: remove empty groups and their committed offsets.
DELETE_GROUPS = Api(
    42, "DeleteGroups",
    request=Schema("DeleteGroupsRequest", "0-2", "2+", [
        Field("groups_names", "[]string", "0+"),
    ]),
    response=Schema("DeleteGroupsResponse", "0-2", "2+", [
        Field("throttle_time_ms", "int32", "0+"),
        Field("results", "[]", "0+", fields=[
            Field("group_id", "string", "0+"),
            Field("error_code", "int16", "0+"),
        ]),
    ]),
)


# DescribeConfigs: the configuration of topics (resource type 2) and brokers (4).
DESCRIBE_CONFIGS = Api(
    32, "DescribeConfigs",
    request=Schema("DescribeConfigsRequest", "0-4", "4+", [
        Field("resources", "[]", "0+", fields=[
            Field("resource_type", "int8", "0+"),
            Field("resource_name", "string", "0+"),
            Field("configuration_keys", "[]string", "0+", nullable="0+"),
        ]),
        Field("include_synonyms", "bool", "1+", default=False),
        Field("include_documentation", "bool", "3+", default=False),
    ]),
    response=Schema("DescribeConfigsResponse", "0-4", "4+", [
        Field("throttle_time_ms", "int32", "0+"),
        Field("results", "[]", "0+", fields=[
            Field("error_code", "int16", "0+"),
            Field("error_message", "string", "0+", nullable="0+"),
            Field("resource_type", "int8", "0+"),
            Field("resource_name", "string", "0+"),
            Field("configs", "[]", "0+", fields=[
                Field("name", "string", "0+"),
                Field("value", "string", "0+", nullable="0+"),
                Field("read_only", "bool", "0+"),
                Field("is_default", "bool", "0"),
                Field("config_source", "int8", "1+", default=-1),
                Field("is_sensitive", "bool", "0+"),
                Field("synonyms", "[]", "1+", fields=[
                    Field("name", "string", "1+"),
                    Field("value", "string", "1+", nullable="0+"),
                    Field("source", "int8", "1+"),
                ]),
                Field("config_type", "int8", "3+", default=0),
                Field("documentation", "string", "3+", nullable="0+"),
            ]),
        ]),
    ]),
)


# AlterConfigs: replace a resource's whole set of dynamic configs (a key not given reverts to its default).
ALTER_CONFIGS = Api(
    33, "AlterConfigs",
    request=Schema("AlterConfigsRequest", "0-2", "2+", [
        Field("resources", "[]", "0+", fields=[
            Field("resource_type", "int8", "0+"),
            Field("resource_name", "string", "0+"),
            Field("configs", "[]", "0+", fields=[
                Field("name", "string", "0+"),
                Field("value", "string", "0+", nullable="0+"),
            ]),
        ]),
        Field("validate_only", "bool", "0+"),
    ]),
    response=Schema("AlterConfigsResponse", "0-2", "2+", [
        Field("throttle_time_ms", "int32", "0+"),
        Field("responses", "[]", "0+", fields=[
            Field("error_code", "int16", "0+"),
            Field("error_message", "string", "0+", nullable="0+"),
            Field("resource_type", "int8", "0+"),
            Field("resource_name", "string", "0+"),
        ]),
    ]),
)


# IncrementalAlterConfigs (KIP-339): set, delete, append to or subtract from single configs.
INCREMENTAL_ALTER_CONFIGS = Api(
    44, "IncrementalAlterConfigs",
    request=Schema("IncrementalAlterConfigsRequest", "0-1", "1+", [
        Field("resources", "[]", "0+", fields=[
            Field("resource_type", "int8", "0+"),
            Field("resource_name", "string", "0+"),
            Field("configs", "[]", "0+", fields=[
                Field("name", "string", "0+"),
                Field("config_operation", "int8", "0+"),
                Field("value", "string", "0+", nullable="0+"),
            ]),
        ]),
        Field("validate_only", "bool", "0+"),
    ]),
    response=Schema("IncrementalAlterConfigsResponse", "0-1", "1+", [
        Field("throttle_time_ms", "int32", "0+"),
        Field("responses", "[]", "0+", fields=[
            Field("error_code", "int16", "0+"),
            Field("error_message", "string", "0+", nullable="0+"),
            Field("resource_type", "int8", "0+"),
            Field("resource_name", "string", "0+"),
        ]),
    ]),
)


# DeleteRecords: move partitions' log start offsets forward (to their leaders).
DELETE_RECORDS = Api(
    21, "DeleteRecords",
    request=Schema("DeleteRecordsRequest", "0-2", "2+", [
        Field("topics", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("partitions", "[]", "0+", fields=[
                Field("partition_index", "int32", "0+"),
                Field("offset", "int64", "0+"),
            ]),
        ]),
        Field("timeout_ms", "int32", "0+"),
    ]),
    response=Schema("DeleteRecordsResponse", "0-2", "2+", [
        Field("throttle_time_ms", "int32", "0+"),
        Field("topics", "[]", "0+", fields=[
            Field("name", "string", "0+"),
            Field("partitions", "[]", "0+", fields=[
                Field("partition_index", "int32", "0+"),
                Field("low_watermark", "int64", "0+"),
                Field("error_code", "int16", "0+"),
            ]),
        ]),
    ]),
)


# SaslHandshake: choose a SASL mechanism (v1: SaslAuthenticate frames follow).
SASL_HANDSHAKE = Api(
    17, "SaslHandshake",
    request=Schema("SaslHandshakeRequest", "0-1", "none", [
        Field("mechanism", "string", "0+"),
    ]),
    response=Schema("SaslHandshakeResponse", "0-1", "none", [
        Field("error_code", "int16", "0+"),
        Field("mechanisms", "[]string", "0+"),
    ]),
)


# SaslAuthenticate: one SASL exchange, wrapped in a Kafka frame.
SASL_AUTHENTICATE = Api(
    36, "SaslAuthenticate",
    request=Schema("SaslAuthenticateRequest", "0-2", "2+", [
        Field("auth_bytes", "bytes", "0+"),
    ]),
    response=Schema("SaslAuthenticateResponse", "0-2", "2+", [
        Field("error_code", "int16", "0+"),
        Field("error_message", "string", "0+", nullable="0+"),
        Field("auth_bytes", "bytes", "0+"),
        Field("session_lifetime_ms", "int64", "1+", default=0),
    ]),
)


# The "consumer" protocol's member metadata in JoinGroup: the body after the int16 version.
CONSUMER_PROTOCOL_SUBSCRIPTION = Schema("ConsumerProtocolSubscription", "0-3", "none", [
    Field("topics", "[]string", "0+"),
    Field("user_data", "bytes", "0+", nullable="0+", default=None),
    Field("owned_partitions", "[]", "1+", fields=[
        Field("topic", "string", "1+"),
        Field("partitions", "[]int32", "1+"),
    ]),
    Field("generation_id", "int32", "2+", default=-1),
    Field("rack_id", "string", "3+", nullable="3+", default=None),
])


# The "consumer" protocol's assignment in SyncGroup: the body after the int16 version.
CONSUMER_PROTOCOL_ASSIGNMENT = Schema("ConsumerProtocolAssignment", "0-3", "none", [
    Field("assigned_partitions", "[]", "0+", fields=[
        Field("topic", "string", "0+"),
        Field("partitions", "[]int32", "0+"),
    ]),
    Field("user_data", "bytes", "0+", nullable="0+", default=None),
])


APIS: dict[int, Api] = {api.key: api for api in (
    API_VERSIONS,
    METADATA,
    PRODUCE,
    FETCH,
    LIST_OFFSETS,
    FIND_COORDINATOR,
    JOIN_GROUP,
    SYNC_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    CREATE_TOPICS,
    DELETE_TOPICS,
    CREATE_PARTITIONS,
    INIT_PRODUCER_ID,
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    TXN_OFFSET_COMMIT,
    DESCRIBE_GROUPS,
    LIST_GROUPS,
    DELETE_GROUPS,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    DELETE_RECORDS,
    SASL_HANDSHAKE,
    SASL_AUTHENTICATE,
)}
