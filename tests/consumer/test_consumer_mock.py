"""On the mock cluster: faults one tansu cannot produce — a leader moving, a slow partition,
a subscribed topic growing."""

from __future__ import annotations

import asyncio
import time

import pytest
import ray
import ray._private.state

from raykafka.actors.broker_consumer import CATCH_UP_WAIT_MS
from raykafka.driver.consumer import Consumer
from raykafka.driver.consumer_group import ConsumerGroup
from raykafka.mock import MockCluster, PartitionState
from raykafka.wire import messages
from raykafka.wire.cluster import Cluster
from raykafka.wire.config import parse_config
from raykafka.wire.errors import BY_NAME, BrokerError
from raykafka.wire.fetch import log_bounds

pytestmark = [pytest.mark.ray]


def test_leader_moves_and_the_consumer_follows_without_loss_or_repeat(ray_session, kit):
    with MockCluster(n_brokers=2, topics={"t": 1}) as cluster, \
            Consumer({"bootstrap.servers": cluster.bootstrap, "fetch.max.wait.ms": 100}) as consumer:
        kit.mock_produce(cluster, "t", 0, [b"a%d" % i for i in range(50)], per_batch=10)
        first = cluster.leader("t", 0)
        consumer.assign("t", 0, "earliest")
        before = consumer.read_all(timeout=20).column("offset").to_pylist()
        other = 2 if first == 1 else 1
        cluster.move_leader("t", 0, other)
        kit.mock_produce(cluster, "t", 0, [b"b%d" % i for i in range(50)], per_batch=10)
        after = consumer.read_all(timeout=20).column("offset").to_pylist()
        assert before + after == list(range(100)), "every offset once, in order"
        assert cluster.requests(messages.FETCH, node_id=other), "it fetched from the new leader"
        assert cluster.faults["leader_move"] == 1


def test_only_the_leaders_of_assigned_partitions_get_a_broker_consumer(ray_session, kit, live_actors_of):
    """8 brokers, one partition assigned, 2 BrokerConsumer slots: one BrokerConsumer, fetching
    from that leader alone; when leadership moves to a broker of the other slot, a second one
    starts there, and the partition reads on without loss or repeat. No other broker is fetched from."""
    with MockCluster(n_brokers=8, topics={"t": 8}) as cluster, \
            Consumer({"bootstrap.servers": cluster.bootstrap, "fetch.max.wait.ms": 100,
                      "broker.consumer.actors": 2}) as consumer:
        kit.mock_produce(cluster, "t", 3, [b"a%d" % i for i in range(20)], per_batch=5)
        consumer.assign("t", 3, "earliest")
        first = cluster.leader("t", 3)
        assert sorted(live_actors_of()) == ["BrokerConsumer", "PartitionConsumer"]
        assert list(consumer.broker_consumer_stats()) == [first], "one fetch loop, for the leader"
        before = consumer.read_all(timeout=20).column("offset").to_pylist()
        other = next(n for n in range(1, 9) if n % 2 != first % 2)  # it leads another partition, none of ours
        cluster.move_leader("t", 3, other)
        kit.mock_produce(cluster, "t", 3, [b"b%d" % i for i in range(20)], per_batch=5)
        after = consumer.read_all(timeout=20).column("offset").to_pylist()
        assert before + after == list(range(40)), "every offset once, in order"
        assert sorted(live_actors_of()) == ["BrokerConsumer", "BrokerConsumer", "PartitionConsumer"]
        assert cluster.requests(messages.FETCH, node_id=other), "it fetched from the new leader"
        fetched_from = {n for n in range(1, 9) if cluster.requests(messages.FETCH, node_id=n)}
        assert fetched_from == {first, other}, "no fetch loop for a broker that leads none of ours"
    assert live_actors_of() == [], "close leaves no consumer actor"


def test_8_brokers_share_2_broker_consumers_and_a_killed_one_heals_with_no_gap_and_no_repeat(
        ray_session, kit, live_actors_of):
    """8 brokers, each leading one partition, all assigned, `broker.consumer.actors` 2: 2
    BrokerConsumer processes, 4 brokers' fetch loops each; every record is read once. Then the one
    hosting broker 1's loop (and 3 more) is killed: Ray restarts it, its partitions subscribe
    again from their positions, and what is written next is read with no gap and no repeat."""
    with MockCluster(n_brokers=8, topics={"t": 8}) as cluster, \
            Consumer({"bootstrap.servers": cluster.bootstrap, "fetch.max.wait.ms": 100,
                      "broker.consumer.actors": 2}) as consumer:
        for p in range(8):
            kit.mock_produce(cluster, "t", p, [b"a%d-%d" % (p, i) for i in range(10)], per_batch=5)
        consumer.assign_topic("t", "earliest")
        assert sorted(cluster.leader("t", p) for p in range(8)) == list(range(1, 9)), "a leader each"
        assert sorted(live_actors_of()) == ["BrokerConsumer", "BrokerConsumer", "PartitionConsumer"]
        loops = {node: ray.get(handle.ping.remote()) for node, handle in consumer._brokers.items()}
        assert loops == {0: [2, 4, 6, 8], 1: [1, 3, 5, 7]}, "brokers placed by node id modulo 2"

        def offsets_by_partition(table):
            out = {p: [] for p in range(8)}
            for row in table.select(["partition", "offset"]).to_pylist():
                out[row["partition"]].append(row["offset"])
            return out

        assert offsets_by_partition(consumer.read_all(timeout=20)) == {p: list(range(10)) for p in range(8)}
        ray.kill(consumer._brokers[1], no_restart=False)
        for p in range(8):
            kit.mock_produce(cluster, "t", p, [b"b%d-%d" % (p, i) for i in range(10)], per_batch=5)
        after = {p: [] for p in range(8)}
        for _ in range(10):
            for p, offsets in offsets_by_partition(consumer.read_all(timeout=5)).items():
                after[p] += offsets
            if all(len(offsets) >= 10 for offsets in after.values()):
                break
        assert after == {p: list(range(10, 20)) for p in range(8)}, "no gap, no repeat, in order"
        assert not consumer.failed
        assert sorted(live_actors_of()) == ["BrokerConsumer", "BrokerConsumer", "PartitionConsumer"]
        assert sorted(ray.get(consumer._brokers[1].ping.remote())) == [1, 3, 5, 7], "restarted with its loops"
        assert ray._private.state.actors(consumer._brokers[1]._actor_id.hex())["NumRestarts"] == 1
    assert live_actors_of() == [], "close leaves no consumer actor"


def test_a_broker_consumer_dead_with_the_partition_consumer_that_made_it_is_made_again(ray_session, kit):
    """Leadership of t/0, then t/1, moves to broker 3, whose slot has no broker consumer: the
    partition consumer of t/0 makes it (and owns it), that of t/1 finds it by name. The first
    one's death takes the broker consumer with it for good: t/1's partition consumer then finds
    (or makes) a live one by name, rather than calling the dead one for ever, and reads on."""
    config = {"bootstrap.servers": None, "fetch.max.wait.ms": 100, "broker.consumer.actors": 3,
              "partition.consumer.actors": 2}
    with MockCluster(n_brokers=3, topics={"t": 2}) as cluster, \
            Consumer({**config, "bootstrap.servers": cluster.bootstrap}) as consumer:
        consumer.assign("t", 0, "earliest")
        consumer.assign("t", 1, "earliest")
        hosts = {p: consumer._hosts[consumer._slots[("t", p)]] for p in (0, 1)}
        assert hosts[0] is not hosts[1], "one partition consumer each"
        assert sorted(consumer._brokers) == [1, 2], "broker 3's slot has no broker consumer yet"
        for p in (0, 1):
            cluster.move_leader("t", p, 3)
            kit.mock_produce(cluster, "t", p, [b"a"])
            assert consumer.read_all(timeout=20).column("partition").to_pylist() == [p]
        ray.kill(hosts[0], no_restart=True)
        kit.mock_produce(cluster, "t", 1, [b"b"])
        read = []
        for _ in range(6):
            read += consumer.read_all(timeout=5).select(["partition", "offset"]).to_pylist()
            if {"partition": 1, "offset": 1} in read:
                break
        assert {"partition": 1, "offset": 1} in read, read
        assert ("t", 1) not in consumer.failed


# a partition whose consumer has not taken its batch this long pauses: long enough that a feed
# its consumer is slow to take on a busy machine (another test's processes beside it) does not
# pause the partition before its buffer is full, which is what the test below watches
PAUSE_AFTER_MS = 1000


def test_a_slow_partition_pauses_only_itself(ray_session, kit):
    with MockCluster(n_brokers=1, topics={"t": 2}) as cluster, \
            Consumer({"bootstrap.servers": cluster.bootstrap, "fetch.max.wait.ms": 50,
                      "max.partition.fetch.bytes": 1, "max.processing.time.ms": PAUSE_AFTER_MS,
                      "partition.consumer.actors": 2}) as consumer:
        kit.mock_produce(cluster, "t", 0, [b"x%d" % i for i in range(30)], per_batch=1)  # 30 one-record batches
        consumer.assign("t", 0, "earliest")
        consumer.assign("t", 1, "earliest")
        slow, fast = consumer._host_of("t", 0), consumer._host_of("t", 1)
        assert slow is not fast, "two partition consumers, one partition each"
        (broker,) = consumer._brokers.values()
        node = cluster.leader("t", 0)

        def stats():
            return ray.get(broker.stats.remote(node))

        from raykafka.actors.partition_consumer_state import MAX_BUFFERED

        # nobody takes t/0's batches: its buffer fills and its fetching pauses, having fetched up
        # to a full buffer plus the one whose ack waits (a feed slow to be acked on a busy machine
        # may pause it for a while on the way there: it is the pause at the full buffer that counts)
        full = MAX_BUFFERED + 1
        deadline = 0
        while not ("t/0" in (now := stats())["paused"] and now["subscriptions"].get("t/0") == full):
            deadline += 1
            assert deadline < 200, now
            ray.get(fast.poll.remote(0.05))
        # t/1 keeps flowing meanwhile
        kit.mock_produce(cluster, "t", 1, [b"y%d" % i for i in range(5)])
        got = []
        for _ in range(100):
            got += [o for b in ray.get(fast.poll.remote(0.1))[0].batches for o in b.column("offset").to_pylist()]
            if len(got) == 5:
                break
        assert got == [0, 1, 2, 3, 4]
        assert "t/0" in stats()["paused"], "t/0 is still paused while t/1 flowed"
        assert stats()["subscriptions"]["t/0"] == full, "and fetched nothing more"
        # once t/0 is taken it resumes and nothing is lost
        offsets = []
        for _ in range(200):
            offsets += [o for b in ray.get(slow.poll.remote(0.1))[0].batches for o in b.column("offset").to_pylist()]
            if len(offsets) >= 30:
                break
        assert offsets == list(range(30))



def test_a_seek_while_the_long_poll_is_out_reads_on_by_catch_up_fetches(ray_session, kit):
    """Both partitions idle at their end, a 60 s long poll out: after a seek back the partition
    reads on, one batch per fetch, by fetches that do not wait, on the second connection."""
    with MockCluster(n_brokers=1, topics={"t": 2}) as cluster, \
            Consumer({"bootstrap.servers": cluster.bootstrap, "fetch.max.wait.ms": 60_000, "request.timeout.ms": 90_000,
                      "max.partition.fetch.bytes": 1}) as consumer:
        kit.mock_produce(cluster, "t", 0, [b"a%d" % i for i in range(10)], per_batch=1)
        kit.mock_produce(cluster, "t", 1, [b"b%d" % i for i in range(10)], per_batch=1)
        consumer.assign_topic("t", "latest")
        seen = 1
        while not any(r.max_wait_ms == 60_000 for r in cluster.wait_for_requests(messages.FETCH, seen)):
            seen += 1  # until the long poll is out
        before_seek = len(cluster.requests(messages.FETCH))  # a catch-up fetch at the end may come before it
        consumer.seek("t", 0, 3)
        offsets = []
        for batch in consumer.batches(timeout=20):
            offsets += batch.column("offset").to_pylist()
            if len(offsets) >= 7:
                break
        assert offsets == list(range(3, 10)), "read from the seek, long before the long poll could end"
        caught_up = [(p.partition, p.fetch_offset) for r in cluster.requests(messages.FETCH)[before_seek:]
                     if r.max_wait_ms == CATCH_UP_WAIT_MS for t in r.topics for p in t.partitions]
        # (a catch-up fetch of partition 0 at its old end, 10, may still come just after the seek is asked)
        assert [(0, offset) for offset in range(3, 10)] == [tp for tp in caught_up if tp[0] == 0 and tp[1] < 10][:7]


def test_a_partition_assigned_again_after_a_seek_reads_from_its_new_start(ray_session, kit):
    """assign, seek, unassign, assign again: the new assignment counts its seeks afresh, so its
    polls are not dropped as answers from before the old assignment's seek."""
    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster, \
            Consumer({"bootstrap.servers": cluster.bootstrap, "fetch.max.wait.ms": 100}) as consumer:
        kit.mock_produce(cluster, "t", 0, [b"v%d" % i for i in range(10)], per_batch=5)
        consumer.assign("t", 0, "earliest")
        consumer.seek("t", 0, 3)
        assert consumer.read_all(timeout=20).column("offset").to_pylist() == list(range(3, 10))
        consumer.unassign("t", 0)
        consumer.assign("t", 0, "earliest")
        assert consumer.read_all(timeout=10).column("offset").to_pylist() == list(range(10))


def test_a_resume_while_no_leader_is_known_returns_and_subscribes_once_one_is(ray_session, kit):
    """resume() during a leader election (Metadata answers LEADER_NOT_AVAILABLE for the topic a
    few times) returns, as Java's does, rather than raising with the partition subscribed
    nowhere; the partition subscribes once the leader is known, and reads what comes after."""
    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster, \
            Consumer({"bootstrap.servers": cluster.bootstrap, "fetch.max.wait.ms": 100}) as consumer:
        kit.mock_produce(cluster, "t", 0, [b"a"])
        consumer.assign("t", 0, "earliest")
        assert consumer.read_all(timeout=20).column("offset").to_pylist() == [0]
        consumer.pause("t", 0)
        cluster.fail_next(messages.METADATA, BY_NAME["LEADER_NOT_AVAILABLE"].code, count=3, topic="t")
        consumer.resume("t", 0)
        _wait(lambda: cluster.faults["error/Metadata/LEADER_NOT_AVAILABLE"] == 3, "the three look-ups refused")
        kit.mock_produce(cluster, "t", 0, [b"b", b"c"])
        assert consumer.read_all(timeout=20).column("offset").to_pylist() == [1, 2]


def test_end_offsets_wait_out_a_leader_election_and_raise_a_lasting_error_at_once(ray_session):
    """The driver's end-offset look-up (read_all's, batches' until the end) retries a retriable
    error, as Java's endOffsets does, and raises one that retrying cannot mend at once."""
    with MockCluster(n_brokers=1, topics={"t": 2}) as cluster, \
            Consumer({"bootstrap.servers": cluster.bootstrap, "retry.backoff.ms": 50}) as consumer:
        cluster.fail_next(messages.METADATA, BY_NAME["LEADER_NOT_AVAILABLE"].code, count=3, topic="t")
        assert consumer.end_offsets("t") == {0: 0, 1: 0}
        assert cluster.faults["error/Metadata/LEADER_NOT_AVAILABLE"] == 3
        cluster.fail_next(messages.METADATA, BY_NAME["TOPIC_AUTHORIZATION_FAILED"].code, topic="t")
        started = time.monotonic()
        with pytest.raises(BrokerError, match="TOPIC_AUTHORIZATION_FAILED"):
            consumer.end_offsets("t")
        assert time.monotonic() - started < 5


def test_log_bounds_ask_list_offsets_only_for_a_log_that_no_longer_starts_at_zero(kit):
    """A 1-byte Fetch at 0 gives start and end where the log starts at 0; the partition whose
    log starts at 7 answers OFFSET_OUT_OF_RANGE and is the only one ListOffsets is asked for."""
    with MockCluster(n_brokers=2, topics={"t": 3}) as cluster:
        cluster.topics["t"].partitions[1].log_start_offset = 7
        kit.mock_produce(cluster, "t", 0, [b"a"] * 5)
        kit.mock_produce(cluster, "t", 1, [b"b"] * 5)

        async def go():
            c = Cluster(parse_config({"bootstrap.servers": cluster.bootstrap}))
            try:
                return await log_bounds(c, "t")
            finally:
                await c.close()

        earliest, latest = asyncio.run(go())
        assert (earliest, latest) == ({0: 0, 1: 7, 2: 0}, {0: 5, 1: 12, 2: 0})
        asked = [p.partition_index for r in cluster.requests(messages.LIST_OFFSETS) for t in r.topics
                 for p in t.partitions]
        assert asked == [1]


def test_a_new_partition_triggers_a_rebalance_that_picks_it_up(ray_session, kit):
    @ray.remote(num_cpus=0)
    class Seen:
        def __init__(self):
            self.items = []

        def add(self, items):
            self.items += items

        def get(self):
            return self.items

    seen = Seen.remote()

    def handle(batch):
        ray.get(seen.add.remote(list(zip(batch.column("partition").to_pylist(), batch.column("value").to_pylist(),
                                         strict=True))))

    with MockCluster(n_brokers=1, topics={"g": 2}) as cluster:
        config = {"bootstrap.servers": cluster.bootstrap, "group.id": "grow", "auto.offset.reset": "earliest",
                  "topic.metadata.refresh.interval.ms": 300, "heartbeat.interval.ms": 200,
                  "session.timeout.ms": 6000, "fetch.max.wait.ms": 100}
        group = ConsumerGroup(config, ["g"], handle, members=2)
        try:
            def claims():
                return sorted(p for s in group.status() for p in s["claims"].get("g", []))

            _wait(lambda: claims() == [0, 1], "the first split")
            generation = group.status()[0]["generation_id"]
            with cluster.lock:  # the mock has no CreatePartitions: grow the topic in its state
                cluster.topics["g"].partitions.append(PartitionState(leader=1))
            _wait(lambda: claims() == [0, 1, 2], "a rebalance that claims partition 2")
            assert group.status()[0]["generation_id"] > generation
            kit.mock_produce(cluster, "g", 2, [b"new"])
            _wait(lambda: (2, b"new") in ray.get(seen.get.remote()), "the message in partition 2 processed")
        finally:
            group.close()


def test_members_whose_claims_are_all_committed_see_no_partition_count_change(ray_session, kit):
    """A group starts again where every partition has a committed offset: its members resolve no
    offset, so a follower may know no partition count yet. Its partition check must not take the
    first count it looks up for the topic growing: no rebalance follows the first split."""
    with MockCluster(n_brokers=1, topics={"c": 2}) as cluster:
        for p in (0, 1):
            kit.mock_produce(cluster, "c", p, [b"x"])
        config = {"bootstrap.servers": cluster.bootstrap, "group.id": "steady", "auto.offset.reset": "earliest",
                  "topic.metadata.refresh.interval.ms": 300, "heartbeat.interval.ms": 200,
                  "session.timeout.ms": 6000, "fetch.max.wait.ms": 100}

        first = ConsumerGroup(config, ["c"], lambda batch: None, members=1)
        try:
            _wait(lambda: sum(len(s["committed"]) for s in first.status()) >= 2, "both partitions committed")
        finally:
            first.close()
        group = ConsumerGroup(config, ["c"], lambda batch: None, members=2)

        def split():  # each member one partition, both in the same generation
            statuses = group.status()
            return sorted(tuple(s["claims"].get("c", [])) for s in statuses) == [(0,), (1,)] and \
                len({s["generation_id"] for s in statuses}) == 1

        try:
            _wait(split, "the split")
            generations = {s["generation_id"] for s in group.status()}
            time.sleep(3)  # ten partition checks
            assert split()
            assert {s["generation_id"] for s in group.status()} == generations, group.status()
        finally:
            group.close()


def _wait(predicate, what, timeout=60):
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_the_group_surfaces_a_member_that_ended_and_closes_every_actor(ray_session, kit, live_actors_of):
    """A handler that always raises: after `max_handler_failures` the member ends; `errors()` and
    `check()` say which member and why, and `close()` reports it and leaves no actor."""
    from raykafka.wire.errors import ConsumerError

    def handle(batch):
        raise ValueError("this handler always fails")

    with MockCluster(n_brokers=1, topics={"g": 2}) as cluster:
        kit.mock_produce(cluster, "g", 0, [b"a"])
        config = {"bootstrap.servers": cluster.bootstrap, "group.id": "ends", "auto.offset.reset": "earliest",
                  "heartbeat.interval.ms": 200, "session.timeout.ms": 6000, "fetch.max.wait.ms": 100}
        group = ConsumerGroup(config, ["g"], handle, members=2, max_handler_failures=2)
        try:
            _wait(lambda: any(e.kind == "fatal" for e in group.errors()), "a member to end")
            with pytest.raises(ConsumerError, match=r"member \d: .*failed 2 times in a row.*always fails"):
                group.check()
        finally:
            ended = group.close()
    assert any(r["fatal"] and "always fails" in r["fatal"] for r in ended), ended
    assert live_actors_of() == []
