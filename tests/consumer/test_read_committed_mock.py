"""read_committed on the mock cluster, through every fetch path that hands records out: the
`Consumer` (partition and broker consumers), a `ConsumerGroup` member and a Ray Data read.

One partition holds interleaved transactions of two producers, committed and aborted, a
record of no transaction and one of a transaction still open. A read_committed reader hands
out exactly the committed records, in offset order, whether the broker lists the aborted
transactions (Kafka, Java's rule) or not (tansu 0.6.0, decided by markers), and its end is the
last stable offset; a read_uncommitted reader hands out every record that is not a marker.
"""

from __future__ import annotations

import asyncio

import pytest
import ray

from raykafka.driver.consumer import Consumer
from raykafka.driver.consumer_group import ConsumerGroup
from raykafka.mock import MockCluster
from raykafka.spark_bridge.reader import read_dataset
from raykafka.wire import messages
from raykafka.wire.connection import BrokerConnection
from raykafka.wire.record_batch_reader import next_offset
from raykafka.wire.record_encoding import encode_record_batch

pytestmark = [pytest.mark.ray]

P1, P2 = 1000, 1001  # producer ids (the mock assigns from 1000 up; these are written directly)
TOPIC = "t"

# (producer id or None, values, transactional) for data; ("commit" | "abort", producer id) for markers
LOG = [
    (P1, ["p1-aborted-1", "p1-aborted-2"]),  # 0-1: P1's first transaction, aborted at 4
    (P2, ["p2-committed-1"]),  # 2: P2's first transaction, committed at 7
    (None, ["plain-1"]),  # 3: no transaction
    ("abort", P1),  # 4
    (P2, ["p2-committed-2"]),  # 5
    (P1, ["p1-committed-1"]),  # 6: P1's second transaction, committed at 9
    ("commit", P2),  # 7
    (P2, ["p2-aborted-1"]),  # 8: P2's second transaction, aborted at 10
    ("commit", P1),  # 9
    ("abort", P2),  # 10
    (P1, ["p1-open-1"]),  # 11: P1's third transaction, still open: the last stable offset is 11
]
COMMITTED = ["p2-committed-1", "plain-1", "p2-committed-2", "p1-committed-1"]
EVERY = ["p1-aborted-1", "p1-aborted-2", "p2-committed-1", "plain-1", "p2-committed-2", "p1-committed-1",
         "p2-aborted-1", "p1-open-1"]
STABLE, END = 11, 12


def write(cluster: MockCluster, log: list) -> None:
    """Produce each data batch to the partition's leader (sequences per producer, epoch 0);
    write each marker as the transaction coordinator would."""
    host, port = cluster.brokers[cluster.leader(TOPIC, 0)].address.rsplit(":", 1)
    sequences: dict[int, int] = {}

    async def go() -> None:
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            for who, what in log:
                if who in ("commit", "abort"):
                    cluster.end_transaction(TOPIC, 0, what, 0, commit=who == "commit")
                    continue
                pid = -1 if who is None else who
                seq = sequences.get(pid, 0)
                batch = encode_record_batch([v.encode() for v in what], producer_id=pid,
                                            producer_epoch=0 if who is not None else -1,
                                            base_sequence=seq if who is not None else -1,
                                            is_transactional=who is not None)
                sequences[pid] = seq + len(what)
                body = {"acks": 1, "timeout_ms": 5000, "topic_data": [{"name": TOPIC, "partition_data": [
                    {"index": 0, "records": batch}]}]}
                response = await conn.request(messages.PRODUCE, body)
                assert response.responses[0].partition_responses[0].error_code == 0
        finally:
            await conn.close()

    asyncio.run(go())


def config(cluster: MockCluster, isolation: str, **extra) -> dict:
    return {"bootstrap.servers": cluster.bootstrap, "isolation.level": isolation, "fetch.max.wait.ms": 50, **extra}


def values(table) -> list[str]:
    return [v.decode() for v in table.column("value").to_pylist()]


LISTS = pytest.mark.parametrize("list_aborted", [True, False], ids=["listed", "not-listed"])


@LISTS
def test_the_consumer_hands_out_exactly_the_committed_records_up_to_the_last_stable_offset(ray_session,
                                                                                          list_aborted):
    with MockCluster(n_brokers=1, topics={TOPIC: 1}, list_aborted=list_aborted) as cluster:
        write(cluster, LOG)
        with Consumer(config(cluster, "read_uncommitted")) as consumer:  # every record but the markers
            consumer.assign(TOPIC, 0, "earliest")
            assert consumer.high_watermarks(TOPIC) == {0: END}
            table = consumer.read_all(timeout=30)
            assert values(table) == EVERY
            assert table.column("offset").to_pylist() == [0, 1, 2, 3, 5, 6, 8, 11]
        with Consumer(config(cluster, "read_committed")) as consumer:
            consumer.assign(TOPIC, 0, "earliest")
            assert consumer.high_watermarks(TOPIC) == {0: STABLE}
            table = consumer.read_all(timeout=30)
            assert values(table) == COMMITTED
            assert table.column("offset").to_pylist() == [2, 3, 5, 6]
            assert consumer.positions[(TOPIC, 0)] == STABLE, "past the markers and the aborted records"
            assert consumer.seek(TOPIC, 0, "latest") == STABLE
            # the open transaction commits: the consumer reads on past the old last stable offset
            write(cluster, [("commit", P1), (None, ["plain-2"])])
            later = consumer.read_all(timeout=30)
            assert values(later) == ["p1-open-1", "plain-2"]


@LISTS
def test_the_mock_answers_a_read_committed_fetch_below_the_last_stable_offset(list_aborted):
    """What the consumers above are given: records below the last stable offset only, and the
    aborted transactions that overlap them (or none, as tansu 0.6.0)."""
    with MockCluster(n_brokers=1, topics={TOPIC: 1}, list_aborted=list_aborted) as cluster:
        write(cluster, LOG)
        host, port = cluster.brokers[1].address.rsplit(":", 1)

        async def fetch(isolation: int, offset: int):
            conn = await BrokerConnection(host, int(port)).connect()
            try:
                body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                        "isolation_level": isolation, "topics": [{"topic": TOPIC, "partitions": [
                            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]}
                return (await conn.request(messages.FETCH, body, 12)).responses[0].partitions[0]
            finally:
                await conn.close()

        committed, uncommitted, late = (asyncio.run(fetch(1, 0)), asyncio.run(fetch(0, 0)),
                                        asyncio.run(fetch(1, 9)))
        assert (committed.high_watermark, committed.last_stable_offset) == (END, STABLE)
        assert next_offset(committed.records, 0) == STABLE and next_offset(uncommitted.records, 0) == END
        listed = sorted((a.producer_id, a.first_offset) for a in committed.aborted_transactions or ())
        assert listed == ([(P1, 0), (P2, 8)] if list_aborted else [])
        assert [(a.producer_id, a.first_offset) for a in late.aborted_transactions or ()] == (
            [(P2, 8)] if list_aborted else [])
        assert not uncommitted.aborted_transactions


@LISTS
@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_a_ray_data_read_of_latest_ends_at_the_last_stable_offset(ray_session, list_aborted, isolation):
    with MockCluster(n_brokers=1, topics={TOPIC: 1}, list_aborted=list_aborted) as cluster:
        write(cluster, LOG)
        rows = read_dataset(TOPIC, config(cluster, isolation), "earliest", "latest").take_all()
        got = [r["value"].decode() for r in sorted(rows, key=lambda r: r["offset"])]
        assert got == (COMMITTED if isolation == "read_committed" else EVERY)


@ray.remote(num_cpus=0)
class Seen:
    def __init__(self):
        self.values: list[str] = []

    def add(self, values):
        self.values += values

    def get(self):
        return self.values


@LISTS
def test_a_group_member_hands_out_exactly_the_committed_records(ray_session, kit, list_aborted):
    seen = Seen.remote()

    def handle(batch):
        ray.get(seen.add.remote([v.decode() for v in batch.column("value").to_pylist()]))

    with MockCluster(n_brokers=1, topics={TOPIC: 1}, list_aborted=list_aborted) as cluster:
        write(cluster, [*LOG, ("commit", P1), (None, ["last"])])
        group = ConsumerGroup(config(cluster, "read_committed", **{"group.id": "g", "auto.offset.reset": "earliest"}),
                              [TOPIC], handle)
        try:
            kit.wait_for(lambda: "last" in ray.get(seen.get.remote()), timeout=60)
            group.check()
        finally:
            group.close()
    assert ray.get(seen.get.remote()) == [*COMMITTED, "p1-open-1", "last"]
