"""A group whose leader left while it was forming: on tansu the next member to join is told to
wait for that leader for ever; it takes the leader's member id after session.timeout.ms and the
group forms. The stranded state is made on the real broker, request by request."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from raykafka.wire.cluster import Cluster
from raykafka.wire.config import parse_config
from raykafka.wire.group_coordinator import MEMBER_ID_REQUIRED, AbsentLeader, GroupCoordinator

SESSION_MS = 3000


def test_the_same_leader_refusing_past_the_session_timeout_is_absent():
    now = [100.0]
    watch = AbsentLeader(SESSION_MS, clock=lambda: now[0], share=lambda: 0.5)  # waits 3 s × 1.5
    assert not watch.refused(5, "a")
    now[0] += 4.0
    assert not watch.refused(5, "a")
    assert not watch.refused(6, "a")  # a new generation: the group moved, the wait starts again
    now[0] += 4.4
    assert not watch.refused(6, "a")
    now[0] += 0.2
    assert watch.refused(6, "a")
    watch.reset()
    assert not watch.refused(6, "a")


async def _joined(coordinator: GroupCoordinator):
    """One JoinGroup round (with the member id the broker asks for), without SyncGroup."""
    join = await coordinator._join_group()
    if join.error_code == MEMBER_ID_REQUIRED:
        coordinator.member_id = join.member_id
        join = await coordinator._join_group()
    assert join.error_code == 0, join.error_code
    coordinator.member_id = join.member_id
    return join


@pytest.mark.slow  # 16 s of tansu's JoinGroup waits; the default tier keeps a dead member replaced by the group
@pytest.mark.broker
def test_a_member_joining_a_group_stranded_by_its_leader_takes_over_and_assigns(bootstrap, topic_name, kit, caplog):
    topic, group_id = topic_name("strand"), topic_name("g")
    kit.create_topic(bootstrap, topic, 2)
    config = parse_config({"bootstrap.servers": bootstrap, "group.id": group_id, "session.timeout.ms": SESSION_MS,
                           "heartbeat.interval.ms": 1000, "retry.backoff.ms": 100})

    async def go():
        cluster = Cluster(config)
        try:
            a, b, c = (GroupCoordinator(cluster, config, [topic]) for _ in range(3))
            first = await a.join()
            assert first.is_leader and first.claims == {topic: [0, 1]}
            # b joins: the group forms again, still led by a; a and b leave before a assigns
            rejoin = await _joined(b)
            assert rejoin.leader == a.member_id and rejoin.generation_id > first.generation_id
            leader = a.member_id
            await a.leave()
            await b.leave()
            # c joins a group with no members that names the departed a as its leader
            start = time.monotonic()
            generation = await asyncio.wait_for(c.join(), timeout=6 * SESSION_MS / 1000)
            return leader, generation, time.monotonic() - start
        finally:
            await cluster.close()

    with caplog.at_level(logging.WARNING, logger="raykafka.wire.group"):
        leader, generation, took = asyncio.run(go())
    assert generation.member_id == leader and generation.is_leader
    assert generation.claims == {topic: [0, 1]}
    assert took >= SESSION_MS / 1000  # it waited a session for the leader first
    assert any("takes over its member id" in r.getMessage() for r in caplog.records)
