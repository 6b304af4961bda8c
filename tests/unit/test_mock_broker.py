"""The mock cluster through our own client (`BrokerConnection`, `Cluster`) over TCP, no Ray.

Each test builds a fresh three-broker `MockCluster` (topic "t", 4 partitions led by brokers
1, 2, 3, 1) and drives it with asyncio. The golden tests compare the bytes the mock writes on
the socket with hand-built frames, so the mock is checked against the spec, not only against
our decoder.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from raykafka.mock import MockCluster
from raykafka.wire import messages
from raykafka.wire.cluster import Cluster
from raykafka.wire.config import parse_config
from raykafka.wire.connection import BrokerConnection
from raykafka.wire.errors import BY_NAME, BrokerConnectionError, RequestTimedOutError, UnknownTopicError
from raykafka.wire.protocol import encode_request
from raykafka.wire.record_decoding import decode_record_batches
from raykafka.wire.record_encoding import encode_record_batch

pytestmark = pytest.mark.timeout(60)


@pytest.fixture()
def mock() -> Iterator[MockCluster]:
    with MockCluster(n_brokers=3, topics={"t": 4}) as cluster:
        yield cluster
        assert cluster.handler_errors == []


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


def new_cluster(mock: MockCluster, **config: Any) -> Cluster:
    return Cluster(parse_config({"bootstrap.servers": mock.bootstrap, **config}))


async def connect(mock: MockCluster, node_id: int, **kwargs: Any) -> BrokerConnection:
    broker = mock.brokers[node_id]
    return await BrokerConnection("127.0.0.1", broker.port, node_id=node_id, **kwargs).connect()


def produce_body(partition: int, batch: bytes, topic: str = "t", acks: int = -1) -> dict[str, Any]:
    return {"acks": acks, "timeout_ms": 1000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}


def fetch_body(partition: int, offset: int, max_wait_ms: int = 0, topic: str = "t") -> dict[str, Any]:
    return {"max_wait_ms": max_wait_ms, "min_bytes": 1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]}


def part(response: Any) -> Any:
    """The one partition of a Produce or Fetch response."""
    if "partition_responses" in response.responses[0]:
        return response.responses[0].partition_responses[0]
    return response.responses[0].partitions[0]


# ---------------------------------------------------------------------------- metadata, versions


def test_metadata_lists_brokers_topics_and_leaders(mock):
    async def scenario():
        cluster = new_cluster(mock)
        try:
            metadata = await cluster.refresh_metadata(["t"])
            assert {n: b.port for n, b in metadata.brokers.items()} == {
                n: b.port for n, b in mock.brokers.items()}
            assert [metadata.leader("t", p) for p in range(4)] == [1, 2, 3, 1]
            with pytest.raises(UnknownTopicError):
                await cluster.topic("missing")
            response = await (await cluster.any_connection()).request(
                messages.METADATA, {"topics": [{"name": "missing"}]})
            assert response.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
        finally:
            await cluster.close()

    run(scenario())


def test_api_versions_advertise_our_declarations_or_the_caps_given():
    with MockCluster(n_brokers=1, max_versions={messages.FETCH: 12, messages.PRODUCE.key: 9}) as mock:
        async def scenario():
            conn = await connect(mock, 1)
            try:
                assert conn.versions[messages.FETCH.key] == (0, 12)
                assert conn.versions[messages.PRODUCE.key] == (0, 9)
                assert conn.versions[messages.METADATA.key] == (0, messages.METADATA.max_version)
                assert set(conn.versions) == set(messages.APIS)
                await conn.request(messages.METADATA, {"topics": None})
            finally:
                await conn.close()

        run(scenario())
        assert mock.brokers[1].request_versions(messages.METADATA) == [messages.METADATA.max_version]


# ---------------------------------------------------------------------------- produce and fetch


def test_produce_then_fetch_round_trip_assigns_offsets(mock):
    async def scenario():
        conn = await connect(mock, 2)  # leader of partition 1
        try:
            first = await conn.request(messages.PRODUCE, produce_body(1, encode_record_batch([b"a", b"b"])))
            second = await conn.request(messages.PRODUCE, produce_body(
                1, encode_record_batch([b"c"], keys=[b"k"], headers=[[("h", b"v")]])))
            assert (part(first).error_code, part(first).base_offset) == (0, 0)
            assert (part(second).error_code, part(second).base_offset) == (0, 2)
            fetched = await conn.request(messages.FETCH, fetch_body(1, 1), version=12)
            p = part(fetched)
            assert (p.error_code, p.high_watermark) == (0, 3)
            # the whole batch holding offset 1 comes back, base offsets rewritten, CRCs still valid
            batches = decode_record_batches(p.records)
            assert [b.base_offset for b in batches] == [0, 2]
            records = [r for b in batches for r in b.records]
            assert [(r.offset, r.key, r.value, r.headers) for r in records] == [
                (0, None, b"a", []), (1, None, b"b", []), (2, b"k", b"c", [("h", b"v")])]
        finally:
            await conn.close()

    run(scenario())
    assert [r.value for r in mock.records("t", 1)] == [b"a", b"b", b"c"]
    assert mock.high_watermark("t", 1) == 3
    assert len(mock.brokers[2].requests(messages.PRODUCE)) == 2


def test_fetch_by_topic_id_at_the_newest_version(mock):
    async def scenario():
        conn = await connect(mock, 1)
        try:
            await conn.request(messages.PRODUCE, produce_body(0, encode_record_batch([b"x"])))
            metadata = await conn.request(messages.METADATA, {"topics": [{"name": "t"}]})
            topic_id = metadata.topics[0].topic_id
            assert topic_id == mock.topic_id("t")
            body = {"max_wait_ms": 0, "min_bytes": 1, "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
            fetched = await conn.request(messages.FETCH, body)
            assert conn.version_for(messages.FETCH) == 17
            assert fetched.responses[0].topic_id == topic_id
            assert [r.value for b in decode_record_batches(part(fetched).records) for r in b.records] == [b"x"]
        finally:
            await conn.close()

    run(scenario())


def test_fetch_waits_for_data_then_answers_at_once(mock):
    async def scenario():
        consumer = await connect(mock, 1)
        producer = await connect(mock, 1)
        try:
            started = time.monotonic()
            waiting = consumer.send_nowait(messages.FETCH, fetch_body(0, 0, max_wait_ms=5000), version=12)
            await asyncio.to_thread(mock.wait_for_requests, messages.FETCH, 1)
            assert not waiting.done()
            await producer.request(messages.PRODUCE, produce_body(0, encode_record_batch([b"late"])))
            fetched = await consumer.wait(waiting, messages.FETCH)
            assert time.monotonic() - started < 4
            assert part(fetched).high_watermark == 1
            assert decode_record_batches(part(fetched).records)[0].records[0].value == b"late"
            # nothing new: the answer comes after max_wait_ms, empty
            started = time.monotonic()
            empty = await consumer.request(messages.FETCH, fetch_body(0, 1, max_wait_ms=200), version=12)
            assert time.monotonic() - started >= 0.19
            assert (part(empty).error_code, part(empty).records) == (0, b"")
        finally:
            await consumer.close()
            await producer.close()

    run(scenario())


def test_fetch_out_of_range_and_list_offsets(mock):
    async def scenario():
        conn = await connect(mock, 1)
        try:
            await conn.request(messages.PRODUCE, produce_body(0, encode_record_batch([b"a", b"b"], timestamps=[100, 200])))
            await conn.request(messages.PRODUCE, produce_body(0, encode_record_batch([b"c"], timestamps=[300])))
            beyond = await conn.request(messages.FETCH, fetch_body(0, 4), version=12)
            assert part(beyond).error_code == 1  # OFFSET_OUT_OF_RANGE
            body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "timestamp": ts} for ts in (-2, -1, 150, 999)]}]}
            listed = await conn.request(messages.LIST_OFFSETS, body)
            assert [p.offset for p in listed.topics[0].partitions] == [0, 3, 1, -1]
            assert listed.topics[0].partitions[2].timestamp == 200
        finally:
            await conn.close()

    run(scenario())


def test_acks_zero_gets_no_answer_but_is_appended(mock):
    async def scenario():
        conn = await connect(mock, 1)
        try:
            assert conn.send_nowait(messages.PRODUCE, produce_body(0, encode_record_batch([b"fire"]), acks=0),
                                    expect_response=False) is None
            # the next request on the same connection is answered, so nothing was left unanswered in between
            after = await conn.request(messages.PRODUCE, produce_body(0, encode_record_batch([b"forget"])))
            assert part(after).base_offset == 1
        finally:
            await conn.close()

    run(scenario())
    assert [r.value for r in mock.records("t", 0)] == [b"fire", b"forget"]


# ---------------------------------------------------------------------------- faults


def test_leader_move_gives_not_leader_then_success_on_the_new_leader(mock):
    async def scenario():
        cluster = new_cluster(mock)
        try:
            await cluster.refresh_metadata(["t"])
            old = await cluster.leader_connection("t", 2)
            assert old.node_id == 3
            await old.request(messages.PRODUCE, produce_body(2, encode_record_batch([b"before"])))
            mock.move_leader("t", 2, 1)
            refused = await old.request(messages.PRODUCE, produce_body(2, encode_record_batch([b"after"])))
            assert part(refused).error_code == 6  # NOT_LEADER_OR_FOLLOWER
            assert part(refused).current_leader.leader_id == 1  # the v10+ hint
            assert [e.node_id for e in refused.node_endpoints] == [1]
            stale = await old.request(messages.FETCH, fetch_body(2, 0), version=12)
            assert part(stale).error_code == 6
            await cluster.refresh_metadata(["t"])
            assert cluster.metadata.topics["t"].partitions[2].leader_epoch == 1
            new = await cluster.leader_connection("t", 2)
            assert new.node_id == 1
            accepted = await new.request(messages.PRODUCE, produce_body(2, encode_record_batch([b"after"])))
            assert (part(accepted).error_code, part(accepted).base_offset) == (0, 1)
        finally:
            await cluster.close()

    run(scenario())
    assert [r.value for r in mock.records("t", 2)] == [b"before", b"after"]
    assert mock.faults["leader_move"] == 1


def test_fail_next_injects_error_codes_on_matching_partitions_only(mock):
    mock.fail_next(messages.PRODUCE, 7, count=2, partition=0)  # REQUEST_TIMED_OUT
    mock.fail_next(messages.FIND_COORDINATOR, 15)  # COORDINATOR_NOT_AVAILABLE

    async def scenario():
        conn = await connect(mock, 1)
        try:
            both = {"acks": -1, "timeout_ms": 1000, "topic_data": [{"name": "t", "partition_data": [
                {"index": 0, "records": encode_record_batch([b"p0"])},
                {"index": 3, "records": encode_record_batch([b"p3"])}]}]}
            first = await conn.request(messages.PRODUCE, both)
            codes = [p.error_code for p in first.responses[0].partition_responses]
            assert codes == [7, 0]
            second = await conn.request(messages.PRODUCE, produce_body(0, encode_record_batch([b"p0"])))
            third = await conn.request(messages.PRODUCE, produce_body(0, encode_record_batch([b"p0"])))
            assert (part(second).error_code, part(third).error_code) == (7, 0)
            coordinator = await conn.request(messages.FIND_COORDINATOR, {"key": "g"}, version=3)
            assert coordinator.error_code == 15
            coordinator = await conn.request(messages.FIND_COORDINATOR, {"key": "g"}, version=3)
            assert (coordinator.error_code, coordinator.node_id) == (0, 1)
        finally:
            await conn.close()

    run(scenario())
    assert [r.value for r in mock.records("t", 0)] == [b"p0"]  # the failed ones were not appended
    assert mock.faults == {"error/Produce/REQUEST_TIMED_OUT": 2,
                           "error/FindCoordinator/COORDINATOR_NOT_AVAILABLE": 1}


@pytest.mark.parametrize("apply", [False, True])
def test_dropped_connection_fails_the_pending_request(mock, apply):
    mock.drop_after_request(messages.PRODUCE, node_id=1, apply=apply)

    async def scenario():
        conn = await connect(mock, 1)
        try:
            with pytest.raises(BrokerConnectionError, match="lost"):
                await conn.request(messages.PRODUCE, produce_body(0, encode_record_batch([b"maybe"])))
            assert not conn.connected
        finally:
            await conn.close()
        again = await connect(mock, 1)  # the broker itself is fine: a new connection works
        try:
            answer = await again.request(messages.PRODUCE, produce_body(0, encode_record_batch([b"next"])))
            assert (part(answer).error_code, part(answer).base_offset) == (0, 1 if apply else 0)
        finally:
            await again.close()

    run(scenario())
    expected = [b"maybe", b"next"] if apply else [b"next"]
    assert [r.value for r in mock.records("t", 0)] == expected
    assert mock.faults == {("drop/Produce/applied" if apply else "drop/Produce"): 1}


def test_duplicate_and_out_of_order_sequences(mock):
    async def scenario():
        conn = await connect(mock, 1)
        try:
            init = await conn.request(messages.INIT_PRODUCER_ID, {"transactional_id": None,
                                                                  "transaction_timeout_ms": 60000})
            pid, epoch = init.producer_id, init.producer_epoch
            assert (init.error_code, epoch) == (0, 0)

            def batch(values: list[bytes], seq: int, e: int = epoch) -> bytes:
                return encode_record_batch(values, producer_id=pid, producer_epoch=e, base_sequence=seq)

            async def send(b: bytes) -> Any:
                return part(await conn.request(messages.PRODUCE, produce_body(0, b)))

            assert (await send(batch([b"a", b"b"], 0))).error_code == 0
            duplicate = await send(batch([b"a", b"b"], 0))  # a retry of a batch already written
            assert (duplicate.error_code, duplicate.base_offset) == (46, 0)
            assert (await send(batch([b"d"], 3))).error_code == 45  # sequence 2 is missing
            assert (await send(batch([b"c"], 2))).base_offset == 2
            assert (await send(batch([b"new"], 5))).error_code == 45
            # a bumped epoch starts again at sequence 0; the old epoch is then fenced
            bumped = await conn.request(messages.INIT_PRODUCER_ID, {
                "transactional_id": None, "transaction_timeout_ms": 60000,
                "producer_id": pid, "producer_epoch": epoch})
            assert (bumped.producer_id, bumped.producer_epoch) == (pid, epoch + 1)
            assert (await send(batch([b"e"], 0, epoch + 1))).base_offset == 3
            assert (await send(batch([b"f"], 3, epoch))).error_code == 47  # INVALID_PRODUCER_EPOCH
            other = await conn.request(messages.INIT_PRODUCER_ID, {"transactional_id": None,
                                                                   "transaction_timeout_ms": 60000})
            assert other.producer_id != pid
        finally:
            await conn.close()

    run(scenario())
    assert [r.value for r in mock.records("t", 0)] == [b"a", b"b", b"c", b"e"]


def test_only_the_last_five_batches_are_recognised_as_duplicates(mock):
    """As Kafka's broker (ProducerStateEntry keeps 5 batches per producer and partition): a
    re-sent batch among the last 5 is DUPLICATE_SEQUENCE_NUMBER with the offset it was written
    at; one older than that is OUT_OF_ORDER_SEQUENCE_NUMBER; neither is written again. A batch
    with the same first sequence but other records is no duplicate."""
    duplicate, out_of_order = BY_NAME["DUPLICATE_SEQUENCE_NUMBER"].code, BY_NAME["OUT_OF_ORDER_SEQUENCE_NUMBER"].code

    async def scenario():
        conn = await connect(mock, 1)
        try:
            init = await conn.request(messages.INIT_PRODUCER_ID, {"transactional_id": None,
                                                                  "transaction_timeout_ms": 60000})

            def batch(values: list[bytes], seq: int) -> bytes:
                return encode_record_batch(values, producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                                           base_sequence=seq)

            async def send(b: bytes) -> Any:
                return part(await conn.request(messages.PRODUCE, produce_body(0, b)))

            sent = [batch([b"%d-a" % i, b"%d-b" % i], 2 * i) for i in range(7)]  # offsets 0, 2, ..., 12
            for i, b in enumerate(sent):
                assert ((await send(b)).error_code, i) == (0, i)
            for i in range(2, 7):  # the last five
                answer = await send(sent[i])
                assert (answer.error_code, answer.base_offset) == (duplicate, 2 * i)
            for i in range(2):  # older: the broker no longer knows them
                assert (await send(sent[i])).error_code == out_of_order
            assert (await send(batch([b"6-a"], 12))).error_code == out_of_order  # same first sequence, fewer records
            assert (await send(batch([b"next"], 14))).base_offset == 14
        finally:
            await conn.close()

    run(scenario())
    assert len(mock.records("t", 0)) == 15


def test_corrupt_batch_is_refused(mock):
    good = bytearray(encode_record_batch([b"value"]))
    good[-3] ^= 0xFF  # a byte inside the CRC's span

    async def scenario():
        conn = await connect(mock, 1)
        try:
            answer = await conn.request(messages.PRODUCE, produce_body(0, bytes(good)))
            assert part(answer).error_code == 2  # CORRUPT_MESSAGE
        finally:
            await conn.close()

    run(scenario())
    assert mock.records("t", 0) == []


def test_set_handler_scripts_answers_and_unscripted_requests_get_none(mock):
    seen = []

    def metadata(version, body, broker):
        seen.append((version, broker.node_id))
        return {"brokers": [{"node_id": 7, "host": "127.0.0.1", "port": broker.port}], "topics": []}

    mock.set_handler(messages.METADATA, metadata, node_id=2)

    async def scenario():
        conn = await connect(mock, 2, request_timeout_ms=300)
        try:
            response = await conn.request(messages.METADATA, {"topics": None})
            assert [b.node_id for b in response.brokers] == [7]
            with pytest.raises(RequestTimedOutError):  # DescribeGroups has no default handler
                await conn.request(messages.DESCRIBE_GROUPS, {"groups": ["g"]})
        finally:
            await conn.close()
        other = await connect(mock, 3)  # the script was for broker 2 only
        try:
            response = await other.request(messages.METADATA, {"topics": None})
            assert sorted(b.node_id for b in response.brokers) == [1, 2, 3]
        finally:
            await other.close()

    run(scenario())
    assert seen == [(messages.METADATA.max_version, 2)]
    assert len(mock.requests(messages.DESCRIBE_GROUPS)) == 1


def test_delay_holds_the_answer_and_a_short_timeout_fails_it(mock):
    mock.delay(messages.PRODUCE, 0.3)

    async def scenario():
        conn = await connect(mock, 1)
        try:
            started = time.monotonic()
            answer = await conn.request(messages.PRODUCE, produce_body(0, encode_record_batch([b"slow"])))
            assert part(answer).error_code == 0
            assert time.monotonic() - started >= 0.29
            with pytest.raises(RequestTimedOutError):
                await conn.request(messages.PRODUCE, produce_body(0, encode_record_batch([b"late"])), timeout=0.05)
        finally:
            await conn.close()

    run(scenario())
    # the timed-out request was applied: the client cannot know, exactly as with a real broker
    assert [r.value for r in mock.records("t", 0)] == [b"slow", b"late"]
    assert mock.faults["delay/Produce"] == 2


def test_stop_and_start_broker(mock):
    async def scenario():
        conn = await connect(mock, 2)
        port = mock.brokers[2].port
        try:
            pending = conn.send_nowait(messages.FETCH, fetch_body(1, 0, max_wait_ms=10000), version=12)
            await wait_for(lambda: len(mock.requests(messages.FETCH)) == 1)
            mock.stop_broker(2)  # callable from inside a running loop too
            with pytest.raises(BrokerConnectionError):
                await conn.wait(pending, messages.FETCH)
            with pytest.raises(BrokerConnectionError, match="cannot connect"):
                await connect(mock, 2)
            mock.start_broker(2)
            assert mock.brokers[2].port == port
            again = await connect(mock, 2)
            answer = await again.request(messages.PRODUCE, produce_body(1, encode_record_batch([b"back"])))
            assert part(answer).error_code == 0
            await again.close()
        finally:
            await conn.close()

    run(scenario())
    assert mock.faults["broker_stop"] == 1


# ---------------------------------------------------------------------------- groups


def test_two_member_group_join_sync_rebalance_commit(mock):
    async def scenario():
        cluster = new_cluster(mock)
        try:
            coordinator = await cluster.coordinator("g")
            assert coordinator.node_id == 1
            join = {"group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 2000,
                    "member_id": "", "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"m"}]}
            first = await coordinator.request(messages.JOIN_GROUP, join)
            assert first.error_code == 79  # MEMBER_ID_REQUIRED, with the id to come back with
            a = await coordinator.request(messages.JOIN_GROUP, {**join, "member_id": first.member_id})
            assert (a.error_code, a.generation_id, a.leader, a.protocol_name) == (0, 1, a.member_id, "range")
            synced = await coordinator.request(messages.SYNC_GROUP, {
                "group_id": "g", "generation_id": 1, "member_id": a.member_id,
                "assignments": [{"member_id": a.member_id, "assignment": b"all"}]})
            assert (synced.error_code, synced.assignment) == (0, b"all")

            # a second member joins: its JoinGroup waits until the first rejoins
            other = await connect(mock, 1)
            b_id = (await other.request(messages.JOIN_GROUP, join)).member_id
            b_join = other.send_nowait(messages.JOIN_GROUP, {**join, "member_id": b_id})
            await wait_for(lambda: len(mock.requests(messages.JOIN_GROUP)) == 4)
            beat = await coordinator.request(messages.HEARTBEAT, {"group_id": "g", "generation_id": 1,
                                                                  "member_id": a.member_id})
            assert beat.error_code == 27  # REBALANCE_IN_PROGRESS
            # while it prepares the rebalance, the generation still current commits (Kafka's rule)
            preparing = await coordinator.request(messages.OFFSET_COMMIT, {
                "group_id": "g", "generation_id_or_member_epoch": 1, "member_id": a.member_id,
                "topics": [{"name": "t", "partitions": [{"partition_index": 1, "committed_offset": 7,
                                                          "committed_metadata": None}]}]})
            assert preparing.topics[0].partitions[0].error_code == 0
            a2 = await coordinator.request(messages.JOIN_GROUP, {**join, "member_id": a.member_id})
            b2 = await other.wait(b_join, messages.JOIN_GROUP)
            assert (a2.generation_id, b2.generation_id) == (2, 2)
            assert sorted(m.member_id for m in a2.members) == sorted([a.member_id, b_id]) and b2.members == []
            b_sync = other.send_nowait(messages.SYNC_GROUP, {"group_id": "g", "generation_id": 2,
                                                             "member_id": b_id, "assignments": []})
            a_sync = await coordinator.request(messages.SYNC_GROUP, {
                "group_id": "g", "generation_id": 2, "member_id": a.member_id,
                "assignments": [{"member_id": a.member_id, "assignment": b"A"},
                                {"member_id": b_id, "assignment": b"B"}]})
            assert (a_sync.assignment, (await other.wait(b_sync, messages.SYNC_GROUP)).assignment) == (b"A", b"B")

            commit = await coordinator.request(messages.OFFSET_COMMIT, {
                "group_id": "g", "generation_id_or_member_epoch": 2, "member_id": a.member_id,
                "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 42,
                                                          "committed_metadata": None}]}]})
            assert commit.topics[0].partitions[0].error_code == 0
            stale = await coordinator.request(messages.OFFSET_COMMIT, {
                "group_id": "g", "generation_id_or_member_epoch": 1, "member_id": a.member_id,
                "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                          "committed_metadata": None}]}]})
            assert stale.topics[0].partitions[0].error_code == 22  # ILLEGAL_GENERATION
            fetched = await coordinator.request(messages.OFFSET_FETCH, {"groups": [
                {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]}]})
            assert [p.committed_offset for p in fetched.groups[0].topics[0].partitions] == [42, 7]
            old_style = await coordinator.request(messages.OFFSET_FETCH, {
                "group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]}, version=7)
            assert old_style.topics[0].partitions[0].committed_offset == 42

            left = await other.request(messages.LEAVE_GROUP, {"group_id": "g", "members": [{"member_id": b_id}]})
            assert (left.error_code, left.members[0].error_code) == (0, 0)
            beat = await coordinator.request(messages.HEARTBEAT, {"group_id": "g", "generation_id": 2,
                                                                  "member_id": a.member_id})
            assert beat.error_code == 27
            await other.close()
            away = await cluster.connection(2)
            refused = await away.request(messages.HEARTBEAT, {"group_id": "g", "generation_id": 2,
                                                              "member_id": a.member_id})
            assert refused.error_code == 16  # NOT_COORDINATOR
        finally:
            await cluster.close()

    run(scenario())


# ---------------------------------------------------------------------------- golden bytes


def exchange(port: int, frame: bytes) -> bytes:
    """Send one request frame on a plain socket; the whole response frame, size prefix included."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(frame)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "the mock closed the connection"
            data += chunk
        return data


def test_golden_produce_response_v7(mock):
    batch = encode_record_batch([b"v"], timestamps=0)
    frame = encode_request(messages.PRODUCE, 7, 7, "golden", produce_body(0, batch))
    body = (
        b"\x00\x00\x00\x07"  # correlation_id 7 (response header v0: nothing else)
        b"\x00\x00\x00\x01"  # responses: array of 1
        b"\x00\x01t"  # name: int16 length 1, "t"
        b"\x00\x00\x00\x01"  # partition_responses: array of 1
        b"\x00\x00\x00\x00"  # index 0
        b"\x00\x00"  # error_code 0
        b"\x00\x00\x00\x00\x00\x00\x00\x00"  # base_offset 0
        b"\xff\xff\xff\xff\xff\xff\xff\xff"  # log_append_time_ms -1 (v2+): create time in use
        b"\x00\x00\x00\x00\x00\x00\x00\x00"  # log_start_offset 0 (v5+)
        b"\x00\x00\x00\x00"  # throttle_time_ms 0 (v1+)
    )
    assert exchange(mock.brokers[1].port, frame) == struct.pack(">i", len(body)) + body


def test_golden_produce_response_v9_flexible(mock):
    mock.move_leader("t", 0, 2)  # so the answer is an error, at offset -1
    batch = encode_record_batch([b"v"], timestamps=0)
    frame = encode_request(messages.PRODUCE, 9, 3, "golden", produce_body(0, batch))
    body = (
        b"\x00\x00\x00\x03"  # correlation_id 3
        b"\x00"  # response header v1: no tagged fields
        b"\x02"  # responses: compact array of 1 (length + 1)
        b"\x02t"  # name: compact string of 1, "t"
        b"\x02"  # partition_responses: compact array of 1
        b"\x00\x00\x00\x00"  # index 0
        b"\x00\x06"  # error_code 6 NOT_LEADER_OR_FOLLOWER
        b"\xff\xff\xff\xff\xff\xff\xff\xff"  # base_offset -1
        b"\xff\xff\xff\xff\xff\xff\xff\xff"  # log_append_time_ms -1
        b"\xff\xff\xff\xff\xff\xff\xff\xff"  # log_start_offset -1
        b"\x01"  # record_errors: compact array of 0 (v8+)
        b"\x00"  # error_message: compact nullable string, null (v8+)
        b"\x00"  # partition tagged fields: none (current_leader is v10+)
        b"\x00"  # topic tagged fields: none
        b"\x00\x00\x00\x00"  # throttle_time_ms 0
        b"\x00"  # response tagged fields: none (node_endpoints is v10+)
    )
    assert exchange(mock.brokers[1].port, frame) == struct.pack(">i", len(body)) + body
