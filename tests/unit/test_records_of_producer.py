"""`records_of_producer` (wire/fetch.py), what a healing producer asks the log: the records one
producer id wrote from an offset on; on the mock cluster (a log that starts later than asked, a
batch larger than a fetch), and against leaders that answer a malformed batch, nothing at all
below their high watermark, or an answer without the partition asked for."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from raykafka.mock import MockCluster
from raykafka.wire import messages
from raykafka.wire.cluster import Cluster
from raykafka.wire.config import parse_config
from raykafka.wire.errors import CorruptRecordError, DecodeError, LookupTimeoutError
from raykafka.wire.fetch import records_of_producer
from raykafka.wire.record_encoding import encode_record_batch

pytestmark = pytest.mark.timeout(60)


def test_only_the_producers_records_from_the_offset_on_in_log_order():
    async def scenario(mock: MockCluster) -> None:
        cluster = Cluster(parse_config({"bootstrap.servers": f"127.0.0.1:{mock.brokers[1].port}"}))
        try:
            conn = await cluster.leader_connection("t", 0)

            async def init() -> Any:
                return await conn.request(messages.INIT_PRODUCER_ID, {"transactional_id": None,
                                                                      "transaction_timeout_ms": 60000})

            ours, other = await init(), await init()
            for i in range(4):  # ours and another producer's batches, interleaved
                for producer, seq in ((ours, 2 * i), (other, 2 * i)):
                    batch = encode_record_batch([b"%d-%d" % (producer.producer_id, seq + j) for j in range(2)],
                                                keys=[b"k", None], producer_id=producer.producer_id,
                                                producer_epoch=producer.producer_epoch, base_sequence=seq)
                    body = {"acks": -1, "timeout_ms": 1000, "topic_data": [{"name": "t", "partition_data": [
                        {"index": 0, "records": batch}]}]}
                    assert (await conn.request(messages.PRODUCE, body)).responses[0].partition_responses[0].error_code == 0
            found = await records_of_producer(cluster, "t", 0, 5, ours.producer_id, 1 << 20)
            # ours sit at offsets 0-1, 4-5, 8-9, 12-13: from offset 5 on, the second record of the
            # second batch and the two batches after it
            assert [(r.offset, r.key, r.value) for r in found] == [
                (5, None, b"%d-3" % ours.producer_id), (8, b"k", b"%d-4" % ours.producer_id),
                (9, None, b"%d-5" % ours.producer_id), (12, b"k", b"%d-6" % ours.producer_id),
                (13, None, b"%d-7" % ours.producer_id)]
            assert await records_of_producer(cluster, "t", 0, 16, ours.producer_id, 1 << 20) == []
        finally:
            await cluster.close()

    with MockCluster(n_brokers=1, topics={"t": 1}) as mock:
        asyncio.run(asyncio.wait_for(scenario(mock), 30))
        assert mock.handler_errors == []


async def _write(conn: Any, producer: Any, seq: int, values: list[bytes]) -> None:
    batch = encode_record_batch(values, producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                                base_sequence=seq)
    body = {"acks": -1, "timeout_ms": 1000, "topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": batch}]}]}
    assert (await conn.request(messages.PRODUCE, body)).responses[0].partition_responses[0].error_code == 0


def _on_mock(scenario: Any, **config: Any) -> None:
    async def run(mock: MockCluster) -> None:
        cluster = Cluster(parse_config({"bootstrap.servers": f"127.0.0.1:{mock.brokers[1].port}", **config}))
        try:
            conn = await cluster.leader_connection("t", 0)
            producer = await conn.request(messages.INIT_PRODUCER_ID, {"transactional_id": None,
                                                                      "transaction_timeout_ms": 60000})
            await scenario(mock, cluster, conn, producer)
        finally:
            await cluster.close()

    with MockCluster(n_brokers=1, topics={"t": 1}) as mock:
        asyncio.run(asyncio.wait_for(run(mock), 30))
        assert mock.handler_errors == []


def test_a_log_that_starts_later_than_asked_is_read_from_its_start():
    async def scenario(mock: MockCluster, cluster: Any, conn: Any, producer: Any) -> None:
        for i in range(4):
            await _write(conn, producer, 2 * i, [b"a%d" % i, b"b%d" % i])
        mock.topics["t"].partitions[0].log_start_offset = 4  # offsets 0-3 deleted
        found = await records_of_producer(cluster, "t", 0, 1, producer.producer_id, 1 << 20)
        assert [(r.offset, r.value) for r in found] == [(4, b"a2"), (5, b"b2"), (6, b"a3"), (7, b"b3")]

    _on_mock(scenario)


def test_a_batch_larger_than_a_fetch_is_asked_for_again_whole():
    """max.partition.fetch.bytes=1024, a batch of ~10 KiB and a broker that cuts its answers at the
    limit (as before KIP-74): the first answers hold no whole batch."""
    async def scenario(mock: MockCluster, cluster: Any, conn: Any, producer: Any) -> None:
        mock.cut_batches = True
        await _write(conn, producer, 0, [b"s"])
        await _write(conn, producer, 1, [bytes([65 + i]) * 1000 for i in range(10)])
        found = await records_of_producer(cluster, "t", 0, 0, producer.producer_id, 1 << 20)
        assert [r.offset for r in found] == list(range(11))
        assert [len(r.value) for r in found] == [1] + [1000] * 10

    _on_mock(scenario, **{"max.partition.fetch.bytes": 1024})


class _Leader:
    """A leader whose every Fetch answer carries `records`, its high watermark at 1000."""

    def __init__(self, records: bytes):
        self.records = records

    def version_for(self, api: Any) -> int:
        return 12

    async def request(self, api: Any, body: dict[str, Any], version: int | None = None) -> Any:
        await asyncio.sleep(body["max_wait_ms"] / 1000)
        part = SimpleNamespace(partition_index=0, error_code=0, high_watermark=1000, records=self.records,
                               get=lambda key, default=None: default)
        return SimpleNamespace(responses=[SimpleNamespace(topic="t", partitions=[part])])


def _cluster(leader: _Leader, **more: Any) -> Any:
    async def leader_connection(topic: str, partition: int) -> _Leader:
        return leader

    config = parse_config({"bootstrap.servers": "127.0.0.1:1", "request.timeout.ms": 1500, **more})
    return SimpleNamespace(config=config, leader_connection=leader_connection)


def test_a_malformed_batch_raises_its_named_error():
    good = bytearray(encode_record_batch([b"v"], producer_id=7, producer_epoch=0, base_sequence=0))
    good[-1] ^= 0xFF  # the CRC no longer matches
    with pytest.raises(CorruptRecordError, match="CRC"):
        asyncio.run(asyncio.wait_for(records_of_producer(_cluster(_Leader(bytes(good))), "t", 0, 0, 7, 1 << 20), 10))


def test_a_leader_answering_nothing_below_its_high_watermark_ends_within_request_timeout():
    async def read() -> float:
        started = asyncio.get_running_loop().time()
        with pytest.raises(LookupTimeoutError, match="request.timeout.ms=1500"):
            await records_of_producer(_cluster(_Leader(b"")), "t", 0, 0, 7, 1 << 20)
        return asyncio.get_running_loop().time() - started

    took = asyncio.run(asyncio.wait_for(read(), 20))
    assert 1.5 <= took < 3.5, took


def test_an_answer_without_the_partition_asked_for_is_a_decode_error():
    class Elsewhere(_Leader):
        async def request(self, api: Any, body: dict[str, Any], version: int | None = None) -> Any:
            answer = await super().request(api, body, version)
            answer.responses[0].partitions[0].partition_index = 3
            return answer

    with pytest.raises(DecodeError, match="does not name the partition asked for"):
        asyncio.run(asyncio.wait_for(records_of_producer(_cluster(Elsewhere(b"")), "t", 0, 0, 7, 1 << 20), 10))


def test_a_leader_that_never_answers_a_whole_batch_is_asked_for_at_most_fetch_max_bytes():
    """A hostile leader: every answer is the first 100 bytes of a batch. The fetch grows four times
    each answer, up to fetch.max.bytes and no further (it grew without a bound before), and the
    read ends within request.timeout.ms."""
    class Cut(_Leader):
        asked: list[int] = []

        async def request(self, api: Any, body: dict[str, Any], version: int | None = None) -> Any:
            self.asked.append(body["topics"][0]["partitions"][0]["partition_max_bytes"])
            return await super().request(api, body, version)

    leader = Cut(encode_record_batch([b"x" * 1000], producer_id=7, producer_epoch=0, base_sequence=0)[:100])
    cluster = _cluster(leader, **{"fetch.max.bytes": 1 << 20})
    with pytest.raises(LookupTimeoutError, match="request.timeout.ms=1500"):
        asyncio.run(asyncio.wait_for(records_of_producer(cluster, "t", 0, 0, 7, 1 << 20), 10))
    assert leader.asked[0] == cluster.config["max.partition.fetch.bytes"]
    assert max(leader.asked) == 1 << 20 and leader.asked.count(1 << 20) > 1
