"""Our murmur2_random puts every key where librdkafka's does (confluent-kafka, on the real broker)."""

from __future__ import annotations

import random

import pytest

from raykafka.wire.partitioners import Murmur2RandomPartitioner

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")

pytestmark = [pytest.mark.broker]

KEYS = 10_000


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = admin_mod.AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([admin_mod.NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout=30)


def _delivered_partitions(bootstrap: str, topic: str, keys: list[bytes]) -> list[int]:
    """Produce one message per key with librdkafka's murmur2_random; the partitions it chose, in key order."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5}
    )
    got: dict[int, int] = {}
    errors: list[str] = []

    def on_delivery(err, msg, i):
        if err is not None:
            errors.append(str(err))
        else:
            got[i] = msg.partition()

    for i, key in enumerate(keys):
        while True:
            try:
                producer.produce(
                    topic, value=b"v", key=key, on_delivery=lambda e, m, i=i: on_delivery(e, m, i)
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} messages undelivered"
    assert not errors, errors[:5]
    return [got[i] for i in range(len(keys))]


@pytest.mark.parametrize("partitions", [3, 6, 7])
def test_murmur2_random_matches_librdkafka(bootstrap, topic_name, partitions):
    rng = random.Random(partitions)
    keys = [rng.randbytes(rng.randrange(1, 40)) for _ in range(KEYS)]
    topic = topic_name("murmur2")
    _create_topic(bootstrap, topic, partitions)

    theirs = _delivered_partitions(bootstrap, topic, keys)
    ours = Murmur2RandomPartitioner().partition_many(keys, partitions)

    assert len(set(theirs)) == partitions  # the keys really spread over the topic
    mismatches = [(k, o, t) for k, o, t in zip(keys, ours, theirs, strict=True) if o != t]
    assert not mismatches, f"{len(mismatches)} of {KEYS} keys differ, e.g. {mismatches[:3]}"
