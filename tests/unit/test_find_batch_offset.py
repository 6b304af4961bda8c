"""`find_batch_offset` (wire/fetch.py) against the mock cluster: where a batch the broker took
without an offset lies in the log, found by producer id, epoch and first sequence."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raykafka.mock import MockCluster
from raykafka.wire import messages
from raykafka.wire.config import parse_config
from raykafka.wire.connection import BrokerConnection
from raykafka.wire.errors import BY_NAME
from raykafka.wire.fetch import find_batch_offset
from raykafka.wire.record_encoding import encode_record_batch

pytestmark = pytest.mark.timeout(60)

DUPLICATE = BY_NAME["DUPLICATE_SEQUENCE_NUMBER"].code


def produce_body(batch: bytes) -> dict[str, Any]:
    return {"acks": -1, "timeout_ms": 1000, "topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": batch}]}]}


def test_a_duplicate_without_its_offset_is_found_in_the_log_by_producer_and_sequence():
    config = parse_config({"bootstrap.servers": "127.0.0.1:1"})

    async def scenario(cluster: MockCluster) -> None:
        conn = await BrokerConnection("127.0.0.1", cluster.brokers[1].port, node_id=1).connect()
        try:
            async def init() -> Any:
                return await conn.request(messages.INIT_PRODUCER_ID, {"transactional_id": None,
                                                                      "transaction_timeout_ms": 60000})

            ours, other = await init(), await init()

            def batch(producer: Any, seq: int, n: int) -> bytes:
                return encode_record_batch([b"%d-%d-%d" % (producer.producer_id, seq, i) for i in range(n)],
                                           producer_id=producer.producer_id,
                                           producer_epoch=producer.producer_epoch, base_sequence=seq)

            async def send(b: bytes) -> Any:
                answer = await conn.request(messages.PRODUCE, produce_body(b))
                return answer.responses[0].partition_responses[0]

            offsets = {}
            for i in range(6):  # ours and another producer's batches, interleaved
                offsets[3 * i] = (await send(batch(ours, 3 * i, 3))).base_offset
                assert (await send(batch(other, 2 * i, 2))).error_code == 0
            again = await send(batch(ours, 15, 3))
            assert (again.error_code, again.base_offset) == (DUPLICATE, -1)  # as tansu 0.6 answers

            async def find(start: int, seq: int, max_bytes: int = 1 << 20) -> int | None:
                return await find_batch_offset(conn, config, "t", 0, start, producer_id=ours.producer_id,
                                               producer_epoch=ours.producer_epoch, base_sequence=seq,
                                               max_bytes=max_bytes)

            for seq, offset in offsets.items():
                assert await find(0, seq) == offset
            assert await find(offsets[9], 15) == offsets[15]
            assert await find(offsets[12], 9) is None  # a later batch of ours seen first: stop there
            assert await find(0, 18) is None  # never written: read to the high watermark
            assert await find(cluster.high_watermark("t", 0), 0) is None
            assert await find(0, 15, max_bytes=200) is None  # the bound comes first
        finally:
            await conn.close()

    with MockCluster(n_brokers=1, topics={"t": 1}, duplicate_offset_unknown=True) as cluster:
        asyncio.run(asyncio.wait_for(scenario(cluster), 30))
        assert cluster.handler_errors == []


class _EmptyBelowTheHighWatermark:
    """A leader that answers every Fetch with no records while its high watermark is far ahead,
    as tansu does for a while after a restart. Counts the Fetches and their max_wait_ms."""

    def __init__(self) -> None:
        self.waits: list[int] = []

    def version_for(self, api: Any) -> int:
        return 12

    async def request(self, api: Any, body: dict[str, Any], version: int | None = None) -> Any:
        from types import SimpleNamespace

        self.waits.append(body["max_wait_ms"])
        await asyncio.sleep(body["max_wait_ms"] / 1000)  # the broker waits for data that never comes
        part = SimpleNamespace(partition_index=0, error_code=0, high_watermark=1000, records=b"",
                               get=lambda key, default=None: default)
        return SimpleNamespace(responses=[SimpleNamespace(topic="t", partitions=[part])])


def test_a_leader_answering_nothing_below_its_high_watermark_ends_the_look_up_within_request_timeout():
    """Before, each empty answer counted one byte against `max_bytes` (64 MiB in the Flusher): the
    look-up asked again for ever, and the Flusher's responses behind it waited with it."""
    from raykafka.wire.errors import LookupTimeoutError
    from raykafka.wire.fetch import LOOKUP_WAIT_MAX_MS, LOOKUP_WAIT_MS

    config = parse_config({"bootstrap.servers": "127.0.0.1:1", "request.timeout.ms": 2000})
    conn = _EmptyBelowTheHighWatermark()

    async def look_up() -> float:
        started = asyncio.get_running_loop().time()
        with pytest.raises(LookupTimeoutError, match=r"t/0 from offset 5: not done within request.timeout.ms=2000"):
            await find_batch_offset(conn, config, "t", 0, 5, producer_id=1, producer_epoch=0, base_sequence=7,
                                    max_bytes=64 << 20)
        return asyncio.get_running_loop().time() - started

    took = asyncio.run(asyncio.wait_for(look_up(), 20))
    assert 2.0 <= took < 2.0 + 2 * LOOKUP_WAIT_MAX_MS / 1000 + 1.0, took  # the bound, plus at most the last wait
    assert conn.waits[0] == LOOKUP_WAIT_MS and conn.waits[-1] == LOOKUP_WAIT_MAX_MS  # each empty answer waits longer
    assert conn.waits == sorted(conn.waits)


def test_an_answer_without_the_partition_asked_for_is_a_decode_error_not_a_missing_batch():
    """Before, the look-up read such an answer as "the batch is not in the log" and the Flusher
    failed the message with that cause; now it fails with what the broker did."""
    from types import SimpleNamespace

    from raykafka.wire.errors import DecodeError

    class Elsewhere:
        def version_for(self, api: Any) -> int:
            return 12

        async def request(self, api: Any, body: dict[str, Any], version: int | None = None) -> Any:
            part = SimpleNamespace(partition_index=3, error_code=0, high_watermark=1000, records=b"",
                                   get=lambda key, default=None: default)
            return SimpleNamespace(responses=[SimpleNamespace(topic="t", partitions=[part])])

    config = parse_config({"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(DecodeError, match="does not name the partition asked for"):
        asyncio.run(asyncio.wait_for(find_batch_offset(Elsewhere(), config, "t", 0, 0, producer_id=1, producer_epoch=0,
                                                       base_sequence=0, max_bytes=1 << 20), 10))
