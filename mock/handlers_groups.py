"""The mock cluster's coordinator: FindCoordinator and the classic group protocol (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup), and committed offsets (OffsetCommit, OffsetFetch).

Not modelled: group session expiry and the initial rebalance delay.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ..wire import messages
from ..wire.protocol import Api, Struct
from .broker import MockBroker
from .protocol_codes import (
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    MEMBER_ID_REQUIRED,
    NOT_COORDINATOR,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    joined: asyncio.Future | None = None  # set while its JoinGroup waits for the round to finish
    synced: asyncio.Future | None = None  # set while its SyncGroup waits for the leader's
    assignment: bytes = b""


@dataclass
class Group:
    """A classic group on the coordinator: Empty → PreparingRebalance → CompletingRebalance → Stable."""

    group_id: str
    state: str = "Empty"
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    joined_this_round: set[str] = field(default_factory=set)
    named: set[str] = field(default_factory=set)  # ids handed out with MEMBER_ID_REQUIRED, not yet used
    round_deadline: asyncio.TimerHandle | None = None
    offsets: dict[tuple[str, int], tuple[int, int, str | None]] = field(default_factory=dict)


class GroupHandlers:
    """FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch;
    one of `MockCluster`'s bases. Works on the cluster's `_groups` and `_member_counter`."""

    def _handle_find_coordinator(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        coordinator = self.brokers[self.coordinator_id]
        keys = body.coordinator_keys if version >= 4 else [body.key]
        entries = []
        for key in keys:
            error = self._take_fault(messages.FIND_COORDINATOR.key, broker.node_id)
            entries.append({"key": key, "node_id": -1 if error else coordinator.node_id,
                            "host": "" if error else "127.0.0.1", "port": -1 if error else coordinator.port,
                            "error_code": error, "error_message": None})
        first = entries[0] if entries else {"node_id": -1, "host": "", "port": -1, "error_code": 0}
        return {"throttle_time_ms": 0, "error_code": first["error_code"], "error_message": None,
                "node_id": first["node_id"], "host": first["host"], "port": first["port"],
                "coordinators": entries}

    def _group_error(self, api: Api, broker: MockBroker) -> int:
        """An injected fault, else NOT_COORDINATOR away from the coordinator, else 0."""
        error = self._take_fault(api.key, broker.node_id)
        if not error and broker.node_id != self.coordinator_id:
            error = NOT_COORDINATOR
        return error

    def _group(self, group_id: str) -> Group:
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = Group(group_id)
        return group

    async def _handle_join_group(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        def answer(error: int, member_id: str = "", **rest: Any) -> dict[str, Any]:
            out = {"throttle_time_ms": 0, "error_code": error, "generation_id": -1, "protocol_type": None,
                   "protocol_name": None if version >= 7 else "", "leader": "", "skip_assignment": False,
                   "member_id": member_id, "members": []}
            out.update(rest)
            return out

        error = self._group_error(messages.JOIN_GROUP, broker)
        if error:
            return answer(error, body.member_id)
        with self.lock:
            group = self._group(body.group_id)
            member_id = body.member_id
            if not member_id:
                self._member_counter += 1
                member_id = f"{body.group_instance_id or 'member'}-{self._member_counter}"
                if version >= 4 and body.group_instance_id is None:
                    # KIP-394: the member must come back with the id it was given
                    group.named.add(member_id)
                    return answer(MEMBER_ID_REQUIRED, member_id)
            elif member_id in group.named:
                group.named.discard(member_id)
            elif member_id not in group.members:
                return answer(UNKNOWN_MEMBER_ID, member_id)
            protocols = [(p.name, p.metadata) for p in body.protocols]
            if group.protocol_type not in (None, body.protocol_type) and group.members.keys() - {member_id}:
                return answer(INCONSISTENT_GROUP_PROTOCOL, member_id)
            rebalance_ms = body.rebalance_timeout_ms if body.rebalance_timeout_ms > 0 else body.session_timeout_ms
            member = group.members.get(member_id) or Member(member_id, body.group_instance_id, [], 0, 0)
            member.protocols = protocols
            member.session_timeout_ms = body.session_timeout_ms
            member.rebalance_timeout_ms = rebalance_ms
            member.group_instance_id = body.group_instance_id
            group.members[member_id] = member
            group.protocol_type = body.protocol_type
            loop = asyncio.get_running_loop()
            member.joined = loop.create_future()
            joined = member.joined
            if group.state != "PreparingRebalance":
                self._prepare_rebalance(group, loop, rebalance_ms)
            group.joined_this_round.add(member_id)
            self._maybe_complete_join(group)
        result = dict(await joined)
        return answer(result.pop("error_code"), **result)

    def _prepare_rebalance(self, group: Group, loop: asyncio.AbstractEventLoop, timeout_ms: int) -> None:
        group.state = "PreparingRebalance"
        group.joined_this_round = set()
        for m in group.members.values():  # a member waiting in SyncGroup must rejoin
            if m.synced is not None and not m.synced.done():
                m.synced.set_result(REBALANCE_IN_PROGRESS)
        if group.round_deadline is not None:
            group.round_deadline.cancel()
        group.round_deadline = loop.call_later(timeout_ms / 1000, self._end_round, group)

    def _end_round(self, group: Group) -> None:
        """The rebalance timeout passed: members that did not rejoin are out."""
        with self.lock:
            for member_id in list(group.members):
                if member_id not in group.joined_this_round:
                    del group.members[member_id]
            self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state != "PreparingRebalance":
            return
        if not group.members:
            group.state = "Empty"
            return
        if group.members.keys() - group.joined_this_round:
            return  # a member has yet to rejoin
        if group.round_deadline is not None:
            group.round_deadline.cancel()
            group.round_deadline = None
        members = list(group.members.values())
        names = [name for name, _ in members[0].protocols]
        common = [n for n in names if all(n in dict(m.protocols) for m in members)]
        group.generation += 1
        group.protocol_name = common[0] if common else None
        if group.leader not in group.members:
            group.leader = members[0].member_id
        group.state = "CompletingRebalance"
        everyone = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                     "metadata": dict(m.protocols).get(group.protocol_name, b"")} for m in members]
        for m in members:
            if m.joined is not None and not m.joined.done():
                m.joined.set_result({
                    "error_code": 0 if common else INCONSISTENT_GROUP_PROTOCOL,
                    "generation_id": group.generation, "protocol_type": group.protocol_type,
                    "protocol_name": group.protocol_name, "leader": group.leader, "member_id": m.member_id,
                    "members": everyone if m.member_id == group.leader else []})
            m.joined = None

    async def _handle_sync_group(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        def answer(error: int, assignment: bytes = b"") -> dict[str, Any]:
            with self.lock:
                group = self._groups.get(body.group_id)
                ptype = group.protocol_type if group else None
                pname = group.protocol_name if group else None
            return {"throttle_time_ms": 0, "error_code": error, "protocol_type": ptype, "protocol_name": pname,
                    "assignment": assignment}

        error = self._group_error(messages.SYNC_GROUP, broker)
        if error:
            return answer(error)
        with self.lock:
            group = self._groups.get(body.group_id)
            member = group.members.get(body.member_id) if group else None
            if group is None or member is None:
                return answer(UNKNOWN_MEMBER_ID)
            if body.generation_id != group.generation:
                return answer(ILLEGAL_GENERATION)
            if group.state == "PreparingRebalance":
                return answer(REBALANCE_IN_PROGRESS)
            if group.state == "Stable":
                return answer(0, member.assignment)
            if body.member_id == group.leader:
                given = {a.member_id: a.assignment for a in body.assignments}
                for m in group.members.values():
                    m.assignment = given.get(m.member_id, b"")
                    if m.synced is not None and not m.synced.done():
                        m.synced.set_result(0)
                group.state = "Stable"
                return answer(0, member.assignment)
            member.synced = asyncio.get_running_loop().create_future()
            synced = member.synced
        error = await synced
        with self.lock:
            member.synced = None
            return answer(error, b"" if error else member.assignment)

    def _handle_heartbeat(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        error = self._group_error(messages.HEARTBEAT, broker)
        if not error:
            with self.lock:
                group = self._groups.get(body.group_id)
                if group is None or body.member_id not in group.members:
                    error = UNKNOWN_MEMBER_ID
                elif body.generation_id != group.generation:
                    error = ILLEGAL_GENERATION
                elif group.state == "PreparingRebalance":
                    error = REBALANCE_IN_PROGRESS
        return {"throttle_time_ms": 0, "error_code": error}

    def _handle_leave_group(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        leaving = [body.member_id] if version <= 2 else [m.member_id for m in body.members]
        error = self._group_error(messages.LEAVE_GROUP, broker)
        results = []
        if not error:
            with self.lock:
                group = self._groups.get(body.group_id)
                for member_id in leaving:
                    if group is None or member_id not in group.members:
                        results.append({"member_id": member_id, "group_instance_id": None,
                                        "error_code": UNKNOWN_MEMBER_ID})
                        continue
                    del group.members[member_id]
                    results.append({"member_id": member_id, "group_instance_id": None, "error_code": 0})
                if group is not None and any(r["error_code"] == 0 for r in results):
                    if group.members:
                        loop = broker.loop
                        timeout = max(m.rebalance_timeout_ms for m in group.members.values())
                        self._prepare_rebalance(group, loop, timeout)
                    else:
                        group.state = "Empty"
                        group.leader = ""
                if version <= 2 and results and results[0]["error_code"]:
                    error = results[0]["error_code"]
        return {"throttle_time_ms": 0, "error_code": error, "members": results}

    def _handle_offset_commit(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        topics = []
        with self.lock:
            group = self._group(body.group_id)
            common = 0
            if broker.node_id != self.coordinator_id:
                common = NOT_COORDINATOR
            elif body.generation_id_or_member_epoch >= 0 or body.member_id:
                # Kafka's order: a group waiting for its SyncGroup refuses, but one preparing a
                # rebalance takes the commit of a member of the generation still current (what it
                # handled before it rejoins)
                if group.state == "CompletingRebalance":
                    common = REBALANCE_IN_PROGRESS
                elif body.member_id not in group.members:
                    common = UNKNOWN_MEMBER_ID
                elif body.generation_id_or_member_epoch != group.generation:
                    common = ILLEGAL_GENERATION
            for t in body.topics:
                parts = []
                for p in t.partitions:
                    error = self._take_fault(messages.OFFSET_COMMIT.key, broker.node_id, t.name, p.partition_index)
                    error = error or common
                    if not error:
                        group.offsets[(t.name, p.partition_index)] = (
                            p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
                    parts.append({"partition_index": p.partition_index, "error_code": error})
                topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    def _handle_offset_fetch(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        asked = ([{"group_id": body.group_id, "topics": body.topics}] if version <= 7
                 else [{"group_id": g.group_id, "topics": g.topics} for g in body.groups])
        groups = []
        with self.lock:
            for g in asked:
                group = self._groups.get(g["group_id"])
                offsets = group.offsets if group else {}
                if g["topics"] is None:
                    wanted: dict[str, list[int]] = {}
                    for name, index in sorted(offsets):
                        wanted.setdefault(name, []).append(index)
                else:
                    wanted = {t.name: list(t.partition_indexes) for t in g["topics"]}
                topics = []
                for name, indexes in wanted.items():
                    parts = []
                    for index in indexes:
                        error = self._take_fault(messages.OFFSET_FETCH.key, broker.node_id, name, index)
                        if not error and broker.node_id != self.coordinator_id:
                            error = NOT_COORDINATOR
                        offset, epoch, metadata = offsets.get((name, index), (-1, -1, ""))
                        parts.append({"partition_index": index, "committed_offset": -1 if error else offset,
                                      "committed_leader_epoch": epoch, "metadata": metadata, "error_code": error})
                    topics.append({"name": name, "partitions": parts})
                groups.append({"group_id": g["group_id"], "topics": topics, "error_code": 0})
        first = groups[0]
        return {"throttle_time_ms": 0, "topics": first["topics"], "error_code": 0, "groups": groups}
