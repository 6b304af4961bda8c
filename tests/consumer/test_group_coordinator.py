"""The group state machine's error handling, against a scripted fake coordinator (no Ray, no broker)."""

from __future__ import annotations

import asyncio

import pytest

from raykafka.wire import messages
from raykafka.wire.assignors import decode_assignment, decode_subscription, encode_assignment
from raykafka.wire.config import parse_config
from raykafka.wire.errors import BrokerError
from raykafka.wire.group_coordinator import CoordinatorLost, GroupCoordinator, RebalanceNeeded
from raykafka.wire.protocol import Struct


class FakeConnection:
    """Answers each API from a script of response dicts; records every request."""

    def __init__(self, script):
        self.script = {api: list(responses) for api, responses in script.items()}
        self.sent = []

    def version_for(self, api):
        return {messages.OFFSET_FETCH.key: 9, messages.LEAVE_GROUP.key: 5}.get(api.key, 5)

    async def request(self, api, body, version=None, timeout=None):
        self.sent.append((api.name, dict(body)))
        answers = self.script.get(api.name)
        if not answers:
            raise AssertionError(f"unscripted {api.name}")
        return _struct(answers.pop(0))


def _struct(value):
    if isinstance(value, dict):
        return Struct({k: _struct(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_struct(v) for v in value]
    return value


class FakeMetadata:
    def partitions(self, topic):
        return list(range(4)) if topic == "t" else []


class FakeCluster:
    def __init__(self, conn):
        self.conn = conn
        self.metadata = FakeMetadata()
        self.lookups = 0
        self.forgotten = 0

    async def coordinator(self, group_id):
        self.lookups += 1
        return self.conn

    def forget_coordinator(self, group_id):
        self.forgotten += 1

    async def refresh_metadata(self, topics=None):
        return self.metadata


def join_ok(member="m-1", leader="m-1", generation=1, members=()):
    return {"error_code": 0, "member_id": member, "leader": leader, "generation_id": generation,
            "protocol_name": "range", "members": list(members)}


def sync_ok(claims):
    return {"error_code": 0, "assignment": encode_assignment(claims)}


def make(conn, **extra):
    config = parse_config({"bootstrap.servers": "x:1", "group.id": "g", "retry.backoff.ms": 1, **extra})
    cluster = FakeCluster(conn)
    sleeps = []

    async def sleep(s):
        sleeps.append(s)

    return GroupCoordinator(cluster, config, ["t"], max_retries=3, sleep=sleep), cluster, sleeps


def run(coro):
    return asyncio.run(coro)


def test_member_id_required_retries_with_the_given_id_then_leader_assigns():
    conn = FakeConnection({"JoinGroup": [{"error_code": 79, "member_id": "m-1"}], "SyncGroup": []})
    coord, _, sleeps = make(conn)
    joined = []

    async def go():
        # second JoinGroup answer needs our own subscription bytes as the member list
        conn.script["JoinGroup"].append(None)
        original = conn.request

        async def request(api, body, version=None, timeout=None):
            if api.name == "JoinGroup" and conn.script["JoinGroup"] == [None]:
                conn.script["JoinGroup"] = [join_ok(members=[{"member_id": "m-1", "metadata": body["protocols"][0]["metadata"]}])]
            if api.name == "SyncGroup":
                joined.append(body)
                conn.script["SyncGroup"] = [sync_ok(decode_assignment(body["assignments"][0]["assignment"]).partitions)]
            return await original(api, body, version, timeout)

        conn.request = request
        return await coord.join()

    gen = run(go())
    joins = [b for name, b in conn.sent if name == "JoinGroup"]
    assert [j["member_id"] for j in joins] == ["", "m-1"]
    assert decode_subscription(joins[0]["protocols"][0]["metadata"]).topics == ["t"]
    assert gen.is_leader and gen.claims == {"t": [0, 1, 2, 3]} and gen.generation_id == 1
    assert joined[0]["generation_id"] == 1 and joined[0]["member_id"] == "m-1"
    assert sleeps == []


def test_unknown_member_id_rejoins_at_once_with_an_empty_member_id():
    conn = FakeConnection({"JoinGroup": [{"error_code": 25}, join_ok("m-2", leader="other", generation=5)],
                           "SyncGroup": [sync_ok({"t": [1]})]})
    coord, _, sleeps = make(conn)
    coord.member_id = "stale"
    gen = run(coord.join())
    assert [b["member_id"] for n, b in conn.sent if n == "JoinGroup"] == ["stale", ""]
    assert gen.claims == {"t": [1]} and not gen.is_leader and sleeps == []
    assert [b["assignments"] for n, b in conn.sent if n == "SyncGroup"] == [[]], "followers send no plan"


def test_rebalance_in_progress_backs_off_and_rejoins():
    conn = FakeConnection({"JoinGroup": [{"error_code": 27}, {"error_code": 27}, join_ok("m", leader="x")],
                           "SyncGroup": [{"error_code": 27}, sync_ok({"t": [0]})]})
    conn.script["JoinGroup"].append(join_ok("m", leader="x", generation=2))
    coord, _, sleeps = make(conn)
    gen = run(coord.join())
    assert gen.generation_id == 2 and len(sleeps) == 3


def test_not_coordinator_rediscovers_the_coordinator():
    conn = FakeConnection({"JoinGroup": [{"error_code": 16}, {"error_code": 15}, join_ok("m", leader="x")],
                           "SyncGroup": [sync_ok({})]})
    coord, cluster, sleeps = make(conn)
    run(coord.join())
    assert cluster.forgotten == 2 and cluster.lookups == 4 and len(sleeps) == 2


def test_retries_are_bounded():
    conn = FakeConnection({"JoinGroup": [{"error_code": 27}] * 10})
    coord, _, sleeps = make(conn)
    with pytest.raises(BrokerError, match="REBALANCE_IN_PROGRESS"):
        run(coord.join())
    assert len(sleeps) == 3


def test_fatal_join_error_is_raised_at_once():
    conn = FakeConnection({"JoinGroup": [{"error_code": 24}]})
    coord, _, _ = make(conn)
    with pytest.raises(BrokerError, match="INVALID_GROUP_ID"):
        run(coord.join())


def test_heartbeat_errors_map_to_rejoin_or_rediscover():
    conn = FakeConnection({"Heartbeat": [{"error_code": 0}, {"error_code": 27}, {"error_code": 22},
                                         {"error_code": 25}, {"error_code": 16}]})
    coord, cluster, _ = make(conn, **{"group.instance.id": "static-1"})
    coord.member_id, coord.generation_id = "m", 4
    run(coord.heartbeat())
    sent = conn.sent[0][1]
    assert (sent["generation_id"], sent["member_id"], sent["group_instance_id"]) == (4, "m", "static-1")
    for _ in range(2):
        with pytest.raises(RebalanceNeeded):
            run(coord.heartbeat())
        assert coord.member_id == "m"
    with pytest.raises(RebalanceNeeded):
        run(coord.heartbeat())
    assert coord.member_id == "" and coord.generation_id == -1
    with pytest.raises(CoordinatorLost):
        run(coord.heartbeat())
    assert cluster.forgotten == 1


def test_commit_carries_generation_and_fails_with_rebalance_on_illegal_generation():
    ok = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]}
    bad = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 22}]}]}
    conn = FakeConnection({"OffsetCommit": [ok, bad]})
    coord, _, _ = make(conn)
    coord.member_id, coord.generation_id = "m", 9
    run(coord.commit({("t", 0): 42}))
    body = conn.sent[0][1]
    assert (body["generation_id_or_member_epoch"], body["member_id"]) == (9, "m")
    assert body["topics"][0]["partitions"][0]["committed_offset"] == 42
    with pytest.raises(RebalanceNeeded):
        run(coord.commit({("t", 0): 43}))


def test_offset_fetch_v8_shape():
    conn = FakeConnection({"OffsetFetch": [{"groups": [{"group_id": "g", "error_code": 0, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 7, "error_code": 0},
                                     {"partition_index": 1, "committed_offset": -1, "error_code": 0}]}]}]}]})
    coord, _, _ = make(conn)
    assert run(coord.fetch_offsets({"t": [0, 1]})) == {("t", 0): 7, ("t", 1): -1}
    assert conn.sent[0][1]["groups"][0]["topics"] == [{"name": "t", "partition_indexes": [0, 1]}]


def test_static_member_sends_its_instance_id_and_does_not_leave():
    conn = FakeConnection({"JoinGroup": [join_ok("static-1-x", leader="other")], "SyncGroup": [sync_ok({"t": [2]})]})
    coord, _, _ = make(conn, **{"group.instance.id": "static-1"})
    run(coord.join())
    join = conn.sent[0][1]
    sync = conn.sent[1][1]
    assert join["group_instance_id"] == "static-1" and sync["group_instance_id"] == "static-1"
    run(coord.leave())
    assert [n for n, _ in conn.sent] == ["JoinGroup", "SyncGroup"], "a static member keeps its claims across restarts"


def test_dynamic_member_leaves_with_its_member_id():
    conn = FakeConnection({"JoinGroup": [join_ok("m-7", leader="other")], "SyncGroup": [sync_ok({})],
                           "LeaveGroup": [{"error_code": 0, "members": []}]})
    coord, _, _ = make(conn)
    run(coord.join())
    run(coord.leave())
    leave = conn.sent[-1][1]
    assert leave["members"][0]["member_id"] == "m-7" and coord.member_id == ""
