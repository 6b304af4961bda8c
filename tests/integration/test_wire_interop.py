"""Record batches on the wire, checked against a real peer: confluent-kafka (librdkafka) on tansu.

What confluent-kafka writes, our wire-level Fetch decodes exactly; what our encoder writes
with a wire-level Produce, confluent-kafka reads back exactly; for every codec.
"""

import asyncio
import random

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from raykafka.driver.admin import Admin  # noqa: E402
from raykafka.wire import messages  # noqa: E402
from raykafka.wire.cluster import Cluster  # noqa: E402
from raykafka.wire.compression import Compression  # noqa: E402
from raykafka.wire.config import parse_config  # noqa: E402
from raykafka.wire.record_batch import CREATE_TIME  # noqa: E402
from raykafka.wire.record_decoding import decode_record_batches  # noqa: E402
from raykafka.wire.record_encoding import encode_record_batch  # noqa: E402

pytestmark = [pytest.mark.broker]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000


def sample_records(n: int = 300):
    """Keys (some null), values (some null, one of 150,000 random bytes), headers (some empty, some
    null-valued), timestamps."""
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else f"key-{i % 13}".encode()
        value = None if i % 11 == 5 else (f"value-{i}-".encode() * (1 + i % 5))
        if i == 17:  # random bytes, past a 64 KiB block: an LZ4 frame of several blocks, one stored
            value = random.Random(i).randbytes(150_000)
        headers = [] if i % 3 == 0 else [("h", f"{i}".encode()), ("nil", None)]
        out.append((key, value, headers, BASE_TS + i * 3))
    return out


def fetch_all(bootstrap: str, topic: str, partition: int, expected: int) -> list:
    """Our wire-level Fetch, from offset 0 until `expected` records are in hand."""

    async def scenario():
        cluster = Cluster(parse_config({"bootstrap.servers": bootstrap}))
        try:
            conn = await cluster.leader_connection(topic, partition)
            version = min(conn.version_for(messages.FETCH), 12)  # v13+ names topics by id
            records, offset = [], 0
            for _ in range(50):
                body = {"max_wait_ms": 200, "min_bytes": 1, "max_bytes": 8 << 20, "isolation_level": 0,
                        "topics": [{"topic": topic, "partitions": [
                            {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 8 << 20}]}]}
                response = await conn.request(messages.FETCH, body, version)
                data = response.responses[0].partitions[0]
                assert data.error_code == 0
                for batch in decode_record_batches(data.records or b""):
                    records.extend(r for r in batch.records if r.offset >= offset)
                    offset = max(offset, batch.next_offset)
                if len(records) >= expected:
                    return records
            raise AssertionError(f"fetched {len(records)} of {expected} records")
        finally:
            await cluster.close()

    return asyncio.run(scenario())


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_writes_and_our_fetch_decodes_exactly(bootstrap, topic_name, codec):
    topic = topic_name(f"ck2us-{codec}")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 1})
    sent = sample_records()
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                                         "linger.ms": 50, "enable.idempotence": False})
    for key, value, headers, ts in sent:
        producer.produce(topic, value=value, key=key, headers=headers or None, timestamp=ts, partition=0)
    assert producer.flush(30) == 0

    got = fetch_all(bootstrap, topic, 0, len(sent))
    assert [r.offset for r in got] == list(range(len(sent)))
    for record, (key, value, headers, ts) in zip(got, sent, strict=True):
        assert record.key == key
        assert record.value == value
        assert record.timestamp == ts
        assert record.headers == headers


@pytest.mark.parametrize("codec", CODECS)
def test_our_produce_is_read_exactly_by_confluent_kafka(bootstrap, topic_name, codec):
    topic = topic_name(f"us2ck-{codec}")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 1})
    sent = sample_records()
    # Two batches in two Produce requests, to check offsets continue across batches.
    halves = [sent[:120], sent[120:]]

    async def produce():
        cluster = Cluster(parse_config({"bootstrap.servers": bootstrap}))
        try:
            conn = await cluster.leader_connection(topic, 0)
            base_offsets = []
            for half in halves:
                batch = encode_record_batch([v for _, v, _, _ in half], keys=[k for k, _, _, _ in half],
                                            timestamps=[t for *_, t in half], headers=[h for _, _, h, _ in half],
                                            compression=Compression.from_name(codec))
                body = {"transactional_id": None, "acks": -1, "timeout_ms": 10000,
                        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
                response = await conn.request(messages.PRODUCE, body)
                result = response.responses[0].partition_responses[0]
                assert result.error_code == 0
                base_offsets.append(result.base_offset)
            return base_offsets
        finally:
            await cluster.close()

    assert asyncio.run(produce()) == [0, 120]

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = []
    try:
        for _ in range(200):
            for msg in consumer.consume(500, timeout=1.0):
                assert msg.error() is None, msg.error()
                got.append(msg)
            if len(got) >= len(sent):
                break
    finally:
        consumer.close()
    assert len(got) == len(sent)
    for i, (msg, (key, value, headers, ts)) in enumerate(zip(got, sent, strict=True)):
        assert msg.offset() == i
        assert msg.key() == key
        assert msg.value() == value
        assert msg.timestamp() == (confluent_kafka.TIMESTAMP_CREATE_TIME, ts)
        assert (msg.headers() or []) == headers
    assert CREATE_TIME == 0
