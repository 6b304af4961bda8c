"""Admin requests without Ray: topics, groups, offsets and the cluster, answered as typed results.

One `AdminClient` per `Admin` (driver/admin.py), which runs these coroutines on its loop thread
and bounds every call by `request.timeout.ms`. It calls the cluster client (wire/cluster.py)
for metadata, connections and group coordinators, wire/fetch.py for where partitions begin and
end and for the offsets an `earliest`/`latest`/timestamp target names, and wire/assignors.py to
read the consumer protocol's bytes. Topic requests go to any broker; group requests go to the
group's coordinator, which is found again (until the deadline) when it moves or is loading.

Changing a group's offsets and deleting a group first describe the group and refuse with
`GroupNotEmptyError` while it has members, as kafka-consumer-groups does: a Kafka broker
refuses both itself (NON_EMPTY_GROUP, or UNKNOWN_MEMBER_ID to a commit without a member id,
read as the same error), but tansu 0.6 deletes a group with members.

Results are small frozen dataclasses: `TopicDescription` (with `ConfigEntry`s),
`GroupListing`, `GroupDescription` (with `MemberDescription`s, their subscriptions and
assignments decoded), `PartitionOffsets` (committed, log start, end, lag),
`ClusterDescription`. What tansu 0.6 leaves out: DescribeGroups carries no member metadata,
assignment, client id or host (they read empty); ListGroups lists only groups that have
committed offsets, in state "Unknown" (`list_groups` asks their coordinator for the state), and
DescribeGroups describes any group id, existing or not, as Empty (`require_group` tells them
apart); DescribeConfigs lists only the configs a topic was created with or was altered to, and
no config of a broker; there is no CreatePartitions nor AlterConfigs (`UnsupportedVersionError`
naming the call, as tansu closes the connection on one); IncrementalAlterConfigs sets and
deletes; DeleteRecords is listed, but tansu closes the connection on it (a
`BrokerConnectionError` naming the call).

Configs: `alter_configs` is Kafka's legacy AlterConfigs, which replaces a topic's whole set of
dynamic configs (a key not given goes back to its default); `incremental_alter_configs`
(KIP-339) changes only the keys it names. `delete_records` asks each partition's leader.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from . import messages
from .assignors import decode_assignment, decode_subscription
from .cluster import BrokerInfo, Cluster, PartitionInfo
from .errors import (
    BY_NAME,
    BrokerConnectionError,
    BrokerError,
    GroupNotEmptyError,
    GroupNotFoundError,
    UnknownTopicError,
    UnsupportedVersionError,
    code_for,
)
from .fetch import log_bounds, resolve_offsets
from .group_coordinator import offset_fetch

log = logging.getLogger("raykafka.wire.admin")

T = TypeVar("T")


def _code(name: str) -> int:
    return BY_NAME[name].code


UNKNOWN_TOPIC_OR_PARTITION = _code("UNKNOWN_TOPIC_OR_PARTITION")
COORDINATOR_LOAD_IN_PROGRESS = _code("COORDINATOR_LOAD_IN_PROGRESS")
COORDINATOR_NOT_AVAILABLE = _code("COORDINATOR_NOT_AVAILABLE")
NOT_COORDINATOR = _code("NOT_COORDINATOR")
ILLEGAL_GENERATION = _code("ILLEGAL_GENERATION")
UNKNOWN_MEMBER_ID = _code("UNKNOWN_MEMBER_ID")
REBALANCE_IN_PROGRESS = _code("REBALANCE_IN_PROGRESS")
TOPIC_ALREADY_EXISTS = _code("TOPIC_ALREADY_EXISTS")
NON_EMPTY_GROUP = _code("NON_EMPTY_GROUP")
GROUP_ID_NOT_FOUND = _code("GROUP_ID_NOT_FOUND")

COORDINATOR_MOVED = frozenset({COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})
# a commit without a member id that meets one of these: the group has members (Kafka's answers)
GROUP_HAS_MEMBERS = frozenset({UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, NON_EMPTY_GROUP})

NOT_LEADER_OR_FOLLOWER = _code("NOT_LEADER_OR_FOLLOWER")
LEADER_MOVED = frozenset({NOT_LEADER_OR_FOLLOWER, _code("LEADER_NOT_AVAILABLE")})

# a config resource's type (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs), as Kafka's ConfigResource.Type
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
RESOURCE_NAMES = {TOPIC_RESOURCE: "topic", BROKER_RESOURCE: "broker"}
# IncrementalAlterConfigs' config_operation (KIP-339), as Kafka's AlterConfigOp.OpType
CONFIG_SET = 0
CONFIG_DELETE = 1
CONFIG_APPEND = 2  # to a list-valued config
CONFIG_SUBTRACT = 3  # from a list-valued config
END_OFFSET = -1  # DeleteRecords' offset meaning "the high watermark" (Kafka's DeleteRecordsRequest.HIGH_WATERMARK)
# DescribeConfigs' config_source, as Kafka's ConfigSource names them
CONFIG_SOURCES = {
    0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG",
}
# the states in which a group's offsets may be changed (kafka-consumer-groups' check)
INACTIVE_STATES = frozenset({"Empty", "Dead"})
# what a ListGroups answer carries when it names no state (before v4; tansu 0.6 always): the
# group's coordinator is asked instead, so that a listing and a description name the same state
UNSTATED = frozenset({"", "Unknown"})


# ---------------------------------------------------------------------------
# Results


class TopicPartition(NamedTuple):
    topic: str
    partition: int


Partitions = Mapping[str, Iterable[int] | None]
"""{topic: its partitions, or None for all of them}."""


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None  # None for a sensitive value
    source: str  # Kafka's ConfigSource name: DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG, ...
    read_only: bool = False
    sensitive: bool = False


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: Any  # a uuid.UUID (all zeros where the broker gives none)
    is_internal: bool
    partitions: tuple[PartitionInfo, ...]  # by partition number
    configs: Mapping[str, ConfigEntry]


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerInfo, ...]  # by node id


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str  # "consumer" for consumer groups
    state: str  # "" where the broker does not say (ListGroups before v4)


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    topics: tuple[str, ...]  # its subscription
    assignment: Mapping[str, tuple[int, ...]]  # topic -> partitions


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str  # Empty, PreparingRebalance, CompletingRebalance, Stable, Dead
    protocol_type: str
    protocol: str  # the agreed assignor (range, roundrobin, ...), "" while there is none
    members: tuple[MemberDescription, ...]
    coordinator: int  # the node id of the group's coordinator

    @property
    def inactive(self) -> bool:
        """No member: offsets may be changed and the group deleted."""
        return not self.members and self.state in INACTIVE_STATES


@dataclass(frozen=True)
class PartitionOffsets:
    topic: str
    partition: int
    committed: int | None  # the group's committed offset, None where it has none
    log_start: int | None  # the partition's first offset, None where the topic is gone
    end: int | None  # the high watermark: the offset the next record will get

    @property
    def lag(self) -> int | None:
        """Records between the committed offset and the end (None where either is unknown;
        negative, as kafka-consumer-groups shows it, where the commit is past the end)."""
        if self.committed is None or self.end is None:
            return None
        return self.end - self.committed


# ---------------------------------------------------------------------------
# The client


class AdminClient:
    """Admin requests over one `Cluster`; every method runs on the cluster's loop."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.timeout_ms: int = cluster.config["request.timeout.ms"]
        self.backoff = cluster.config["retry.backoff.ms"] / 1000

    # -- topics --------------------------------------------------------------

    async def create_topics(self, wanted: Mapping[str, int], replication_factor: int = 1,
                            config: Mapping[str, str] | None = None, exist_ok: bool = False) -> None:
        conn = await self.cluster.any_connection()
        body = {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (config or {}).items()]}
                       for name, partitions in wanted.items()],
            "timeout_ms": self.timeout_ms,
            "validate_only": False,
        }
        response = await conn.request(messages.CREATE_TOPICS, body)
        for topic in response.topics:
            if topic.error_code == TOPIC_ALREADY_EXISTS and exist_ok:
                continue
            if topic.error_code:
                raise BrokerError(topic.error_code, f"create topic {topic.name!r}", topic.get("error_message"))
        await self.cluster.refresh_metadata(list(wanted))

    async def delete_topics(self, names: list[str], missing_ok: bool = False) -> None:
        conn = await self.cluster.any_connection()
        version = conn.version_for(messages.DELETE_TOPICS)
        body: dict[str, Any] = {"timeout_ms": self.timeout_ms}
        if version >= 6:
            body["topics"] = [{"name": n} for n in names]
        else:
            body["topic_names"] = names
        response = await conn.request(messages.DELETE_TOPICS, body, version)
        for result in response.responses:
            if result.error_code == UNKNOWN_TOPIC_OR_PARTITION and missing_ok:
                continue
            if result.error_code:
                raise BrokerError(result.error_code, f"delete topic {result.name!r}", result.get("error_message"))

    async def create_partitions(self, topic: str, total: int) -> None:
        """Grow `topic` to `total` partitions, where the broker speaks CreatePartitions."""
        conn = await self.cluster.any_connection()
        try:
            version = conn.version_for(messages.CREATE_PARTITIONS)
        except UnsupportedVersionError as exc:
            raise UnsupportedVersionError(f"create partitions for {topic!r}: {exc}") from None
        body = {"topics": [{"name": topic, "count": total, "assignments": None}],
                "timeout_ms": self.timeout_ms, "validate_only": False}
        response = await conn.request(messages.CREATE_PARTITIONS, body, version)
        for result in response.results:
            if result.error_code:
                raise BrokerError(result.error_code, f"create partitions for {result.name!r}",
                                  result.get("error_message"))
        await self.cluster.refresh_metadata([topic])

    async def describe_topics(self, names: list[str] | None = None,
                              include_configs: bool = True) -> dict[str, TopicDescription]:
        """Partitions (leader, replicas, in-sync replicas) and configs of `names` (None: every
        topic that is not internal)."""
        metadata = await self.cluster.refresh_metadata(names)
        if names is None:
            names = sorted(n for n, t in metadata.topics.items()
                           if not t.is_internal and not n.startswith("__") and not t.error_code)
        for name in names:
            info = metadata.topics.get(name)
            if info is None or info.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopicError(f"topic {name!r} does not exist")
            if info.error_code:
                raise BrokerError(info.error_code, f"describe topic {name!r}")
        configs = await self.describe_configs(names) if include_configs and names else {}
        return {name: TopicDescription(name, metadata.topics[name].topic_id, metadata.topics[name].is_internal,
                                       tuple(p for _, p in sorted(metadata.topics[name].partitions.items())),
                                       configs.get(name, {}))
                for name in names}

    async def describe_configs(self, topics: list[str]) -> dict[str, dict[str, ConfigEntry]]:
        """Every config of each topic, as the broker reports it."""
        conn = await self.cluster.any_connection()
        return await self._describe_configs(conn, TOPIC_RESOURCE, topics)

    async def describe_broker_configs(self, broker_ids: list[int] | None = None) -> dict[int, dict[str, ConfigEntry]]:
        """Every config of each broker (None: every broker), each asked of the broker itself, as
        Kafka answers a broker's own configs only there."""
        if broker_ids is None:
            broker_ids = sorted((await self.cluster.refresh_metadata([])).brokers)

        async def ask(node_id: int) -> dict[str, ConfigEntry]:
            conn = await self.cluster.connection(node_id)
            return (await self._describe_configs(conn, BROKER_RESOURCE, [str(node_id)]))[str(node_id)]

        found = await asyncio.gather(*(ask(n) for n in broker_ids))
        return dict(zip(broker_ids, found, strict=True))

    async def _describe_configs(self, conn: Any, resource_type: int,
                                names: list[str]) -> dict[str, dict[str, ConfigEntry]]:
        version = conn.version_for(messages.DESCRIBE_CONFIGS)
        body = {"resources": [{"resource_type": resource_type, "resource_name": n, "configuration_keys": None}
                              for n in names],
                "include_synonyms": False, "include_documentation": False}
        response = await conn.request(messages.DESCRIBE_CONFIGS, body, version)
        out: dict[str, dict[str, ConfigEntry]] = {}
        for result in response.results:
            what = _resource(resource_type, result.resource_name)
            if result.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopicError(f"topic {result.resource_name!r} does not exist")
            if result.error_code:
                raise BrokerError(result.error_code, f"describe configs of {what}", result.error_message)
            out[result.resource_name] = {c.name: config_entry(c, version) for c in result.configs}
        return out

    async def alter_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        """Legacy AlterConfigs: the topic's dynamic configs become exactly `configs`; every key not
        given goes back to its default (use `incremental_alter_configs` to change one key)."""
        body = {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic,
                               "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                "validate_only": False}
        await self._alter(messages.ALTER_CONFIGS, body, f"alter configs of {_resource(TOPIC_RESOURCE, topic)}")

    async def incremental_alter_configs(self, topic: str, set: Mapping[str, str] | None = None,
                                        delete: Iterable[str] = (), append: Mapping[str, str] | None = None,
                                        subtract: Mapping[str, str] | None = None) -> None:
        """IncrementalAlterConfigs (KIP-339): set keys, delete them (back to their defaults), append
        to or subtract from list-valued ones; every key not named keeps its value."""
        ops = ([{"name": k, "config_operation": CONFIG_SET, "value": v} for k, v in (set or {}).items()]
               + [{"name": k, "config_operation": CONFIG_DELETE, "value": None} for k in delete]
               + [{"name": k, "config_operation": CONFIG_APPEND, "value": v} for k, v in (append or {}).items()]
               + [{"name": k, "config_operation": CONFIG_SUBTRACT, "value": v}
                  for k, v in (subtract or {}).items()])
        if not ops:
            return
        body = {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configs": ops}],
                "validate_only": False}
        await self._alter(messages.INCREMENTAL_ALTER_CONFIGS, body,
                          f"alter configs of {_resource(TOPIC_RESOURCE, topic)}")

    async def _alter(self, api: Any, body: Mapping[str, Any], what: str) -> None:
        """One AlterConfigs or IncrementalAlterConfigs request to any broker; a refusal names its
        code. Each topic is looked up first, as tansu 0.6 takes configs for a topic that does not
        exist (a Kafka broker answers UNKNOWN_TOPIC_OR_PARTITION)."""
        for resource in body["resources"]:
            try:
                await self.cluster.topic(resource["resource_name"], refresh=True)
            except UnknownTopicError as exc:
                raise UnknownTopicError(f"{what}: {exc}") from None
        conn = await self.cluster.any_connection()
        try:
            version = conn.version_for(api)
        except UnsupportedVersionError as exc:
            raise UnsupportedVersionError(f"{what}: {exc}") from None
        response = await conn.request(api, body, version)
        for result in response.responses:
            if result.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopicError(f"{what}: topic {result.resource_name!r} does not exist")
            if result.error_code:
                raise BrokerError(result.error_code, what, result.error_message)

    async def delete_records(self, before: Mapping[tuple[str, int], int]) -> dict[TopicPartition, int]:
        """DeleteRecords: each partition's log start moves up to its offset (`END_OFFSET`, -1: the
        high watermark), each asked of the partition's leader; returns each new low watermark. A
        partition's refusal (OFFSET_OUT_OF_RANGE past the end, ...) raises `BrokerError` naming the
        partition; a leader that moved is found again (until `request.timeout.ms`)."""
        wanted = {TopicPartition(*tp): offset for tp, offset in before.items()}
        done: dict[TopicPartition, int] = {}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_ms / 1000
        refresh = False
        while True:
            by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
            pending = sorted(wanted.keys() - done.keys())
            topics = {t: await self.cluster.topic(t, refresh=refresh) for t in dict.fromkeys(tp.topic for tp in pending)}
            for tp in pending:
                info = topics[tp.topic]
                if tp.partition not in info.partitions:
                    raise BrokerError(UNKNOWN_TOPIC_OR_PARTITION, f"delete records of {tp.topic}/{tp.partition}")
                by_leader[info.partitions[tp.partition].leader].append(tp)
            answers = await asyncio.gather(*(self._delete_records_on(leader, {tp: wanted[tp] for tp in tps})
                                             for leader, tps in by_leader.items()))
            moved: list[TopicPartition] = []
            for answer in answers:
                for tp, (code, low_watermark) in answer.items():
                    if code in LEADER_MOVED:
                        moved.append(tp)
                    elif code:
                        raise BrokerError(code, f"delete records of {tp.topic}/{tp.partition} before "
                                                f"{wanted[tp]}")
                    else:
                        done[tp] = low_watermark
            if not moved:
                return {tp: done[tp] for tp in sorted(done)}
            if loop.time() + self.backoff > deadline:
                tp = moved[0]
                raise BrokerError(NOT_LEADER_OR_FOLLOWER, f"delete records of {tp.topic}/{tp.partition}")
            log.info("admin/delete-records leader moved for %s", moved)
            refresh = True
            await asyncio.sleep(self.backoff)

    async def _delete_records_on(self, leader: int, before: Mapping[TopicPartition, int]
                                 ) -> dict[TopicPartition, tuple[int, int]]:
        """One DeleteRecords to `leader`: {partition: (error code, low watermark)}."""
        conn = await self.cluster.connection(leader)
        try:
            version = conn.version_for(messages.DELETE_RECORDS)
        except UnsupportedVersionError as exc:
            raise UnsupportedVersionError(f"delete records: {exc}") from None
        by_topic: dict[str, list[dict[str, int]]] = defaultdict(list)
        for tp, offset in sorted(before.items()):
            by_topic[tp.topic].append({"partition_index": tp.partition, "offset": offset})
        body = {"topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                "timeout_ms": self.timeout_ms}
        try:
            response = await conn.request(messages.DELETE_RECORDS, body, version)
        except BrokerConnectionError as exc:  # tansu 0.6 lists DeleteRecords, and hangs up on one
            raise BrokerConnectionError(f"delete records on broker {leader}: {exc}") from None
        return {TopicPartition(t.name, p.partition_index): (p.error_code, p.low_watermark)
                for t in response.topics for p in t.partitions}

    # -- the cluster -----------------------------------------------------------

    async def describe_cluster(self) -> ClusterDescription:
        metadata = await self.cluster.refresh_metadata([])
        return ClusterDescription(metadata.cluster_id, metadata.controller_id,
                                  tuple(b for _, b in sorted(metadata.brokers.items())))

    # -- groups ----------------------------------------------------------------

    async def list_groups(self) -> list[GroupListing]:
        """The groups every broker coordinates, by group id."""
        metadata = await self.cluster.refresh_metadata([])

        async def ask(node_id: int) -> list[GroupListing]:
            conn = await self.cluster.connection(node_id)
            response = await conn.request(messages.LIST_GROUPS, {"states_filter": [], "types_filter": []})
            if response.error_code:
                raise BrokerError(response.error_code, f"list groups on broker {node_id}")
            return [GroupListing(g.group_id, g.protocol_type, g.group_state) for g in response.groups]

        found = await asyncio.gather(*(ask(node_id) for node_id in metadata.brokers))
        unique = {g.group_id: g for listings in found for g in listings}
        unstated = [g.group_id for g in unique.values() if g.state in UNSTATED]
        for group_id, described in (await self.describe_groups(unstated)).items():
            unique[group_id] = GroupListing(group_id, unique[group_id].protocol_type, described.state)
        return [unique[g] for g in sorted(unique)]

    async def require_group(self, group_id: str) -> GroupDescription:
        """The group's description; `GroupNotFoundError` if it does not exist: its coordinator
        describes it as Dead, or as Empty and no broker lists it (a group is listed while it holds
        committed offsets)."""
        group = await self._describe_group(group_id)
        exists = bool(group.members) or group.state not in INACTIVE_STATES or (
            group.state != "Dead" and group_id in {g.group_id for g in await self.list_groups()})
        if not exists:
            raise GroupNotFoundError(GROUP_ID_NOT_FOUND, f"group {group_id!r}")
        return group

    async def describe_groups(self, group_ids: list[str]) -> dict[str, GroupDescription]:
        """State, assignor and members (client, subscription, assignment) of each group."""
        described = await asyncio.gather(*(self._describe_group(g) for g in group_ids))
        return {d.group_id: d for d in described}

    async def _describe_group(self, group_id: str) -> GroupDescription:
        async def describe(conn: Any) -> GroupDescription:
            response = await conn.request(messages.DESCRIBE_GROUPS,
                                          {"groups": [group_id], "include_authorized_operations": False})
            group = response.groups[0]
            if group.error_code:
                raise BrokerError(group.error_code, f"describe group {group_id!r}")
            consumer = group.protocol_type in ("consumer", "")
            return GroupDescription(group_id, group.group_state, group.protocol_type, group.protocol_data,
                                    tuple(member_description(m, consumer) for m in group.members), conn.node_id)

        return await self._on_coordinator(group_id, describe)

    async def delete_groups(self, group_ids: list[str], missing_ok: bool = False) -> None:
        """Delete groups and their committed offsets; refused while a group has members."""
        for group_id in group_ids:
            await self._require_inactive(group_id, "delete")
        if not missing_ok:  # as Kafka answers GROUP_ID_NOT_FOUND, where tansu says nothing
            for group_id in group_ids:
                await self.require_group(group_id)

        async def delete(group_id: str) -> None:
            async def ask(conn: Any) -> None:
                response = await conn.request(messages.DELETE_GROUPS, {"groups_names": [group_id]})
                for result in response.results:
                    code = result.error_code
                    if code == GROUP_ID_NOT_FOUND and missing_ok:
                        continue
                    if code == GROUP_ID_NOT_FOUND:
                        raise GroupNotFoundError(code, f"delete group {result.group_id!r}")
                    if code == NON_EMPTY_GROUP:
                        raise GroupNotEmptyError(code, f"delete group {result.group_id!r}")
                    if code:
                        raise BrokerError(code, f"delete group {result.group_id!r}")

            await self._on_coordinator(group_id, ask)

        await asyncio.gather(*(delete(g) for g in group_ids))

    # -- offsets ---------------------------------------------------------------

    async def list_offsets(self, topic: str, partitions: list[int] | None, at: Any) -> dict[int, int]:
        """Each partition's offset at `at`: earliest, latest (the high watermark) or {"timestamp": ms}
        (the first record at or after it; the end where there is none)."""
        info = await self.cluster.topic(topic)
        ps = sorted(info.partitions) if partitions is None else list(partitions)
        return await resolve_offsets(self.cluster, topic, ps, at)

    async def committed_offsets(self, group_id: str, partitions: Partitions | None = None
                                ) -> dict[TopicPartition, int]:
        """The group's committed offsets in `partitions` (None: wherever it has any); a partition
        without one is left out."""
        wanted = None if partitions is None else await self._partitions(partitions)

        async def fetch(conn: Any) -> dict[TopicPartition, int]:
            found = await offset_fetch(conn, group_id, wanted)
            return {TopicPartition(*tp): offset for tp, offset in found.items() if offset >= 0}

        return await self._on_coordinator(group_id, fetch)

    async def group_offsets(self, group_id: str, partitions: Partitions | None = None) -> list[PartitionOffsets]:
        """Committed offset, log start, end and lag of each of `partitions` (None: every partition
        the group has committed offsets in), by topic and partition."""
        if partitions is None:
            committed = await self.committed_offsets(group_id)
            wanted = _by_topic(committed)
        else:
            wanted = await self._partitions(partitions)
            committed = await self.committed_offsets(group_id, wanted)
        out = []
        for topic, ps in sorted(wanted.items()):
            try:
                begins, ends = await log_bounds(self.cluster, topic, ps)
            except UnknownTopicError:  # offsets left behind by a deleted topic
                begins, ends = {}, {}
            out += [PartitionOffsets(topic, p, committed.get(TopicPartition(topic, p)), begins.get(p), ends.get(p))
                    for p in ps]
        return out

    async def reset_offsets(self, group_id: str, partitions: Partitions | None, to: Any,
                            dry_run: bool = False) -> dict[TopicPartition, int]:
        """Move the group's offsets in `partitions` (None: wherever it has committed ones) to `to`:
        earliest, latest, {"timestamp": ms}, or an offset (clamped to the partition's log, as
        kafka-consumer-groups does; a negative one counts back from the end). Refused while the
        group has members. Returns the new offsets (not committed when `dry_run`)."""
        await self._require_inactive(group_id, "reset offsets of")
        if partitions is None:
            wanted = _by_topic(await self.committed_offsets(group_id))
        else:
            wanted = await self._partitions(partitions)
        targets: dict[TopicPartition, int] = {}
        for topic, ps in sorted(wanted.items()):
            found = await resolve_offsets(self.cluster, topic, ps, to)
            if isinstance(to, int) and not isinstance(to, bool) and to >= 0:
                begins, ends = await log_bounds(self.cluster, topic, ps)
                found = {p: min(max(o, begins[p]), ends[p]) for p, o in found.items()}
            targets.update({TopicPartition(topic, p): o for p, o in sorted(found.items())})
        if not dry_run:
            await self._commit(group_id, targets)
        return targets

    async def alter_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit these offsets for the group, as given; refused while the group has members."""
        await self._require_inactive(group_id, "alter offsets of")
        await self._commit(group_id, {TopicPartition(*tp): o for tp, o in offsets.items()})

    async def _commit(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """OffsetCommit as no member (generation -1, no member id), which a broker takes only
        from outside an empty group."""
        if not offsets:
            return
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic[topic].append({"partition_index": partition, "committed_offset": offset,
                                    "committed_leader_epoch": -1, "committed_metadata": None})
        body = {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        async def commit(conn: Any) -> None:
            response = await conn.request(messages.OFFSET_COMMIT, body)
            for t in response.topics:
                for p in t.partitions:
                    code = p.error_code
                    if code in GROUP_HAS_MEMBERS:
                        raise GroupNotEmptyError(NON_EMPTY_GROUP, f"commit offsets of group {group_id!r}",
                                                 f"the broker answered {code_for(code).name}: the group has members")
                    if code:
                        raise BrokerError(code, f"commit offsets of group {group_id!r} in {t.name}/{p.partition_index}")

        await self._on_coordinator(group_id, commit)

    # -- utilities ---------------------------------------------------------------

    async def _partitions(self, partitions: Partitions) -> dict[str, list[int]]:
        """{topic: partitions}, every partition of a topic given without them (an unknown topic
        raises `UnknownTopicError`)."""
        return {t: sorted((await self.cluster.topic(t)).partitions) if ps is None else sorted(ps)
                for t, ps in partitions.items()}

    async def _require_inactive(self, group_id: str, action: str) -> GroupDescription:
        group = await self._describe_group(group_id)
        if not group.inactive:
            raise GroupNotEmptyError(
                NON_EMPTY_GROUP, f"{action} group {group_id!r}",
                f"the group is {group.state} with {len(group.members)} member(s); stop its consumers first")
        return group

    async def _on_coordinator(self, group_id: str, call: Callable[[Any], Awaitable[T]]) -> T:
        """`call(connection)` on the group's coordinator; while the coordinator moves, is loading
        or drops the connection, find it again after `retry.backoff.ms`, until `request.timeout.ms`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_ms / 1000
        while True:
            try:
                conn = await self.cluster.coordinator(group_id)
                return await call(conn)
            except BrokerError as exc:
                if exc.code not in COORDINATOR_MOVED or loop.time() + self.backoff > deadline:
                    raise
                error: Exception = exc
            except BrokerConnectionError as exc:
                if loop.time() + self.backoff > deadline:
                    raise
                error = exc
            log.info("admin/group/%s coordinator retry (%s)", group_id, error)
            self.cluster.forget_coordinator(group_id)
            await asyncio.sleep(self.backoff)


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for tp in sorted(partitions):
        out[tp.topic].append(tp.partition)
    return dict(out)


def _resource(resource_type: int, name: str) -> str:
    """`topic 'events'`, `broker 1`: a config resource as an error names it."""
    kind = RESOURCE_NAMES.get(resource_type, f"resource type {resource_type}")
    return f"{kind} {name}" if resource_type == BROKER_RESOURCE else f"{kind} {name!r}"


def config_entry(c: Any, version: int) -> ConfigEntry:
    if version == 0:
        source = "DEFAULT_CONFIG" if c.is_default else "UNKNOWN"
    else:
        source = CONFIG_SOURCES.get(c.config_source, "UNKNOWN")
    return ConfigEntry(c.name, c.value, source, c.read_only, c.is_sensitive)


def member_description(m: Any, consumer: bool) -> MemberDescription:
    """A member as DescribeGroups reports it; the consumer protocol's bytes decoded (a broker may
    send none: tansu 0.6 does not)."""
    topics: tuple[str, ...] = ()
    assignment: dict[str, tuple[int, ...]] = {}
    if consumer:
        if m.member_metadata:
            topics = tuple(decode_subscription(m.member_metadata).topics)
        assignment = {t: tuple(ps) for t, ps in sorted(decode_assignment(m.member_assignment).partitions.items())}
    return MemberDescription(m.member_id, m.get("group_instance_id"), m.client_id, m.client_host, topics, assignment)
