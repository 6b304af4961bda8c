"""On tansu: our group members share partitions with confluent-kafka, survive members joining,
leaving and being killed, and resume from committed offsets."""

from __future__ import annotations

import time

import pytest
import ray

from raykafka.driver.consumer_group import ConsumerGroup
from raykafka.wire.assignors import group_members

from ..conftest import TANSU_GROUP_SESSION_MS
from ..tiers import default_keeps

pytestmark = [pytest.mark.broker, pytest.mark.ray]

FAST = {"session.timeout.ms": TANSU_GROUP_SESSION_MS, "heartbeat.interval.ms": 500,
        "auto.commit.interval.ms": 300, "auto.offset.reset": "earliest", "retry.backoff.ms": 200}
# for the tests that wait for the coordinator to time out a member that died without leaving
EXPIRING = {**FAST, "session.timeout.ms": 6000}


@ray.remote(num_cpus=0)
class Collector:
    def __init__(self):
        self.seen: list[tuple[int, int]] = []

    def add(self, items):
        self.seen.extend(items)

    def get(self):
        return self.seen


class Stream:
    """Messages written round robin to the 4 partitions of `topic`, and whether a `Collector` saw them all."""

    def __init__(self, bootstrap, topic, kit):
        self.bootstrap, self.topic, self.kit = bootstrap, topic, kit
        self.collector = Collector.remote()
        self.sent: list = []

    def write(self, n):
        values = [{"value": b"m%d" % len(self.sent), "partition": i % 4} for i in range(n)]
        self.sent.extend(self.kit.produce(self.bootstrap, self.topic, values))

    def all_seen(self):
        return set(self.sent) <= set(ray.get(self.collector.get.remote()))


def recorder(collector):
    def handle(batch):
        ray.get(collector.add.remote(list(zip(batch.column("partition").to_pylist(),
                                              batch.column("offset").to_pylist(), strict=True))))
    return handle


def committed_offsets(bootstrap, group_id, topic, partitions):
    """The group's committed offsets, read by confluent-kafka (OffsetFetch, without joining)."""
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import TopicPartition

    ck = CKConsumer({"bootstrap.servers": bootstrap, "group.id": group_id})
    try:
        return {tp.partition: tp.offset for tp in ck.committed([TopicPartition(topic, p) for p in range(partitions)],
                                                               timeout=10)}
    finally:
        ck.close()


@pytest.mark.parametrize("strategy", default_keeps(["range", "roundrobin"], kept=["roundrobin"]))
def test_partitions_split_with_a_confluent_member(bootstrap, ray_session, topic_name, kit, strategy):
    from confluent_kafka import Consumer as CKConsumer

    topic, group_id = topic_name("mix"), topic_name("g")
    kit.create_topic(bootstrap, topic, 6)
    config = {"bootstrap.servers": bootstrap, "group.id": group_id, "partition.assignment.strategy": strategy, **FAST}
    group = ConsumerGroup(config, [topic], lambda batch: None, members=2)
    ck = CKConsumer({"bootstrap.servers": bootstrap, "group.id": group_id, "partition.assignment.strategy": strategy,
                     "session.timeout.ms": TANSU_GROUP_SESSION_MS, "heartbeat.interval.ms": 500,
                     "auto.offset.reset": "earliest"})
    ck.subscribe([topic])
    plan = {}
    try:
        def split():
            ck.poll(0.2)
            theirs = {(tp.topic, tp.partition) for tp in ck.assignment()}
            ours = group.status()
            if not theirs or len({s["generation_id"] for s in ours}) != 1 or not all(s["claims"] for s in ours):
                return False
            plan.clear()
            plan.update({s["member_id"]: s["claims"] for s in ours})
            plan["confluent"] = {topic: sorted(p for _, p in theirs)}
            holders = group_members(plan)
            return set(holders) == {(topic, p) for p in range(6)} and all(len(h) == 1 for h in holders.values())

        kit.wait_for(split, timeout=60, what="a complete split over 3 members")
        assert sorted(len(c[topic]) for c in plan.values()) == [2, 2, 2]
    finally:
        ck.close()
        group.close()


@pytest.mark.slow  # 30-56 s, most of it tansu's JoinGroup waits; the default tier's dead member test rebalances too
def test_members_come_and_go_nothing_skipped_resume_from_commits(bootstrap, ray_session, topic_name, kit):
    topic, group_id = topic_name("churn"), topic_name("g")
    kit.create_topic(bootstrap, topic, 4)
    config = {"bootstrap.servers": bootstrap, "group.id": group_id, **EXPIRING}
    stream = Stream(bootstrap, topic, kit)
    collector, sent, write, all_seen = stream.collector, stream.sent, stream.write, stream.all_seen

    write(400)
    group = ConsumerGroup(config, [topic], recorder(collector), members=1)
    try:
        kit.wait_for(all_seen, timeout=60, what="the first 400 messages")
        group.scale(3)  # two join mid-stream
        write(400)
        kit.wait_for(lambda: len({s["generation_id"] for s in group.status()}) == 1
                     and all(s["claims"] for s in group.status()), timeout=60, what="3 members with claims")
        kit.wait_for(all_seen, timeout=60, what="messages after the join")
        group.scale(2)  # one leaves gracefully
        write(400)
        kit.wait_for(all_seen, timeout=60, what="messages after a leave")
        victim = group.members[0]
        ray.kill(victim)  # one dies without leaving: the group replaces it, the coordinator expires it
        write(400)
        kit.wait_for(all_seen, timeout=90, what="messages after a member was killed")
        kit.wait_for(lambda: victim not in group.members and len({s["generation_id"] for s in group.status()}) == 1
                     and sorted(p for s in group.status() for p in s["claims"].get(topic, [])) == [0, 1, 2, 3],
                     timeout=60, what="the replacement and the survivor sharing the 4 partitions")
        assert len(group.status()) == 2
        ends = {p: 1 + max(o for pp, o in sent if pp == p) for p in range(4)}
        kit.wait_for(lambda: committed_offsets(bootstrap, group_id, topic, 4) == ends, timeout=30,
                     what="the survivor commits everything")
    finally:
        group.close()
    seen = ray.get(collector.get.remote())
    assert set(seen) == set(sent), "every message processed at least once, none skipped"
    before = len(seen)
    # a new member of the same group resumes from the committed offsets: only new messages arrive
    write(20)
    again = ConsumerGroup(config, [topic], recorder(collector), members=1)
    try:
        kit.wait_for(all_seen, timeout=60, what="the 20 new messages")
    finally:
        again.close()
    new = ray.get(collector.get.remote())[before:]
    assert sorted(new) == sorted(sent[-20:])


def test_handler_object_with_setup_claims_cleanup_and_manual_commit(bootstrap, ray_session, topic_name, kit):
    topic, group_id = topic_name("obj"), topic_name("g")
    kit.create_topic(bootstrap, topic, 2)
    sent = kit.produce(bootstrap, topic, [{"value": b"x%d" % i, "partition": i % 2} for i in range(50)])
    collector = Collector.remote()

    class Handler:
        def setup(self, session):
            ray.get(collector.add.remote([("setup", session.generation_id)]))

        def consume_claim(self, session, claim):
            for batch in claim.batches():
                offsets = batch.column("offset").to_pylist()
                ray.get(collector.add.remote([(claim.partition, o) for o in offsets]))
                session.mark(claim.topic, claim.partition, offsets[-1] + 1)
                session.commit()

        def cleanup(self, session):
            ray.get(collector.add.remote([("cleanup", session.generation_id)]))

    config = {"bootstrap.servers": bootstrap, "group.id": group_id, **FAST, "enable.auto.commit": False}
    group = ConsumerGroup(config, topic, Handler(), members=1)
    try:
        kit.wait_for(lambda: set(sent) <= set(ray.get(collector.get.remote())), timeout=60, what="50 messages")
        kit.wait_for(lambda: group.status()[0]["committed"] == {(topic, 0): 25, (topic, 1): 25}, timeout=10,
                     what="the handler's own commits")
        assert committed_offsets(bootstrap, group_id, topic, 2) == {0: 25, 1: 25}
    finally:
        group.close()
    seen = ray.get(collector.get.remote())
    assert seen[0][0] == "setup" and seen[-1][0] == "cleanup"


def test_a_failing_handler_ends_its_session_and_the_batch_is_processed_again(bootstrap, ray_session, topic_name, kit):
    topic, group_id = topic_name("fail"), topic_name("g")
    kit.create_topic(bootstrap, topic, 1)
    sent = kit.produce(bootstrap, topic, [{"value": b"f%d" % i} for i in range(20)])
    collector = Collector.remote()

    def handle(batch):
        items = list(zip(batch.column("partition").to_pylist(), batch.column("offset").to_pylist(), strict=True))
        if not ray.get(collector.get.remote()):
            ray.get(collector.add.remote([("failed", -1)]))
            raise RuntimeError("first batch fails")
        ray.get(collector.add.remote(items))

    group = ConsumerGroup({"bootstrap.servers": bootstrap, "group.id": group_id, **FAST}, [topic], handle)
    try:
        kit.wait_for(lambda: set(sent) <= set(ray.get(collector.get.remote())), timeout=60,
                     what="the batch processed after the failure")
        status = group.status()[0]
        assert "first batch fails" in status["error"] and status["generations"] >= 2
    finally:
        group.close()


# static membership on tansu needs a session long enough to cover a member's restart (39 s a run):
# under `slow`; the default tier keeps a static member's instance id in its join and sync, its
# not leaving (tests/consumer/test_group_coordinator.py) and its fencing (test_member_faults.py)
@pytest.mark.parametrize("membership", default_keeps(["static", "dynamic", "cooperative"], kept=["dynamic"]))
@pytest.mark.timeout(240)
def test_a_dead_member_is_replaced_by_the_group_itself(bootstrap, ray_session, topic_name, kit, membership):
    """A member killed as a crash or a lost node kills it (`ray.kill(no_restart=False)`) is noticed
    by the group itself and replaced in its slot; every message is processed (at least once: from
    the last commit). With static membership (`group.instance.id`) the replacement takes the dead
    member's instance id and its claims, and the group's generation does not change. Under the
    cooperative protocol the living member keeps its partitions through the rebalances, giving up
    none."""
    topic, group_id = topic_name("heal"), topic_name("g")
    kit.create_topic(bootstrap, topic, 4)
    static = membership == "static"
    config = {"bootstrap.servers": bootstrap, "group.id": group_id, **EXPIRING}
    if membership == "cooperative":
        config["partition.assignment.strategy"] = "cooperative-sticky"
    if static:
        # as static membership is run: a session long enough to cover a member's restart (a new
        # actor process, then its JoinGroup), so the broker keeps the dead member's place for it
        config.update({"group.instance.id": "worker", "session.timeout.ms": 30000})
    stream = Stream(bootstrap, topic, kit)
    collector, write, all_seen = stream.collector, stream.write, stream.all_seen

    def settled():
        statuses = group.status()
        return (len({s["generation_id"] for s in statuses}) == 1 and all(s["claims"] for s in statuses)
                and sum(len(ps) for s in statuses for ps in s["claims"].values()) == 4)

    write(200)
    group = ConsumerGroup(config, [topic], recorder(collector), members=2)
    try:
        kit.wait_for(settled, timeout=60, what="2 members sharing 4 partitions")
        kit.wait_for(all_seen, timeout=60, what="the first 200 messages")
        before = {s["member_id"]: (s["generation_id"], s["claims"]) for s in group.status()}
        generation = next(iter(before.values()))[0]
        victim = group.members[0]
        living = group.status()[1]
        ray.kill(victim, no_restart=False)
        killed_at = time.monotonic()
        kit.wait_for(lambda: victim not in group.members and len(group.members) == 2, timeout=30,
                     what="the group replacing its dead member")
        noticed_s = time.monotonic() - killed_at
        write(200)
        kit.wait_for(all_seen, timeout=90, what="messages written after the kill")
        healed_s = time.monotonic() - killed_at
        kit.wait_for(settled, timeout=60, what="2 members sharing 4 partitions again")
        after = group.status()
        assert len(after) == 2 and not any(s["fatal"] for s in after), after
        assert [e.where for e in group.errors() if e.kind == "replaced"] == ["member 0"]
        group.check()  # a replaced member is not an error
        if membership == "cooperative":
            now = next(s for s in after if s["member_id"] == living["member_id"])
            assert now["revoked"] == 0 and all(set(ps) <= set(now["claims"].get(t, ())) for t, ps in living["claims"].items())
        if static:
            assert {s["generation_id"] for s in after} == {generation}, "no rebalance: the generation stayed"
            assert sorted(map(str, (s["claims"] for s in after))) == sorted(map(str, (c for _, c in before.values())))
        print(f"{membership}: noticed in {noticed_s:.2f}s, every message processed {healed_s:.2f}s after the kill")
    finally:
        group.close()
