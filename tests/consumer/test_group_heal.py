"""On tansu: a `ConsumerGroup` notices a member that died (`ray.kill(no_restart=False)`, as a
crash or a lost node kills it) by itself and replaces it in its slot; every message is processed
(at least once: from the last commit). With static membership (`group.instance.id`) the
replacement takes the dead member's instance id and its claims, and the group's generation does
not change."""

from __future__ import annotations

import time

import pytest
import ray

from raykafka.driver.consumer_group import ConsumerGroup

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(240)]

FAST = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "auto.commit.interval.ms": 300,
        "auto.offset.reset": "earliest", "retry.backoff.ms": 200}


@ray.remote(num_cpus=0)
class Collector:
    def __init__(self):
        self.seen: list[tuple[int, int]] = []

    def add(self, items):
        self.seen.extend(items)

    def get(self):
        return self.seen


def recorder(collector):
    def handle(batch):
        ray.get(collector.add.remote(list(zip(batch.column("partition").to_pylist(),
                                              batch.column("offset").to_pylist(), strict=True))))
    return handle


@pytest.mark.parametrize("static", [True, False], ids=["static", "dynamic"])
def test_a_dead_member_is_replaced_by_the_group_itself(bootstrap, ray_session, topic_name, kit, static):
    topic, group_id = topic_name("heal"), topic_name("g")
    kit.create_topic(bootstrap, topic, 4)
    config = {"bootstrap.servers": bootstrap, "group.id": group_id, **FAST}
    if static:
        config["group.instance.id"] = "worker"
    collector = Collector.remote()
    sent = []

    def write(n):
        sent.extend(kit.produce(bootstrap, topic, [{"value": b"m%d" % len(sent), "partition": i % 4} for i in range(n)]))

    def all_seen():
        return set(sent) <= set(ray.get(collector.get.remote()))

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
        if static:
            assert {s["generation_id"] for s in after} == {generation}, "no rebalance: the generation stayed"
            assert sorted(map(str, (s["claims"] for s in after))) == sorted(map(str, (c for _, c in before.values())))
        print(f"static={static}: noticed in {noticed_s:.2f}s, every message processed {healed_s:.2f}s after the kill")
    finally:
        group.close()
