"""A record batch larger than what a fetch asks for, on the mock cluster serving as a broker before
KIP-74 does (the first batch cut at the size limit, which one tansu never does): every fetch path
(the `Consumer`'s broker consumers, Ray Data's read tasks) asks again for the whole batch, up to
`fetch.max.bytes`, and a batch larger than that fails its partition naming the cause."""

from __future__ import annotations

import time

import pytest

from raykafka.driver.consumer import Consumer
from raykafka.mock import MockCluster
from raykafka.spark_bridge.offsets import PartitionRange
from raykafka.spark_bridge.ray_data import read_range
from raykafka.wire.errors import ConsumerError, RecordTooLargeError

pytestmark = [pytest.mark.timeout(120)]

BIG = [b"%04d" % i + b"x" * 300 for i in range(10)]  # one batch of ~3.2 kB


def _fill(cluster, kit) -> None:
    kit.mock_produce(cluster, "t", 0, [b"a", b"b"])  # offsets 0-1: a small batch
    kit.mock_produce(cluster, "t", 0, BIG)  # offsets 2-11: larger than max.partition.fetch.bytes
    kit.mock_produce(cluster, "t", 0, [b"c"])  # offset 12


@pytest.mark.ray
def test_the_consumer_grows_its_request_for_a_batch_cut_at_the_size_limit(ray_session, kit):
    with MockCluster(n_brokers=1, topics={"t": 1}, cut_batches=True) as cluster:
        _fill(cluster, kit)
        with Consumer({"bootstrap.servers": cluster.bootstrap, "fetch.max.wait.ms": 50,
                       "max.partition.fetch.bytes": 200}) as consumer:
            consumer.assign("t", 0, "earliest")
            table = consumer.read_all(timeout=20)
    assert table.column("offset").to_pylist() == list(range(13))
    assert table.column("value").to_pylist()[2:12] == BIG


@pytest.mark.ray
def test_a_batch_larger_than_fetch_max_bytes_fails_the_partition_naming_it(ray_session, kit):
    with MockCluster(n_brokers=1, topics={"t": 1}, cut_batches=True) as cluster:
        _fill(cluster, kit)
        with Consumer({"bootstrap.servers": cluster.bootstrap, "fetch.max.wait.ms": 50,
                       "max.partition.fetch.bytes": 200, "fetch.max.bytes": 1000}) as consumer:
            consumer.assign("t", 0, "earliest")
            start = time.monotonic()
            got = []
            with pytest.raises(ConsumerError) as failed:
                for batch in consumer.batches(timeout=30):
                    got += batch.column("offset").to_pylist()
            took = time.monotonic() - start
    assert got == [0, 1], "what came before the large batch is handed out"
    text = str(failed.value)
    assert "t/0" in text and "record batch at offset 2 is" in text and "fetch.max.bytes (1000)" in text, text
    assert took < 25, "fails in bounded time, not after the 30 s timeout"


def test_a_ray_data_read_task_grows_its_request_too(kit):
    with MockCluster(n_brokers=1, topics={"t": 1}, cut_batches=True) as cluster:
        _fill(cluster, kit)
        config = {"bootstrap.servers": cluster.bootstrap, "max.partition.fetch.bytes": 200, "fetch.max.bytes": 1000}
        (table,) = read_range({**config, "fetch.max.bytes": 100_000}, PartitionRange("t", 0, 0, 13))
        assert table.column("offset").to_pylist() == list(range(13))
        with pytest.raises(RecordTooLargeError, match="offset 2 is .* bytes, more than fetch.max.bytes"):
            list(read_range(config, PartitionRange("t", 0, 0, 13)))
