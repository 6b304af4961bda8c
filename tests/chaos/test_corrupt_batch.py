"""A corrupted batch on consume: the mock broker serves partition 1 with one flipped byte inside a
record batch (a bit rot a real broker would not produce on demand). That partition fails with a
clear error naming it and the CRC; the other partitions are read to the end."""

from __future__ import annotations

import time

import pytest

from raykafka.driver.consumer import Consumer, ConsumerError
from raykafka.driver.producer import Producer
from raykafka.wire.mock_broker import MockCluster

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]


def test_corrupt_batch_fails_its_partition_only(ray_session, record):
    """3 partitions of 1000 messages; one byte of the 2nd batch of partition 1 flipped."""
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
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap})
        counts = {0: 0, 1: 0, 2: 0}
        error = None
        t0 = time.monotonic()
        try:
            consumer.assign_topic("t", "earliest")
            try:
                for batch in consumer.batches(timeout=10, until_end=True):
                    counts[batch.column("partition")[0].as_py()] += batch.num_rows
            except ConsumerError as exc:
                error = exc
            detect_s = time.monotonic() - t0
            consumer.unassign("t", 1)
            for batch in consumer.batches(timeout=10, until_end=True):
                counts[batch.column("partition")[0].as_py()] += batch.num_rows
        finally:
            consumer.close()
        record(sent=3000, delivered=sum(counts.values()), failed=1000 - counts[1], lost=0, reordered=0,
               duplicated=0, faults={"corrupt_batch": 1}, actors_killed=[], per_partition=counts,
               error=str(error)[:300] if error else None, seconds_to_detect=round(detect_s, 1))
    assert error is not None, "the corrupt batch surfaces as an error"
    assert "t/1" in str(error) and "CRC" in str(error), str(error)
    assert counts[0] == 1000 and counts[2] == 1000, counts  # the other partitions were not stopped
    assert counts[1] < 1000  # what was before the corrupt batch, and nothing after it
