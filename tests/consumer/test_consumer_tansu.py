"""On tansu: what confluent-kafka wrote is read back exactly by our partition consumers."""

from __future__ import annotations

import time

import pytest

from raykafka.driver.consumer import Consumer

pytestmark = [pytest.mark.broker, pytest.mark.ray]

N = 300


@pytest.fixture(scope="module")
def written(bootstrap, ray_session, kit):
    """A 2-partition topic with keys, values, headers and timestamps from confluent-kafka."""
    import uuid

    topic = f"cons-{uuid.uuid4().hex[:8]}"
    kit.create_topic(bootstrap, topic, 2)
    base = int(time.time() * 1000) - 100_000
    messages = []
    for i in range(N):
        m = {"value": f"value-{i}".encode() * (1 + i % 3), "partition": i % 2, "timestamp": base + i * 10}
        if i % 5:
            m["key"] = f"key-{i}".encode()
        if i % 4 == 0:
            m["headers"] = [("h", f"{i}".encode()), ("empty", b"")]
        messages.append(m)
    results = kit.produce(bootstrap, topic, messages)
    return topic, messages, results, base


def _expected(written, partition, from_offset=0):
    _topic, messages, results, _ = written
    return [(off, m) for m, (p, off) in zip(messages, results, strict=True) if p == partition and off >= from_offset]


def _check(rows, expected, topic, partition):
    assert [r["offset"] for r in rows] == [off for off, _ in expected]
    for row, (_off, m) in zip(rows, expected, strict=True):
        assert row["value"] == m["value"]
        assert row["key"] == m.get("key")
        assert [(h["key"], h["value"]) for h in row["headers"]] == list(m.get("headers", []))
        assert int(row["timestamp"].timestamp() * 1000) == m["timestamp"]
        assert (row["topic"], row["partition"], row["timestampType"]) == (topic, partition, 0)


def test_read_back_exactly_from_oldest(bootstrap, written):
    topic = written[0]
    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        assert consumer.assign_topic(topic, "oldest") == {0: 0, 1: 0}
        table = consumer.read_all(timeout=30)
        assert consumer.high_watermarks(topic) == {0: N // 2, 1: N // 2}
    for p in (0, 1):
        rows = [r for r in table.to_pylist() if r["partition"] == p]
        _check(rows, _expected(written, p), topic, p)


def test_read_from_an_offset(bootstrap, written):
    topic = written[0]
    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        assert consumer.assign(topic, 1, 100) == 100
        rows = consumer.read_all(timeout=30).to_pylist()
    _check(rows, _expected(written, 1, 100), topic, 1)


def test_read_from_a_timestamp(bootstrap, written):
    topic, messages, results, base = written
    # message 201 is the first at or after base + 2010 ms; it sits in partition 1
    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        start = consumer.assign(topic, 1, {"timestamp": base + 2005})
        rows = consumer.read_all(timeout=30).to_pylist()
    assert start == results[201][1]
    _check(rows, _expected(written, 1, start), topic, 1)


def test_latest_seek_pause_resume(bootstrap, written, topic_name, kit):
    topic = topic_name("seek")
    kit.create_topic(bootstrap, topic, 1)
    kit.produce(bootstrap, topic, [{"value": b"old-%d" % i} for i in range(10)])
    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        assert consumer.assign(topic, 0, "latest") == 10
        kit.produce(bootstrap, topic, [{"value": b"new-%d" % i} for i in range(5)])
        rows = consumer.read_all(timeout=30).column("value").to_pylist()
        assert rows == [b"new-%d" % i for i in range(5)]
        assert consumer.seek(topic, 0, 3) == 3
        assert consumer.read_all(timeout=30).column("offset").to_pylist() == list(range(3, 15))
        consumer.pause(topic, 0)
        kit.produce(bootstrap, topic, [{"value": b"late"}])
        assert list(consumer.batches(timeout=1.5)) == [], "a paused partition yields nothing"
        consumer.resume(topic, 0)
        assert consumer.read_all(timeout=30).column("value").to_pylist() == [b"late"]


def test_unknown_topic_is_a_clear_error(bootstrap, ray_session):
    from raykafka.wire.errors import UnknownTopicError

    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        with pytest.raises(UnknownTopicError, match="no-such-topic"):
            consumer.assign("no-such-topic-x", 0)


def test_24_partitions_take_at_most_4_actors_and_read_every_record_once(bootstrap, ray_session, kit, topic_name,
                                                                       live_actors_of):
    """The process budget: 24 partitions of one broker are hosted by one partition consumer and
    fetched by one broker consumer; each partition reads back what was written to it, in order."""
    topic = topic_name("budget")
    kit.create_topic(bootstrap, topic, 24)
    kit.produce(bootstrap, topic, [{"value": b"v%03d" % i, "partition": i % 24} for i in range(240)])
    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        assert consumer.assign_topic(topic, "earliest") == dict.fromkeys(range(24), 0)
        actors = live_actors_of()
        table = consumer.read_all(timeout=30)
    assert len(actors) <= 4, actors
    assert actors == ["BrokerConsumer", "PartitionConsumer"], actors
    for p in range(24):
        rows = [r for r in table.to_pylist() if r["partition"] == p]
        assert [r["offset"] for r in rows] == list(range(10)), p
        assert [r["value"] for r in rows] == [b"v%03d" % i for i in range(p, 240, 24)], p
    assert live_actors_of() == [], "close leaves no consumer actor"
