"""Admin against the real broker (tansu): topics, the cluster, consumer groups of confluent-kafka
and of our own `ConsumerGroup`, their offsets and lag, resets refused while a group has members
and taken by the next consumer once it is empty.

Configs on tansu: IncrementalAlterConfigs sets and deletes, DescribeConfigs reads them back, and
the calls tansu 0.6 cannot take (AlterConfigs, DeleteRecords) are named errors after which the
client goes on.

On the mock cluster, what tansu 0.6 cannot show: a broker that grows a topic (CreatePartitions),
members' assignments as librdkafka wrote them (tansu's DescribeGroups carries none), a
coordinator that moves, a broker that never answers, AlterConfigs replacing a topic's configs,
brokers' configs, and DeleteRecords moving log starts (read back by confluent-kafka).
"""

from __future__ import annotations

import time

import pytest

from raykafka.driver.admin import Admin
from raykafka.mock import MockCluster, PartitionState
from raykafka.wire import messages
from raykafka.wire.admin import TopicPartition
from raykafka.wire.errors import (
    BY_NAME,
    BrokerConnectionError,
    BrokerError,
    GroupNotEmptyError,
    RequestTimedOutError,
    UnknownTopicError,
    UnsupportedVersionError,
)

from ..conftest import TANSU_GROUP_SESSION_MS

# tansu answers a join after half of session.timeout.ms
FAST_GROUP = {"session.timeout.ms": TANSU_GROUP_SESSION_MS, "heartbeat.interval.ms": 500}
T0 = 1_700_000_000_000  # record timestamps: T0 + 1000 * offset in every partition


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    """`per_partition` records in each partition with confluent-kafka, offset i stamped T0 + 1000 i."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    failed: list[object] = []
    for i in range(per_partition):
        for p in range(partitions):
            producer.produce(topic, f"{p}-{i}".encode(), partition=p, timestamp=T0 + 1000 * i,
                             on_delivery=lambda err, _msg: err and failed.append(err))
    assert producer.flush(30) == 0
    assert not failed, failed[:3]


def confluent_consumer(bootstrap: str, group_id: str, **extra: object):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": group_id, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, **FAST_GROUP, **extra})


def poll_records(consumer, count: int, wait_for) -> list:
    """Poll until `count` records arrived (the first poll joins the group)."""
    got: list = []

    def enough() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg)
        return len(got) >= count

    wait_for(enough, timeout=60)
    return got


# ---------------------------------------------------------------------------
# On tansu


@pytest.mark.broker
def test_topics_described_with_partitions_and_configs_and_the_cluster(bootstrap, topic_name):
    name = topic_name("described")
    with Admin(bootstrap) as admin:
        admin.create_topics({name: 3}, config={"retention.ms": "86400000", "cleanup.policy": "delete"})
        described = admin.describe_topics(name)[name]
        cluster = admin.describe_cluster()

        assert [p.partition for p in described.partitions] == [0, 1, 2]
        node_ids = {b.node_id for b in cluster.brokers}
        assert all(p.leader in node_ids and p.leader in p.isr for p in described.partitions)
        assert described.configs["retention.ms"].value == "86400000"
        assert described.configs["cleanup.policy"].value == "delete"
        assert not described.is_internal and described.topic_id.int != 0

        assert cluster.cluster_id and cluster.controller_id in node_ids
        assert any(b.port == int(bootstrap.rsplit(":", 1)[1]) for b in cluster.brokers)
        assert name in admin.describe_topics(include_configs=False)

        with pytest.raises(UnknownTopicError, match="does not exist"):
            admin.describe_topics([name, topic_name("missing")])
        admin.delete_topics([name])
        assert name not in admin.list_topics()


@pytest.mark.broker
def test_create_partitions_on_tansu_is_a_named_error_and_the_connection_survives(bootstrap, topic_name):
    name = topic_name("grow")
    with Admin(bootstrap) as admin:
        admin.create_topics({name: 2})
        with pytest.raises(UnsupportedVersionError, match=f"create partitions for '{name}'.*CreatePartitions"):
            admin.create_partitions(name, 4)  # tansu 0.6 does not list it, and hangs up on one
        assert admin.list_topics()[name] == 2


@pytest.mark.broker
def test_incremental_alter_configs_on_tansu_set_and_delete_read_back(bootstrap, topic_name):
    name = topic_name("configs")
    with Admin(bootstrap) as admin:
        admin.create_topics({name: 1}, config={"retention.ms": "86400000"})
        admin.incremental_alter_configs(name, set={"retention.ms": "3600000", "cleanup.policy": "compact"})
        configs = admin.describe_configs(name)[name]
        assert (configs["retention.ms"].value, configs["cleanup.policy"].value) == ("3600000", "compact")
        admin.incremental_alter_configs(name, delete=["cleanup.policy"])
        assert {k: c.value for k, c in admin.describe_configs(name)[name].items()} == {"retention.ms": "3600000"}
        with pytest.raises(UnknownTopicError, match="does not exist"):
            admin.incremental_alter_configs(topic_name("missing"), set={"retention.ms": "1"})


@pytest.mark.broker
def test_what_tansu_cannot_take_of_configs_and_records_is_a_named_error(bootstrap, topic_name):
    name = topic_name("legacy")
    with Admin(bootstrap) as admin:
        admin.create_topics({name: 1})
        with pytest.raises(UnsupportedVersionError, match=f"alter configs of topic '{name}'.*AlterConfigs"):
            admin.alter_configs(name, {"retention.ms": "1"})  # tansu 0.6 does not list it
        with pytest.raises(BrokerConnectionError, match="delete records on broker"):
            admin.delete_records({(name, 0): 0})  # listed, but tansu 0.6 hangs up on it
        assert admin.list_topics()[name] == 1  # the client goes on
        assert all(configs == {} for configs in admin.describe_broker_configs().values())  # tansu lists none


@pytest.mark.broker
def test_a_confluent_group_offsets_read_refused_while_active_reset_and_resumed(bootstrap, topic_name, wait_for):
    topic, group_id = topic_name("offsets"), topic_name("g")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 3})
        produce(bootstrap, topic, 3, 10)
        assert admin.list_offsets(topic, "latest") == {0: 10, 1: 10, 2: 10}
        assert admin.list_offsets(topic, "earliest") == {0: 0, 1: 0, 2: 0}
        assert admin.list_offsets(topic, {"timestamp": T0 + 6000}) == {0: 6, 1: 6, 2: 6}

        from confluent_kafka import TopicPartition as CKPartition

        consumer = confluent_consumer(bootstrap, group_id)
        consumer.subscribe([topic])
        try:
            poll_records(consumer, 1, wait_for)  # joined and reading
            consumer.commit(offsets=[CKPartition(topic, 0, 4), CKPartition(topic, 1, 10)], asynchronous=False)

            assert admin.committed_offsets(group_id) == {TopicPartition(topic, 0): 4, TopicPartition(topic, 1): 10}
            lag = {o.partition: (o.committed, o.end, o.lag) for o in admin.group_offsets(group_id, topic)}
            assert lag == {0: (4, 10, 6), 1: (10, 10, 0), 2: (None, 10, None)}

            group = admin.describe_group(group_id)
            assert group.state == "Stable" and group.protocol_type == "consumer"
            assert [m.member_id for m in group.members] == [consumer.memberid()]
            assert group_id in {g.group_id for g in admin.list_groups()}

            before = admin.committed_offsets(group_id)
            with pytest.raises(GroupNotEmptyError, match="Stable with 1 member"):
                admin.reset_offsets(group_id, topic, "earliest")
            with pytest.raises(GroupNotEmptyError, match="Stable with 1 member"):
                admin.alter_offsets(group_id, {(topic, 2): 3})
            with pytest.raises(GroupNotEmptyError, match="Stable with 1 member"):
                admin.delete_groups(group_id)  # tansu itself would delete it
            assert admin.committed_offsets(group_id) == before
        finally:
            consumer.close()  # leaves the group

        assert admin.describe_group(group_id).inactive
        planned = admin.reset_offsets(group_id, {topic: [0]}, "earliest", dry_run=True)
        assert planned == {TopicPartition(topic, 0): 0}
        assert admin.committed_offsets(group_id) == before  # a dry run commits nothing

        assert admin.reset_offsets(group_id, {topic: [0]}, {"timestamp": T0 + 2000}) == {TopicPartition(topic, 0): 2}
        assert admin.reset_offsets(group_id, {topic: [1]}, 99) == {TopicPartition(topic, 1): 10}  # clamped to the end
        admin.alter_offsets(group_id, {(topic, 2): 7})
        assert admin.committed_offsets(group_id, topic) == {
            TopicPartition(topic, 0): 2, TopicPartition(topic, 1): 10, TopicPartition(topic, 2): 7}

        # confluent-kafka resumes where our reset put the group
        resumed = confluent_consumer(bootstrap, group_id)
        resumed.subscribe([topic])
        try:
            records = poll_records(resumed, 8 + 3, wait_for)
        finally:
            resumed.close()
        firsts: dict[int, int] = {}
        for r in records:
            firsts.setdefault(r.partition(), r.offset())
        assert firsts == {0: 2, 2: 7}

        admin.delete_groups(group_id)
        assert admin.committed_offsets(group_id) == {}
        assert group_id not in {g.group_id for g in admin.list_groups()}


@pytest.mark.broker
@pytest.mark.ray
def test_our_group_described_its_lag_read_and_a_reset_resumed_by_our_next_group(bootstrap, topic_name, wait_for,
                                                                                  ray_session):
    import ray

    from raykafka.driver.consumer_group import ConsumerGroup

    @ray.remote(num_cpus=0)
    class Seen:
        def __init__(self):
            self.offsets: list[tuple[int, int]] = []

        def add(self, items):
            self.offsets.extend(items)

        def get(self):
            return self.offsets

    def handler(seen):
        def handle(batch):
            ray.get(seen.add.remote(list(zip(batch.column("partition").to_pylist(),
                                             batch.column("offset").to_pylist(), strict=True))))
        return handle

    topic, group_id = topic_name("ours"), topic_name("g")
    config = {"bootstrap.servers": bootstrap, "group.id": group_id, "auto.offset.reset": "earliest",
              "auto.commit.interval.ms": 300, **FAST_GROUP}
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 2})
        produce(bootstrap, topic, 2, 10)
        first = Seen.remote()
        with ConsumerGroup(config, [topic], handler(first), members=1) as group:
            wait_for(lambda: admin.committed_offsets(group_id) == {TopicPartition(topic, 0): 10,
                                                                   TopicPartition(topic, 1): 10}, timeout=60)
            described = admin.describe_group(group_id)
            assert described.state == "Stable"
            assert [m.member_id for m in described.members] == [s["member_id"] for s in group.status()]
            assert [o.lag for o in admin.group_offsets(group_id)] == [0, 0]
            with pytest.raises(GroupNotEmptyError):
                admin.reset_offsets(group_id, topic, "earliest")
        assert admin.describe_group(group_id).inactive

        targets = admin.reset_offsets(group_id, topic, {"timestamp": T0 + 4000})
        assert targets == {TopicPartition(topic, 0): 4, TopicPartition(topic, 1): 4}
        assert [o.lag for o in admin.group_offsets(group_id, topic)] == [6, 6]

        again = Seen.remote()
        with ConsumerGroup(config, [topic], handler(again), members=1):
            wait_for(lambda: len(ray.get(again.get.remote())) >= 12, timeout=60)
        seen = ray.get(again.get.remote())
        assert sorted(seen) == [(p, o) for p in (0, 1) for o in range(4, 10)]
        admin.delete_groups(group_id)


# ---------------------------------------------------------------------------
# On the mock cluster


def test_create_partitions_grows_a_topic_where_the_broker_can():
    with MockCluster(1, {"t": 2}) as mock:
        def grow(version, body, broker):
            results = []
            with mock.lock:
                for t in body.topics:
                    partitions = mock.topics[t.name].partitions
                    code = 0
                    if t.count <= len(partitions):
                        code = BY_NAME["INVALID_PARTITIONS"].code
                    else:
                        partitions += [PartitionState(leader=1) for _ in range(t.count - len(partitions))]
                    results.append({"name": t.name, "error_code": code, "error_message": None})
            return {"throttle_time_ms": 0, "results": results}

        mock.set_handler(messages.CREATE_PARTITIONS, grow)
        with Admin(mock.bootstrap) as admin:
            admin.create_partitions("t", 5)
            assert [p.partition for p in admin.describe_topics("t", include_configs=False)["t"].partitions] == [
                0, 1, 2, 3, 4]
            with pytest.raises(BrokerError, match="create partitions for 't': INVALID_PARTITIONS"):
                admin.create_partitions("t", 3)


def test_members_assignments_are_decoded_from_librdkafkas_bytes(wait_for):
    """Two confluent-kafka members share a group on the mock cluster; a broker reporting what they
    sent (their JoinGroup metadata, the leader's SyncGroup plan) is described member by member."""
    with MockCluster(1, {"t": 3, "u": 2}) as mock:
        def describe(version, body, broker):
            plan = [s for s in mock.requests(messages.SYNC_GROUP) if s.assignments][-1]
            joined = {j.member_id: j for j in mock.requests(messages.JOIN_GROUP) if j.member_id}
            members = [{"member_id": a.member_id, "group_instance_id": None, "client_id": "rdkafka",
                        "client_host": "/127.0.0.1",
                        "member_metadata": dict((p.name, p.metadata) for p in joined[a.member_id].protocols)["range"],
                        "member_assignment": a.assignment} for a in plan.assignments]
            return {"throttle_time_ms": 0, "groups": [{
                "error_code": 0, "group_id": body.groups[0], "group_state": "Stable", "protocol_type": "consumer",
                "protocol_data": "range", "members": members, "authorized_operations": -2147483648}]}

        mock.set_handler(messages.DESCRIBE_GROUPS, describe)
        consumers = [confluent_consumer(mock.bootstrap, "g", **{"partition.assignment.strategy": "range"})
                     for _ in range(2)]
        try:
            for c in consumers:
                c.subscribe(["t", "u"])

            def split() -> bool:
                for c in consumers:
                    c.poll(0.1)
                return sum(len(c.assignment()) for c in consumers) == 5 and all(c.assignment() for c in consumers)

            wait_for(split, timeout=30)
            theirs = {c.memberid(): {(tp.topic, tp.partition) for tp in c.assignment()} for c in consumers}
            with Admin(mock.bootstrap) as admin:
                group = admin.describe_group("g")
                with pytest.raises(GroupNotEmptyError, match="Stable with 2 member"):
                    admin.reset_offsets("g", "t", "earliest")
        finally:
            for c in consumers:
                c.close()
        assert group.protocol == "range"
        ours = {m.member_id: {(t, p) for t, ps in m.assignment.items() for p in ps} for m in group.members}
        assert ours == theirs
        assert all(m.topics == ("t", "u") for m in group.members)


def empty_group(version, body, broker):
    """A DescribeGroups answer: the group has no members (the mock cluster has no handler of its own)."""
    return {"throttle_time_ms": 0, "groups": [{
        "error_code": 0, "group_id": body.groups[0], "group_state": "Empty", "protocol_type": "consumer",
        "protocol_data": "", "members": [], "authorized_operations": -2147483648}]}


def test_group_requests_follow_the_coordinator_when_it_moves():
    with MockCluster(2, {"t": 2}, coordinator_id=1) as mock, Admin(mock.bootstrap) as admin:
        mock.set_handler(messages.DESCRIBE_GROUPS, empty_group)
        admin.alter_offsets("g", {("t", 0): 5, ("t", 1): 6})
        mock.coordinator_id = 2  # broker 1 now answers NOT_COORDINATOR for the group
        assert admin.committed_offsets("g") == {TopicPartition("t", 0): 5, TopicPartition("t", 1): 6}
        assert [len(mock.requests(messages.OFFSET_FETCH, node_id=n)) for n in (1, 2)] == [1, 1]


def test_a_member_joining_between_the_check_and_the_commit_is_a_named_refusal():
    with MockCluster(1, {"t": 1}) as mock, Admin(mock.bootstrap) as admin:
        mock.set_handler(messages.DESCRIBE_GROUPS, empty_group)  # empty when asked ...
        mock.fail_next(messages.OFFSET_COMMIT, BY_NAME["UNKNOWN_MEMBER_ID"].code)  # ... not when committed to
        with pytest.raises(GroupNotEmptyError, match="answered UNKNOWN_MEMBER_ID: the group has members"):
            admin.reset_offsets("g", "t", "earliest")
        assert admin.committed_offsets("g") == {}


def test_a_broker_that_never_answers_fails_the_call_within_request_timeout_ms():
    with MockCluster(1, {"t": 1}) as mock:  # it has no DescribeGroups handler: no answer ever comes
        with Admin({"bootstrap.servers": mock.bootstrap, "request.timeout.ms": 1500}) as admin:
            started = time.monotonic()
            with pytest.raises(RequestTimedOutError, match="DescribeGroups|describe_groups"):
                admin.describe_group("g")
            elapsed = time.monotonic() - started
            with pytest.raises(RequestTimedOutError):
                admin.reset_offsets("g", "t", "earliest")
    assert 1.4 < elapsed < 6, elapsed


def test_alter_configs_replaces_the_set_and_incremental_changes_only_its_keys_as_confluent_reads():
    from confluent_kafka.admin import AdminClient, ConfigResource

    with MockCluster(1, {}) as mock, Admin(mock.bootstrap) as admin:
        admin.create_topics({"t": 1}, config={"retention.ms": "1000", "cleanup.policy": "delete"})
        admin.incremental_alter_configs("t", set={"retention.ms": "2000"}, append={"cleanup.policy": "compact"})
        theirs = AdminClient({"bootstrap.servers": mock.bootstrap})
        (future,) = theirs.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "t")]).values()
        assert {k: e.value for k, e in future.result(10).items()} == {
            "retention.ms": "2000", "cleanup.policy": "delete,compact"}
        assert admin.describe_configs("t")["t"]["retention.ms"].source == "DYNAMIC_TOPIC_CONFIG"

        admin.alter_configs("t", {"segment.ms": "60000"})  # the legacy call: the whole set replaced
        assert {k: c.value for k, c in admin.describe_configs("t")["t"].items()} == {"segment.ms": "60000"}
        with pytest.raises(UnknownTopicError, match="alter configs of topic 'u'"):
            admin.alter_configs("u", {})
        mock.fail_next(messages.INCREMENTAL_ALTER_CONFIGS, BY_NAME["INVALID_CONFIG"].code)
        with pytest.raises(BrokerError, match="alter configs of topic 't': INVALID_CONFIG"):
            admin.incremental_alter_configs("t", delete=["segment.ms"])


def test_each_brokers_configs_are_asked_of_that_broker():
    with MockCluster(2, {}, message_max_bytes=2000) as mock, Admin(mock.bootstrap) as admin:
        configs = admin.describe_broker_configs()
        assert sorted(configs) == [1, 2]
        assert all(c["message.max.bytes"].value == "2000" and c["message.max.bytes"].source == "STATIC_BROKER_CONFIG"
                   for c in configs.values())
        assert [[r.resources[0].resource_name for r in mock.requests(messages.DESCRIBE_CONFIGS, node_id=n)]
                for n in (1, 2)] == [["1"], ["2"]]
        mock.fail_next(messages.DESCRIBE_CONFIGS, BY_NAME["CLUSTER_AUTHORIZATION_FAILED"].code)
        with pytest.raises(BrokerError, match="describe configs of broker 1: CLUSTER_AUTHORIZATION_FAILED"):
            admin.describe_broker_configs([1])


def test_delete_records_moves_each_log_start_where_confluent_then_reads_from():
    """Records deleted on each partition's leader (broker 1 leads t/0, broker 2 t/1 until it moves
    to broker 1, which the Admin finds again); confluent-kafka reading from the earliest starts at
    the new log start."""
    from confluent_kafka import TopicPartition as TP

    with MockCluster(2, {"t": 2}) as mock:
        produce(mock.bootstrap, "t", 2, 10)
        with Admin(mock.bootstrap) as admin:
            admin.list_topics()  # the leaders known before one moves
            mock.move_leader("t", 1, 1)
            low = admin.delete_records({("t", 0): 4, ("t", 1): -1})
            assert low == {TopicPartition("t", 0): 4, TopicPartition("t", 1): 10}
            asked = [[(t.name, p.partition_index) for r in mock.requests(messages.DELETE_RECORDS, node_id=n)
                      for t in r.topics for p in t.partitions] for n in (1, 2)]
            assert asked == [[("t", 0), ("t", 1)], [("t", 1)]]  # t/1 on its old leader first
            assert admin.list_offsets("t", "earliest") == {0: 4, 1: 10}
            assert admin.delete_records({("t", 0): 2}) == {TopicPartition("t", 0): 4}  # never back
            with pytest.raises(BrokerError, match="delete records of t/0 before 11: OFFSET_OUT_OF_RANGE"):
                admin.delete_records({("t", 0): 11})
            with pytest.raises(BrokerError, match="delete records of t/5: UNKNOWN_TOPIC_OR_PARTITION"):
                admin.delete_records({("t", 5): 1})
        consumer = confluent_consumer(mock.bootstrap, "g")
        try:
            consumer.assign([TP("t", 0, -2)])  # OFFSET_BEGINNING
            first = None
            deadline = time.monotonic() + 30
            while first is None and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    first = msg
            assert first is not None and (first.offset(), first.value()) == (4, b"0-4")
        finally:
            consumer.close()


def test_an_admin_never_closed_lets_the_interpreter_exit_quietly(bootstrap, topic_name):
    """`Admin(config).create_topics(...)` as the README's tour writes it, and an Admin held to the
    end and never closed: the process exits 0 and says nothing of pending tasks on stderr."""
    import subprocess
    import sys

    script = (
        "from raykafka import Admin\n"
        f"config = {{'bootstrap.servers': {bootstrap!r}}}\n"
        f"Admin(config).create_topics({{{topic_name('unclosed')!r}: 2}})\n"
        "held = Admin(config)\n"
        "print(len(held.list_topics()) > 0)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "True\n"
    assert "Task was destroyed but it is pending" not in done.stderr, done.stderr
    assert done.stderr == "", done.stderr
