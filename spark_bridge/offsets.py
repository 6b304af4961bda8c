"""Offset ranges as Spark's Kafka source states them, resolved against the cluster.

`startingOffsets` / `endingOffsets` are "earliest", "latest", or per-partition JSON such as
`{"topicA": {"0": 23, "1": -2}, "topicB": {"0": -1}}` where -2 means earliest and -1 latest.
`startingOffsetsByTimestamp` / `endingOffsetsByTimestamp` are per-partition JSON of timestamps
(ms): the first offset whose record is stamped at or after it (ListOffsets by timestamp), and
take precedence over the offsets. `subscribePattern` subscribes to every topic whose whole name
matches the regular expression. `failOnDataLoss` (true by default, as in Spark) decides what a
range outside its partition's log is: a `DataLossError`, or (false) a warning and the part of
the range still in the log.
A range is resolved once, on the driver, into fixed (topic, partition, start, end) tuples,
so every reader reads exactly that range however the topic grows meanwhile. Called by
`reader.read_dataset`, the Ray Data datasource and the stream's planner (`check_range`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..wire.cluster import Cluster
from ..wire.config import parse_config
from ..wire.errors import ConfigError, DataLossError
from ..wire.fetch import EARLIEST, LATEST, log_bounds, resolve_offsets
from ..wire.loop import LoopThread
from ..wire.subscription import compile_pattern, external_topics, matching_topics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionRange:
    """Offsets [start, end) of one partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return max(0, self.end - self.start)


def parse_offsets(offsets: Any, name: str) -> str | dict[str, dict[int, int]]:
    """"earliest", "latest", or {topic: {partition: offset}} from a string or a mapping."""
    if isinstance(offsets, str) and offsets.strip().lower() in ("earliest", "latest"):
        return offsets.strip().lower()
    if isinstance(offsets, str):
        try:
            offsets = json.loads(offsets)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{name}: expected earliest, latest or per-partition JSON; got {offsets!r}") from exc
    if not isinstance(offsets, Mapping):
        raise ValueError(f"{name}: expected earliest, latest or per-partition JSON; got {offsets!r}")
    out: dict[str, dict[int, int]] = {}
    for topic, partitions in offsets.items():
        if not isinstance(partitions, Mapping):
            raise ValueError(f"{name}: {topic!r} must map partitions to offsets")
        try:
            out[topic] = {int(p): int(o) for p, o in partitions.items()}
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name}: {topic!r} has a non-integer partition or offset") from exc
    return out


def offsets_json(offsets: Mapping[tuple[str, int], int]) -> str:
    """Spark's per-partition JSON for {(topic, partition): offset}."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(out)


def subscribed_topics(names: Iterable[str] | str | None, pattern: str | None, existing: Iterable[str]) -> list[str]:
    """The topics a read subscribes to: `names`, or every one of `existing` whose whole name
    matches `pattern` (Spark's `subscribePattern`, a Java regex matched whole: wire/subscription.py's rule)."""
    if (names is None) == (pattern is None):
        raise ConfigError("give topics or subscribePattern, exactly one of them")
    if names is not None:
        return [names] if isinstance(names, str) else list(names)
    return matching_topics(compile_pattern(pattern or "", "subscribePattern"), existing)


def check_range(topic: str, partition: int, start: int, end: int, log_start: int, log_end: int,
                fail_on_data_loss: bool) -> PartitionRange:
    """[start, end) of one partition whose log holds [log_start, log_end). Records below the log
    start are gone (deleted or compacted), offsets past the end are not there (the log was
    truncated or the topic re-created): with `fail_on_data_loss` a `DataLossError` naming the
    partition, the range and the log; else a warning and the part of the range in the log
    (possibly empty), as Spark's source does."""
    if log_start <= start <= end <= log_end:
        return PartitionRange(topic, partition, start, end)
    lost = (f"{topic}/{partition}: range [{start}, {end}) is outside the partition's log [{log_start}, {log_end})"
            f"{': records below ' + str(log_start) + ' were deleted' if start < log_start else ''}")
    if fail_on_data_loss:
        raise DataLossError(f"{lost} (failOnDataLoss=true; set it false to skip what is gone)")
    log.warning("offsets/%s/%d data loss, skipped: %s", topic, partition, lost)
    clamped_start = min(max(start, log_start), log_end)
    return PartitionRange(topic, partition, clamped_start, max(clamped_start, min(end, log_end)))


def resolve_ranges(config: Mapping[str, Any], topics: Iterable[str] | str | None, starting_offsets: Any = "earliest",
                   ending_offsets: Any = "latest", *, starting_offsets_by_timestamp: Any = None,
                   ending_offsets_by_timestamp: Any = None, starting_offsets_by_timestamp_strategy: str = "error",
                   subscribe_pattern: str | None = None, fail_on_data_loss: bool = True) -> list[PartitionRange]:
    """Every partition's fixed range, as Spark's batch Kafka source reads it."""
    start_spec = parse_offsets(starting_offsets, "startingOffsets")
    end_spec = parse_offsets(ending_offsets, "endingOffsets")
    start_stamps = _stamps(starting_offsets_by_timestamp, "startingOffsetsByTimestamp")
    end_stamps = _stamps(ending_offsets_by_timestamp, "endingOffsetsByTimestamp")
    if starting_offsets_by_timestamp_strategy not in ("error", "latest"):
        raise ConfigError("startingOffsetsByTimestampStrategy: expected error or latest, got "
                          f"{starting_offsets_by_timestamp_strategy!r}")
    if end_spec == "earliest":
        raise ValueError("endingOffsets: earliest is not allowed (as in Spark)")
    if start_spec == "latest":
        raise ValueError("startingOffsets: latest is not allowed for a batch read (as in Spark)")
    if isinstance(end_spec, dict):
        for topic, partitions in end_spec.items():
            if any(o == EARLIEST for o in partitions.values()):
                raise ValueError(f"endingOffsets: {topic} uses -2 (earliest), which Spark does not allow")
    plan = _Plan(start_spec, end_spec, start_stamps, end_stamps, starting_offsets_by_timestamp_strategy,
                 fail_on_data_loss)
    # On a loop thread of its own: the caller may be inside a running loop (a Jupyter cell).
    loop = LoopThread("raykafka-offsets")
    try:
        return loop.run(_resolve(parse_config(config), topics, subscribe_pattern, plan))
    finally:
        loop.stop()


@dataclass(frozen=True)
class _Plan:
    """What a read asks for, parsed: offsets and timestamps per partition, and the loss policy."""

    start: Any
    end: Any
    start_stamps: dict[str, dict[int, int]] | None
    end_stamps: dict[str, dict[int, int]] | None
    start_stamp_strategy: str
    fail_on_data_loss: bool

    def check_topics(self, names: list[str]) -> None:
        specs = (("startingOffsets", self.start), ("endingOffsets", self.end),
                 ("startingOffsetsByTimestamp", self.start_stamps), ("endingOffsetsByTimestamp", self.end_stamps))
        for label, spec in specs:
            if isinstance(spec, dict) and set(spec) - set(names):
                raise ValueError(f"{label}: names topics not subscribed: {sorted(set(spec) - set(names))}")


def _stamps(spec: Any, name: str) -> dict[str, dict[int, int]] | None:
    """{topic: {partition: timestamp ms}} from JSON or a mapping; None when not given."""
    if spec is None:
        return None
    parsed = parse_offsets(spec, name)
    if not isinstance(parsed, dict):
        raise ConfigError(f"{name}: expected per-partition JSON of timestamps, got {spec!r}")
    return parsed


async def _resolve(config: Any, topics: Iterable[str] | str | None, pattern: str | None,
                   plan: _Plan) -> list[PartitionRange]:
    cluster = Cluster(config)
    try:
        existing: list[str] = []
        if pattern is not None:
            existing = external_topics((await cluster.refresh_metadata(None)).topics)
        names = subscribed_topics(topics, pattern, existing)
        plan.check_topics(names)
        ranges = []
        for topic in names:
            info = await cluster.topic(topic)
            partitions = sorted(info.partitions)
            earliest, latest = await log_bounds(cluster, topic, partitions)
            starts = {p: pick_offset(plan.start, topic, p, earliest[p], latest[p], earliest[p]) for p in partitions}
            ends = {p: pick_offset(plan.end, topic, p, earliest[p], latest[p], latest[p]) for p in partitions}
            if plan.start_stamps and topic in plan.start_stamps:
                found = await _by_timestamp(cluster, topic, partitions, plan.start_stamps[topic],
                                            "startingOffsetsByTimestamp")
                for p, offset in found.items():
                    if offset >= latest[p] and plan.start_stamp_strategy == "error":
                        raise ConfigError(
                            f"startingOffsetsByTimestamp: {topic}/{p} has no record at or after "
                            f"{plan.start_stamps[topic][p]} ms (startingOffsetsByTimestampStrategy=latest "
                            "starts such a partition at its end)")
                starts.update(found)
            if plan.end_stamps and topic in plan.end_stamps:  # no record at or after: up to the end
                ends.update(await _by_timestamp(cluster, topic, partitions, plan.end_stamps[topic],
                                                "endingOffsetsByTimestamp"))
            for p in partitions:
                ranges.append(check_range(topic, p, starts[p], max(starts[p], ends[p]), earliest[p], latest[p],
                                          plan.fail_on_data_loss))
        return ranges
    finally:
        await cluster.close()


async def _by_timestamp(cluster: Cluster, topic: str, partitions: list[int], stamps: dict[int, int],
                        name: str) -> dict[int, int]:
    """Each partition's first offset stamped at or after its timestamp (its end where none is)."""
    missing = set(partitions) - set(stamps)
    if missing:  # as in Spark: a topic given must list all its partitions
        raise ConfigError(f"{name}: {topic} does not name partition(s) {sorted(missing)}")
    by_stamp: dict[int, list[int]] = {}
    for p in partitions:
        by_stamp.setdefault(stamps[p], []).append(p)
    found: dict[int, int] = {}
    for stamp, ps in by_stamp.items():
        found.update(await resolve_offsets(cluster, topic, ps, {"timestamp": stamp}))
    return found


def pick_offset(spec: Any, topic: str, partition: int, earliest: int, latest: int, default: int) -> int:
    """The offset `spec` names for one partition; -2 and -1 mean earliest and latest; a topic
    the spec does not name takes `default`."""
    if isinstance(spec, dict):
        if topic not in spec:
            return default
        if partition not in spec[topic]:  # as in Spark: a topic given must list all its partitions
            raise ValueError(f"offsets for {topic} do not name partition {partition}")
        wanted = spec[topic][partition]
        return {EARLIEST: earliest, LATEST: latest}.get(wanted, wanted)
    return earliest if spec == "earliest" else latest
