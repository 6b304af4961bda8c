"""A corrupted batch on consume: the mock broker serves partition 1 with one flipped byte inside a
record batch (a bit rot a real broker would not produce on demand). That partition hands out
every record before the corrupt batch, then fails with a clear error naming it, the batch's
offset and the CRC; the other partitions are read to the end."""

from __future__ import annotations

import time

import pytest

from raykafka.driver.consumer import Consumer, ConsumerError
from raykafka.driver.producer import Producer
from raykafka.mock import MockCluster
from raykafka.wire.record_batch_reader import batch_record_count

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]


def test_corrupt_batch_fails_its_partition_only(ray_session, record, kit):
    """3 partitions of 1000 messages; one byte of the 2nd batch of partition 1 flipped: the
    records of its 1st batch are handed out, then the error."""
    with MockCluster(n_brokers=1, topics={"t": 3}) as cluster:
        with Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 1, "batch.num.messages": 100}) as producer:
            for i in range(3000):  # in chunks, so each partition holds several batches
                producer.send("t", b"c%05d" % i, partition=i % 3)
                if i % 300 == 299:
                    producer.flush(30)
        with cluster.lock:
            batches = cluster.topics["t"].partitions[1].batches
            assert len(batches) >= 2
            raw = bytearray(batches[1])
            raw[len(raw) - 3] ^= 0xFF  # inside the last record: covered by the batch CRC
            batches[1] = bytes(raw)
            valid_before = batch_record_count(batches[0])  # offsets 0.. of partition 1, all before the corrupt batch
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap})
        read: list[tuple[int, bytes]] = []  # (partition, value) in the order handed out
        error = None
        t0 = time.monotonic()
        try:
            consumer.assign_topic("t", "earliest")
            try:
                for batch in consumer.batches(timeout=10, until_end=True):
                    read += kit.rows(batch)
            except ConsumerError as exc:
                error = exc
            detect_s = time.monotonic() - t0
            consumer.unassign("t", 1)
            for batch in consumer.batches(timeout=10, until_end=True):
                read += kit.rows(batch)
        finally:
            consumer.close()
        counts = {p: sum(1 for q, _ in read if q == p) for p in range(3)}
        # partition 1's records from the corrupt batch on are reported by the error, not lost
        readable = [b"c%05d" % i for i in range(3000) if i % 3 != 1 or i // 3 < valid_before]
        record(sent=3000, delivered=len(read), failed=1000 - counts[1], **kit.consumed_figures(read, readable),
               faults={"corrupt_batch": 1}, actors_killed=[], per_partition=counts,
               error=str(error)[:300] if error else None, seconds_to_detect=round(detect_s, 1),
               valid_before_corrupt_batch=valid_before)
    assert error is not None, "the corrupt batch surfaces as an error"
    assert "t/1" in str(error) and "CRC" in str(error), str(error)
    assert f"record batch at offset {valid_before} failed its CRC" in str(error), str(error)
    assert counts[0] == 1000 and counts[2] == 1000, counts  # the other partitions were not stopped
    assert 0 < valid_before < 1000
    # every record before the corrupt batch, once and in order, and nothing after it
    assert [v for q, v in read if q == 1] == [v for v in readable if int(v[1:]) % 3 == 1]
