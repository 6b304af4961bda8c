"""Offset ranges as Spark's Kafka source states them, resolved against the cluster.

`startingOffsets` / `endingOffsets` are "earliest", "latest", or per-partition JSON such as
`{"topicA": {"0": 23, "1": -2}, "topicB": {"0": -1}}` where -2 means earliest and -1 latest.
A range is resolved once, on the driver, into fixed (topic, partition, start, end) tuples,
so every reader reads exactly that range however the topic grows meanwhile.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..wire.cluster import Cluster
from ..wire.config import parse_config
from ..wire.fetch import EARLIEST, LATEST, log_bounds


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


def _spec(offsets: Any, name: str) -> str | dict[str, dict[int, int]]:
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


def resolve_ranges(config: Mapping[str, Any], topics: Iterable[str] | str, starting_offsets: Any = "earliest",
                   ending_offsets: Any = "latest") -> list[PartitionRange]:
    """Every partition's fixed range, as Spark's batch Kafka source reads it."""
    names = [topics] if isinstance(topics, str) else list(topics)
    start_spec = _spec(starting_offsets, "startingOffsets")
    end_spec = _spec(ending_offsets, "endingOffsets")
    if end_spec == "earliest":
        raise ValueError("endingOffsets: earliest is not allowed (as in Spark)")
    if start_spec == "latest":
        raise ValueError("startingOffsets: latest is not allowed for a batch read (as in Spark)")
    for spec, label in ((start_spec, "startingOffsets"), (end_spec, "endingOffsets")):
        if isinstance(spec, dict) and set(spec) - set(names):
            raise ValueError(f"{label}: names topics not subscribed: {sorted(set(spec) - set(names))}")
        if label == "endingOffsets" and isinstance(spec, dict):
            for topic, partitions in spec.items():
                if any(o == EARLIEST for o in partitions.values()):
                    raise ValueError(f"endingOffsets: {topic} uses -2 (earliest), which Spark does not allow")
    return asyncio.run(_resolve(parse_config(config), names, start_spec, end_spec))


async def _resolve(config: Any, names: list[str], start_spec: Any, end_spec: Any) -> list[PartitionRange]:
    cluster = Cluster(config)
    try:
        ranges = []
        for topic in names:
            info = await cluster.topic(topic)
            partitions = sorted(info.partitions)
            earliest, latest = await log_bounds(cluster, topic, partitions)

            for p in partitions:
                start = _pick(start_spec, topic, p, earliest[p], latest[p], earliest[p])
                end = _pick(end_spec, topic, p, earliest[p], latest[p], latest[p])
                if start > latest[p] or end > latest[p] or start < earliest[p]:
                    raise ValueError(f"{topic}/{p}: range [{start}, {end}) is outside the partition's "
                                     f"[{earliest[p]}, {latest[p]})")
                ranges.append(PartitionRange(topic, p, start, max(start, end)))
        return ranges
    finally:
        await cluster.close()


def _pick(spec: Any, topic: str, partition: int, earliest: int, latest: int, default: int) -> int:
    """The offset `spec` names for one partition; -2 and -1 mean earliest and latest."""
    if isinstance(spec, dict):
        if topic not in spec:
            return default
        if partition not in spec[topic]:  # as in Spark: a topic given must list all its partitions
            raise ValueError(f"offsets for {topic} do not name partition {partition}")
        wanted = spec[topic][partition]
        return {EARLIEST: earliest, LATEST: latest}.get(wanted, wanted)
    return earliest if spec == "earliest" else latest
