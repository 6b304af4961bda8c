"""The producer on the real broker (tansu), read back with confluent-kafka."""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from raykafka.driver.admin import Admin
from raykafka.driver.producer import BatchResult, Producer
from raykafka.wire.errors import ConfigError, MessageTooLargeError, UnknownTopicError

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def producer(ray_session, bootstrap) -> Iterator[Producer]:
    """One producer of the default config for the tests that need nothing of it but delivery:
    each of them sends to a fresh topic of its own and reads back only that topic, and none of
    them closes it, configures it or counts anything on it, so sharing it (one start of its
    actors for the module, not one a test) leaves every assertion as it was. The tests that
    close a producer, configure one otherwise or watch its actors build their own."""
    with Producer({"bootstrap.servers": bootstrap}) as shared:
        yield shared


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topics({name: partitions})


def read_back(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60.0) -> list:
    """Every message of the topic from offset 0, with confluent-kafka assigned to each partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for m in consumer.consume(10000, timeout=0.5):
                if m.error() is None:
                    out.append((m.partition(), m.offset(), m.key(), m.value()))
    finally:
        consumer.close()
    return out


def test_100k_keyed_messages_over_6_partitions_arrive_complete_and_in_per_key_order(bootstrap, topic_name, producer):
    topic = topic_name("keyed")
    create_topic(bootstrap, topic, 6)
    n, keys = 100_000, 997
    futures = [producer.send(topic, b"%d" % i, key=b"key-%d" % (i % keys)) for i in range(n)]
    assert producer.flush(120) == 0
    metas = [f.result(0) for f in futures]
    got = read_back(bootstrap, topic, 6, n)
    assert len(got) == n
    assert len({(p, o) for p, o, _, _ in got}) == n  # no duplicates
    by_key: dict[bytes, list[int]] = defaultdict(list)
    partition_of: dict[bytes, set[int]] = defaultdict(set)
    for p, _o, k, v in sorted(got):
        by_key[k].append(int(v))
        partition_of[k].add(p)
    assert all(seq == sorted(seq) for seq in by_key.values())  # per-key order
    assert all(len(ps) == 1 for ps in partition_of.values())
    assert sorted(int(v) for *_, v in got) == list(range(n))
    # the offsets the futures reported are where the messages are
    where = {int(v): (p, o) for p, o, _k, v in got}
    assert all(where[i] == (metas[i].partition, metas[i].offset) for i in range(0, n, 997))
    assert len({m.partition for m in metas}) == 6


def test_send_batch_takes_an_arrow_table_with_spark_sink_columns(bootstrap, topic_name, producer):
    topic = topic_name("arrow")
    create_topic(bootstrap, topic, 3)
    rows = 10_000
    table = pa.table({
        "key": pa.array([b"k%d" % (i % 10) for i in range(rows)], pa.binary()),
        "value": pa.array([b"v%d" % i for i in range(rows)], pa.binary()),
        "partition": pa.array([i % 3 if i % 2 else None for i in range(rows)], pa.int32()),
        "headers": pa.array([[{"key": "h", "value": b"%d" % i}] for i in range(rows)],
                            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    })
    result: BatchResult = producer.send_batch(topic, table).result(60)
    assert (result.delivered, result.failed) == (rows, 0) and result.ok
    assert (result.offsets >= 0).all()
    assert all(result.partitions[i] == i % 3 for i in range(1, rows, 2))  # explicit partitions honoured
    got = read_back(bootstrap, topic, 3, rows)
    assert sorted(v for *_, v in got) == sorted(b"v%d" % i for i in range(rows))
    where = {v: (p, o) for p, o, _k, v in got}
    assert all(where[b"v%d" % i] == (result.partitions[i], result.offsets[i]) for i in range(0, rows, 101))


def test_headers_from_a_table_and_from_send_arrive_as_given(bootstrap, topic_name, producer):
    """A Spark-sink `headers` column (none, several, null and string values) through `send_batch`,
    and headers given to `send`, read back by confluent-kafka exactly."""
    from confluent_kafka import Consumer, TopicPartition

    topic = topic_name("headers")
    create_topic(bootstrap, topic, 1)
    rows = 3000
    given = [None if i % 5 == 0 else [("n", b"%d" % i)] + ([("nil", None), ("s", b"text")] if i % 2 else [])
             for i in range(rows)]
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
    table = pa.table({"value": pa.array([b"v%d" % i for i in range(rows)], pa.binary()),
                      "headers": pa.array([None if hs is None else [{"key": k, "value": None if v is None else v.decode()}
                                                                    for k, v in hs] for hs in given], header_type)})
    assert producer.send_batch(topic, table, partitions=[0] * rows).result(60).ok
    producer.send(topic, b"single", headers={"one": b"1", "two": "2"}, partition=0).result(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < rows + 1 and time.monotonic() < deadline:
            got += [(m.value(), m.headers() or []) for m in consumer.consume(10000, timeout=0.5) if m.error() is None]
    finally:
        consumer.close()
    assert got[:rows] == [(b"v%d" % i, given[i] or []) for i in range(rows)]
    assert got[rows:] == [(b"single", [("one", b"1"), ("two", b"2")])]


def test_close_resolves_every_future_and_leaves_no_actor_alive(ray_session, bootstrap, topic_name, live_actors):
    topic = topic_name("close")
    create_topic(bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    futures = [producer.send(topic, b"x%d" % i) for i in range(5000)]
    batch = producer.send_batch(topic, [b"y%d" % i for i in range(5000)])
    assert live_actors(producer.name)  # the pipeline is up
    producer.close()
    assert all(f.done() for f in futures) and batch.done()
    assert all(f.result().offset >= 0 for f in futures)
    assert batch.result().delivered == 5000
    assert live_actors(producer.name) == []


def test_bad_input_fails_alone_with_a_clear_error(ray_session, bootstrap, topic_name):
    topic = topic_name("bad")
    create_topic(bootstrap, topic, 1)
    with pytest.raises(ConfigError, match="linger.msec"):
        Producer({"bootstrap.servers": bootstrap, "linger.msec": 5})
    with Producer({"bootstrap.servers": bootstrap, "max.request.size": 10_000}) as producer:
        with pytest.raises(TypeError, match="value"):
            producer.send(topic, 12345)
        before = producer.send(topic, b"before")
        huge = producer.send(topic, b"x" * 20_000)
        missing = producer.send(topic_name("missing"), b"lost")
        after = producer.send(topic, b"after")
        batch = producer.send_batch(topic, [b"a", b"y" * 20_000, b"c"]).result(30)
        with pytest.raises(MessageTooLargeError, match="max.request.size"):
            huge.result(30)
        with pytest.raises(UnknownTopicError, match="does not exist"):
            missing.result(30)
        assert after.result(30).offset == before.result(30).offset + 1
        assert (batch.delivered, batch.failed) == (2, 1)
        assert isinstance(batch.errors[1], MessageTooLargeError) and batch.offsets[1] == -1
        assert batch.offsets[2] == batch.offsets[0] + 1


def test_a_topic_switches_to_its_partition_dispatcher_without_reordering(ray_session, bootstrap, topic_name):
    """A topic's first messages go through the TopicDispatcher; once it has handed over the
    topic's PartitionDispatcher, the driver sends there itself. Messages sent across the switch
    keep their order in the partition; an unknown topic stays with the TopicDispatcher, which
    fails its messages with the cause."""
    topic = topic_name("switch")
    create_topic(bootstrap, topic, 1)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 0}) as producer:
        futures = [producer.send(topic, b"%d" % i) for i in range(3000)]
        offsets = [f.result(60).offset for f in futures]
        assert topic in producer._state.routes.direct  # the later ones went straight to the dispatcher
        later = [producer.send(topic, b"%d" % i) for i in range(3000, 4000)]
        offsets += [f.result(60).offset for f in later]
        missing = topic_name("nowhere")
        with pytest.raises(UnknownTopicError):
            producer.send(missing, b"lost").result(30)
        with pytest.raises(UnknownTopicError):
            producer.send(missing, b"lost again").result(30)
        assert missing in producer._state.routes.undirected
    assert offsets == list(range(offsets[0], offsets[0] + 4000))
    assert [v for *_, v in read_back(bootstrap, topic, 1, 4000)] == [b"%d" % i for i in range(4000)]


def test_large_batches_travel_by_reference_and_arrive_whole(ray_session, bootstrap, topic_name, monkeypatch):
    """Values of SHARE_MIN_BYTES or more stay in the object store until the flusher encodes them
    (`SharedColumn`); keyed ones are cut by partition as positions, not copies. Both ways in
    (`send_batch` and a buffer of `send`s) land byte for byte where their results say."""
    import raykafka.driver.accumulator as accumulator
    from raykafka.actors.shared_column import SHARE_MIN_BYTES, SharedColumn

    put = []
    monkeypatch.setattr(accumulator, "SharedColumn", type("Counted", (SharedColumn,), {
        "put": classmethod(lambda cls, column: put.append(len(column)) or SharedColumn.put(column))}))
    topic = topic_name("shared")
    create_topic(bootstrap, topic, 4)
    rows, size = 8000, 150
    values = [(b"%06d" % i) * (size // 6) for i in range(rows)]
    keys = [b"k%d" % (i % 31) for i in range(rows)]
    assert rows * size >= SHARE_MIN_BYTES
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 20}) as producer:
        result = producer.send_batch(topic, pa.table({"key": pa.array(keys, pa.binary()),
                                                      "value": pa.array(values, pa.binary())})).result(60)
        metas = [f.result(60) for f in [producer.send(topic, v, key=k) for k, v in zip(keys, values, strict=True)]]
    assert put and put[0] == rows  # the send_batch went by reference (a hand-over of sends does when it gathers as much)
    assert (result.delivered, result.failed) == (rows, 0)
    got = read_back(bootstrap, topic, 4, 2 * rows)
    assert len(got) == 2 * rows
    where = {(p, o): (k, v) for p, o, k, v in got}
    for i in range(rows):
        assert where[(int(result.partitions[i]), int(result.offsets[i]))] == (keys[i], values[i])
        assert where[(metas[i].partition, metas[i].offset)] == (keys[i], values[i])


@pytest.mark.parametrize("acks", ["0", "1"])
def test_acks_0_and_1_deliver(ray_session, bootstrap, topic_name, acks):
    topic = topic_name(f"acks{acks}")
    create_topic(bootstrap, topic, 1)
    delivered = []
    with Producer({"bootstrap.servers": bootstrap, "acks": acks, "compression.type": "lz4"},
                  return_successes=True, on_delivery=lambda meta, error: delivered.append(meta)) as producer:
        assert producer.producer_id == -1  # idempotence needs acks=all
        metas = [f.result(30) for f in [producer.send(topic, b"m%d" % i) for i in range(300)]]
        assert list(itertools.islice(producer.successes(timeout=5), 300)) == metas  # Sarama's Successes
    assert sorted(delivered, key=metas.index) == metas
    if acks == "1":
        assert [m.offset for m in metas] == list(range(300))
    else:
        assert all(m.offset == -1 for m in metas)  # nobody tells an acks=0 producer
    assert len(read_back(bootstrap, topic, 1, 300)) == 300


def test_ray_shut_down_under_a_producer_ends_its_messages_and_threads_quietly(bootstrap):
    """A notebook that shuts Ray down with a producer still open (a write's cached one, say):
    the producer's pending messages fail with the cause, its threads end, and nothing is logged
    as an error. In a child process, as it shuts its own Ray down."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import threading
        import ray
        from raykafka.driver.producer import Producer
        from raykafka.wire.errors import ProducerClosedError
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
        p = Producer({{"bootstrap.servers": "{bootstrap}", "linger.ms": 600000}})
        future = p.send("anywhere", b"x")  # still gathering when Ray goes
        threads = [t for t in threading.enumerate() if t.name.startswith(p.name)]
        ray.shutdown()
        try:
            future.result(60)
            print("DELIVERED")
        except ProducerClosedError as exc:
            print("FAILED:", exc)
        for t in threads:
            t.join(30)
        print("THREADS LEFT:", sum(t.is_alive() for t in threads), "OF", len(threads))
        print("A RAY AFTER:", ray.is_initialized())  # no thread of ours started a new one
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "FAILED: Ray was shut down before the message was delivered" in done.stdout
    assert "THREADS LEFT: 0 OF 3" in done.stdout
    assert "A RAY AFTER: False" in done.stdout
    # nothing of ours is logged as an error or fails with a traceback; Ray's own threads may print
    # one while it shuts down (an answer in flight deserialized after its worker went)
    import raykafka

    root = Path(raykafka.__file__).resolve().parent  # the repository (its .venv, with Ray, may sit inside)
    ours = tuple(f'File "{room}/' for room in root.iterdir() if (room / "__init__.py").exists())  # its packages
    lines = done.stderr.splitlines()
    assert not [line for line in lines if any(frame in line for frame in ours)  # a frame of ours
                or "raykafka." in line and ("ERROR" in line or "failed" in line)], done.stderr[-2000:]  # or a logger


def _record_batches(bootstrap: str, topic: str) -> list[tuple[int, int, list[bytes]]]:
    """Partition 0's record batches as the broker holds them: (bytes on the wire, producer
    sequence, values), fetched and decoded at the wire level."""
    import asyncio
    import struct

    from raykafka.wire import messages
    from raykafka.wire.cluster import Cluster
    from raykafka.wire.config import parse_config
    from raykafka.wire.record_decoding import decode_record_batches

    async def fetch() -> bytes:
        cluster = Cluster(parse_config({"bootstrap.servers": bootstrap}))
        try:
            conn = await cluster.leader_connection(topic, 0)
            body = {"max_wait_ms": 100, "min_bytes": 1, "max_bytes": 64 << 20, "isolation_level": 0,
                    "topics": [{"topic": topic, "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 64 << 20}]}]}
            response = await conn.request(messages.FETCH, body, min(conn.version_for(messages.FETCH), 12))
            return bytes(response.responses[0].partitions[0].records or b"")
        finally:
            await cluster.close()

    data, out, pos = asyncio.run(fetch()), [], 0
    for batch in decode_record_batches(data):
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        pos += size
        out.append((size, batch.base_sequence, [r.value for r in batch.records]))
    return out


def test_compressed_batches_are_sized_on_the_wire_and_cut_when_the_data_stops_compressing(
        ray_session, bootstrap, topic_name):
    """With lz4, once the Flusher has measured how well a topic compresses, a batch holds many
    times batch.size in record bytes; when the data then stops compressing, the over-large batch
    is cut before it is sent, so none is over max.request.size; every record lands once, in order."""
    import random

    topic = topic_name("ratio")
    create_topic(bootstrap, topic, 1)
    rng = random.Random(5)
    repetitive = [b"%06d" % i + b"r" * 1994 for i in range(500)]  # 2,000 bytes that compress 50 times
    noise = [rng.randbytes(500) for _ in range(400)]  # 200,000 bytes that do not compress
    sent = repetitive + repetitive + noise
    config = {"bootstrap.servers": bootstrap, "compression.type": "lz4", "batch.size": 16384,
              "max.request.size": 65536, "linger.ms": 20}
    with Producer(config) as producer:
        assert producer.producer_id >= 0  # idempotent: the cut pieces need consecutive sequences
        results = [producer.send_batch(topic, values, partitions=[0] * len(values)).result(60)
                   for values in (repetitive, repetitive, noise)]
    assert [(r.delivered, r.failed) for r in results] == [(500, 0), (500, 0), (400, 0)]
    assert list(results[1].offsets) == list(range(500, 1000))
    assert list(results[2].offsets) == list(range(1000, 1400))

    batches = _record_batches(bootstrap, topic)
    assert [v for _, _, values in batches for v in values] == sent  # once each, in order
    assert [seq for _, seq, _ in batches] == list(itertools.accumulate([0] + [len(v) for *_, v in batches[:-1]]))
    first = list(itertools.accumulate(len(v) for *_, v in batches))
    second = [len(v) for (_, _, v), end in zip(batches, first, strict=True) if 500 < end <= 1000]
    assert max(second) > 16384 // 2000 * 8  # the ratio measured: batches of many times batch.size
    third = [size for (size, _, _), end in zip(batches, first, strict=True) if end > 1000]
    assert len(third) >= 4 and max(third) <= 65536  # 200 KB that did not compress, cut to fit
    assert read_back(bootstrap, topic, 1, len(sent)) == [(0, i, None, v) for i, v in enumerate(sent)]
