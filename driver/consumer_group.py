"""`ConsumerGroup`: N member actors sharing a group's partitions, each running the handler.

    def handle(batch):            # a pyarrow.RecordBatch of one partition, in offset order
        ...
    group = ConsumerGroup({"bootstrap.servers": ..., "group.id": "g"}, ["events"], handle, members=3)
    group.scale(5)                # grow or shrink while running
    group.close()                 # every member commits, leaves; no actor stays

The handler is a function of a batch (marked when it returns), or an object with
`setup(session)`, `consume_claim(session, claim)` (iterate `claim.batches()`, call
`session.mark(topic, partition, next_offset)` / `session.commit()`), and `cleanup(session)`,
as in Sarama. Offsets are committed every `auto.commit.interval.ms` when
`enable.auto.commit` (the default) and at the end of every session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ray

from ..actors.group_member import GroupMember
from ..wire.config import parse_config
from .ray_runtime import ensure_ray


class ConsumerGroup:
    def __init__(self, config: Mapping[str, Any], topics: list[str] | str, handler: Any, members: int = 1):
        self.raw_config = dict(config)
        self.config = parse_config(config)
        if not self.config["group.id"]:
            raise ValueError("group.id: required for a consumer group")
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics:
            raise ValueError("topics: a consumer group needs at least one topic")
        if not (hasattr(handler, "consume_claim") or callable(handler)):
            raise TypeError(f"handler: expected a function of a batch or an object with consume_claim, got {handler!r}")
        if members < 0:
            raise ValueError(f"members: must be at least 0, got {members}")
        self.handler = handler
        ensure_ray()
        self._members: list[Any] = []
        self._next_index = 0
        self.scale(members)

    def _member_config(self) -> dict[str, Any]:
        config = dict(self.raw_config)
        instance = self.config["group.instance.id"]
        if instance is not None:  # static membership: one stable instance id per member slot
            config["group.instance.id"] = f"{instance}-{self._next_index}"
        self._next_index += 1
        return config

    @property
    def members(self) -> list[Any]:
        return list(self._members)

    def scale(self, n: int) -> None:
        """Grow or shrink to `n` members; a leaving member commits and leaves the group first."""
        if n < 0:
            raise ValueError(f"members: must be at least 0, got {n}")
        while len(self._members) < n:
            member = ray.remote(GroupMember).options(num_cpus=0, max_concurrency=4).remote(
                self._member_config(), self.topics, self.handler)
            self._members.append(member)
        ray.get([m.ping.remote() for m in self._members])
        leaving = self._members[n:]
        self._members = self._members[:n]
        self._stop(leaving)

    def _stop(self, members: list[Any]) -> list[dict[str, Any]]:
        results = ray.get([m.stop.remote() for m in members], timeout=120) if members else []
        for m in members:
            ray.kill(m)
        return results

    def status(self) -> list[dict[str, Any]]:
        return ray.get([m.status.remote() for m in self._members])

    def assignment(self) -> dict[str, dict[str, list[int]]]:
        """Each member's claims in its current generation, by member id."""
        return {s["member_id"]: s["claims"] for s in self.status()}

    def forget(self, member: Any) -> None:
        """Drop a member that died (e.g. killed) from the group's list."""
        self._members = [m for m in self._members if m != member]

    def close(self) -> None:
        members, self._members = self._members, []
        self._stop(members)

    def __enter__(self) -> ConsumerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
