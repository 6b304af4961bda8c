"""`Admin`: topics, consumer groups, their offsets and the cluster, from a driver program (no Ray).

    with Admin({"bootstrap.servers": "broker:9092"}) as admin:
        admin.describe_group("g")                    # GroupDescription: state, members, assignments
        admin.group_offsets("g", ["events"])         # [PartitionOffsets(committed, log_start, end, lag)]
        admin.reset_offsets("g", ["events"], "earliest")   # refused while the group has members
        admin.incremental_alter_configs("events", set={"retention.ms": "3600000"}, delete=["cleanup.policy"])
        admin.delete_records({("events", 0): 100})   # {TopicPartition: new low watermark}

Each call runs one coroutine of `wire.admin.AdminClient` on the client's own asyncio loop
thread and returns its typed result; it ends within `request.timeout.ms` (a
`RequestTimedOutError` naming the call otherwise). A broker's refusal raises a `BrokerError`
naming the code; an unknown topic `UnknownTopicError`; a group with members, where it must have
none, `GroupNotEmptyError`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import weakref
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from ..wire.admin import (
    AdminClient,
    ClusterDescription,
    ConfigEntry,
    GroupDescription,
    GroupListing,
    PartitionOffsets,
    TopicDescription,
    TopicPartition,
)
from ..wire.cluster import Cluster, Metadata
from ..wire.config import parse_config
from ..wire.errors import RequestTimedOutError
from ..wire.loop import LoopThread

T = TypeVar("T")
PartitionSpec = str | Iterable[str] | Mapping[str, Iterable[int] | None]
"""A topic, topics (all their partitions), or {topic: partitions or None for all}."""


def _bounded(loop: LoopThread, what: str, coro: Coroutine[Any, Any, T], timeout: float) -> T:
    """Run `coro` on `loop`, cancelled after `timeout` seconds (`request.timeout.ms`)."""
    async def bounded() -> T:
        try:
            return await asyncio.wait_for(coro, timeout)
        except TimeoutError:
            raise RequestTimedOutError(f"Admin {what}: no answer within request.timeout.ms "
                                       f"({timeout:.1f}s)") from None

    future = loop.submit(bounded())
    try:
        return future.result(timeout + 5)  # a margin over the bound above, for a loop that never runs it
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise RequestTimedOutError(f"Admin {what}: the client's loop did not answer") from None


def _close(loop: LoopThread, cluster: Cluster, timeout: float) -> None:
    """Close `cluster`'s connections on `loop`, then stop the loop."""
    try:
        _bounded(loop, "close", cluster.close(), timeout)
    finally:
        loop.stop()


class Admin:
    """Create, describe, grow and delete topics; read and change their configs (and read the
    brokers'); delete a partition's records below an offset; list, describe and delete groups; read a group's
    offsets and lag, reset or alter them while it is empty; describe the cluster."""

    def __init__(self, config: Mapping[str, Any] | str):
        if isinstance(config, str):
            config = {"bootstrap.servers": config}
        self.config = parse_config(config, role="admin")
        self._loop = LoopThread("raykafka-admin")
        self.cluster = Cluster(self.config)
        self.client = AdminClient(self.cluster)
        self._timeout = self.config["request.timeout.ms"] / 1000
        # closes the connections and stops the loop once: by close(), or when an Admin never
        # closed is collected or the interpreter exits (else its read loops end as pending tasks
        # destroyed, each printing "Task was destroyed but it is pending!")
        self._closer = weakref.finalize(self, _close, self._loop, self.cluster, self._timeout)

    def _run(self, what: str, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop, cancelled after `request.timeout.ms`."""
        return _bounded(self._loop, what, coro, self._timeout)

    # -- topics ------------------------------------------------------------

    def create_topics(self, topics: Mapping[str, int] | Iterable[str], num_partitions: int = 1,
                      replication_factor: int = 1, config: Mapping[str, str] | None = None,
                      exist_ok: bool = False) -> None:
        """Create topics: a `{name: partitions}` mapping or names that all get `num_partitions`."""
        wanted = dict(topics) if isinstance(topics, Mapping) else {t: num_partitions for t in topics}
        self._run("create_topics", self.client.create_topics(wanted, replication_factor, dict(config or {}),
                                                             exist_ok))

    def delete_topics(self, names: Iterable[str], missing_ok: bool = False) -> None:
        self._run("delete_topics", self.client.delete_topics(list(names), missing_ok))

    def create_partitions(self, topic: str, total: int) -> None:
        """Grow `topic` to `total` partitions (`UnsupportedVersionError` where the broker cannot)."""
        self._run("create_partitions", self.client.create_partitions(topic, total))

    def describe_topics(self, names: Iterable[str] | str | None = None,
                        include_configs: bool = True) -> dict[str, TopicDescription]:
        """Partitions, leaders, replicas and configs of each topic (None: every topic not internal)."""
        wanted = None if names is None else [names] if isinstance(names, str) else list(names)
        return self._run("describe_topics", self.client.describe_topics(wanted, include_configs))

    def describe_configs(self, topics: Iterable[str] | str) -> dict[str, dict[str, ConfigEntry]]:
        """Every config of each topic: {topic: {name: ConfigEntry(value, source, ...)}}."""
        wanted = [topics] if isinstance(topics, str) else list(topics)
        return self._run("describe_configs", self.client.describe_configs(wanted))

    def describe_broker_configs(self, broker_ids: Iterable[int] | None = None) -> dict[int, dict[str, ConfigEntry]]:
        """Every config of each broker (None: every broker): {node id: {name: ConfigEntry}}."""
        wanted = None if broker_ids is None else list(broker_ids)
        return self._run("describe_broker_configs", self.client.describe_broker_configs(wanted))

    def alter_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        """Legacy AlterConfigs: the topic's dynamic configs become exactly `configs`, and every key
        not given goes back to its default. To change some keys only, `incremental_alter_configs`."""
        self._run("alter_configs", self.client.alter_configs(topic, dict(configs)))

    def incremental_alter_configs(self, topic: str, set: Mapping[str, str] | None = None,
                                  delete: Iterable[str] = (), append: Mapping[str, str] | None = None,
                                  subtract: Mapping[str, str] | None = None) -> None:
        """Set keys, delete keys (back to their defaults), append to or subtract from list-valued
        keys (KIP-339); the other keys keep their values."""
        self._run("incremental_alter_configs", self.client.incremental_alter_configs(
            topic, dict(set or {}), list(delete), dict(append or {}), dict(subtract or {})))

    def delete_records(self, before: Mapping[tuple[str, int], int]) -> dict[TopicPartition, int]:
        """Delete each partition's records below its offset (-1: all it holds): its log start
        moves there. Returns each partition's new low watermark; a partition's refusal raises
        `BrokerError` naming it (OFFSET_OUT_OF_RANGE for an offset past the end)."""
        return self._run("delete_records", self.client.delete_records(before))

    def list_topics(self) -> dict[str, int]:
        """Every topic that is not internal, and its partition count."""
        described = self._run("list_topics", self.client.describe_topics(None, include_configs=False))
        return {name: len(d.partitions) for name, d in described.items()}

    def metadata(self, topics: Iterable[str] | None = None) -> Metadata:
        return self._run("metadata", self.cluster.refresh_metadata(None if topics is None else list(topics)))

    # -- the cluster -------------------------------------------------------

    def describe_cluster(self) -> ClusterDescription:
        return self._run("describe_cluster", self.client.describe_cluster())

    # -- groups ------------------------------------------------------------

    def list_groups(self) -> list[GroupListing]:
        return self._run("list_groups", self.client.list_groups())

    def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        return self._run("describe_groups", self.client.describe_groups(list(group_ids)))

    def describe_group(self, group_id: str) -> GroupDescription:
        return self.describe_groups([group_id])[group_id]

    def require_group(self, group_id: str) -> GroupDescription:
        """The group's description; `GroupNotFoundError` if the group does not exist."""
        return self._run("require_group", self.client.require_group(group_id))

    def delete_groups(self, group_ids: Iterable[str] | str, missing_ok: bool = False) -> None:
        """Delete groups with their committed offsets; `GroupNotEmptyError` while one has members,
        `GroupNotFoundError` for one that does not exist unless `missing_ok`."""
        ids = [group_ids] if isinstance(group_ids, str) else list(group_ids)
        self._run("delete_groups", self.client.delete_groups(ids, missing_ok))

    # -- offsets -----------------------------------------------------------

    def list_offsets(self, topic: str, at: Any = "latest", partitions: Iterable[int] | None = None) -> dict[int, int]:
        """Each partition's offset at `at`: "earliest", "latest" (the high watermark) or
        {"timestamp": ms} (the first record at or after it, else the end)."""
        return self._run("list_offsets", self.client.list_offsets(
            topic, None if partitions is None else list(partitions), at))

    def committed_offsets(self, group_id: str, partitions: PartitionSpec | None = None) -> dict[TopicPartition, int]:
        """The group's committed offsets (None: wherever it has any)."""
        wanted = None if partitions is None else self._resolve_partitions(partitions)
        return self._run("committed_offsets", self.client.committed_offsets(group_id, wanted))

    def group_offsets(self, group_id: str, partitions: PartitionSpec | None = None) -> list[PartitionOffsets]:
        """Committed offset, log start, end and lag of each partition (None: every partition the
        group has committed offsets in), by topic and partition."""
        wanted = None if partitions is None else self._resolve_partitions(partitions)
        return self._run("group_offsets", self.client.group_offsets(group_id, wanted))

    def reset_offsets(self, group_id: str, partitions: PartitionSpec | None, to: Any,
                      dry_run: bool = False) -> dict[TopicPartition, int]:
        """Move the group's offsets to `to`: "earliest", "latest", {"timestamp": ms} or an offset
        (clamped to each partition's log; negative: back from the end). `partitions` None: wherever
        the group has committed offsets. `GroupNotEmptyError` while the group has members.
        Returns the new offsets; `dry_run` commits nothing."""
        wanted = None if partitions is None else self._resolve_partitions(partitions)
        return self._run("reset_offsets", self.client.reset_offsets(group_id, wanted, to, dry_run))

    def alter_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit `{(topic, partition): offset}` for the group as given; `GroupNotEmptyError` while
        it has members."""
        self._run("alter_offsets", self.client.alter_offsets(group_id, offsets))

    @staticmethod
    def _resolve_partitions(partitions: PartitionSpec) -> dict[str, list[int] | None]:
        """{topic: partitions or None for all} from a topic, topics, or such a mapping."""
        if isinstance(partitions, str):
            return {partitions: None}
        if isinstance(partitions, Mapping):
            return {t: None if ps is None else sorted(ps) for t, ps in partitions.items()}
        return dict.fromkeys(partitions)

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        self._closer()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
