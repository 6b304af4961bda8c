"""The benchmark suite behind `raykafka bench`: every client side by side on one tansu, one run.

It starts its own tansu (`EmbeddedBroker`), then for each value size and codec measures, each
figure the median of `runs` runs, every client on a fresh topic of 6 partitions with acks=1:

* produce: raykafka `send` per message, `send_batch`, N pipelines in parallel; confluent-kafka
  `produce`; aiokafka `send`; kafka-python `send`; Ray Data's `Dataset.write_kafka`; raykafka's
  Ray Data path (`spark_bridge.write_dataset`); and `tansu perf` as the broker's ceiling;
* consume (a topic written once by confluent-kafka): raykafka `Consumer` into Arrow batches, a
  `ConsumerGroup` of N members, confluent-kafka `consume`, aiokafka `getmany`, kafka-python
  `poll`, `ray.data.read_kafka` and raykafka's `spark_bridge.read_dataset`;
* with --spark, a cached Spark DataFrame into Kafka (raykafka's `write_kafka`, and Ray Data's
  `write_kafka` after `ray.data.from_spark`) and a range back into a DataFrame (raykafka's
  `read_kafka`, and Ray Data's `read_kafka` then `Dataset.to_spark`);
* send→ack latency at a fixed rate with linger.ms=0 (raykafka and confluent-kafka), and the
  peak RSS of the producer's actor processes.

Timing starts after each client has connected (and, for raykafka, its actors have started),
and ends at the last acknowledgement (produce) or once every message has been read (consume).
`run_suite` returns a `Report`; `render_markdown` writes BENCHMARKS.md, `render_chart` the PNG.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib.metadata
import itertools
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import cli_rows

PARTITIONS = 6
SINGLE = ", 1 record a batch"  # a read row's label on the topic of one record per batch
READS = ("Ray Data read_kafka", "raykafka Ray Data read_dataset", "Ray Data read_kafka to Spark",
         "raykafka Spark read_kafka")  # each on an ordinary topic, and again with SINGLE


@dataclass
class Settings:
    messages: int = 100_000
    runs: int = 3
    sizes: tuple[int, ...] = (100, 1024)
    codecs: tuple[str, ...] = ("none", "lz4")
    pipelines: int = 2  # parallel producer pipelines / group members
    latency_rates: tuple[int, ...] = (1000, 2000)  # msg/s
    latency_seconds: float = 5.0
    perf_seconds: int = 10
    spark: bool = False
    clients: tuple[str, ...] | None = None  # only these labels (by prefix); None: all
    record_batches: bool = True
    hot_paths: bool = True
    against: str | None = None  # a git revision whose hot paths run beside the current ones
    quick_mode: bool = False

    @classmethod
    def quick(cls) -> Settings:
        return cls(messages=5_000, runs=3, sizes=(100,), codecs=("none",), latency_seconds=1.0,
                   perf_seconds=2, record_batches=False, hot_paths=False, quick_mode=True)


@dataclass
class Row:
    kind: str  # "produce", "consume", "latency", "memory"
    client: str
    size: int
    codec: str
    rate: float  # msg/s (latency: p50 ms; memory: MiB)
    runs: list[float] = field(default_factory=list)  # seconds per run (latency: p99 ms)
    note: str = ""
    spread: dict[str, list[float]] = field(default_factory=dict)  # latency: each run's p50 and p99
    messages: int = 0  # messages per run, where not the settings' count


@dataclass
class Report:
    settings: Settings
    rows: list[Row] = field(default_factory=list)
    machine: dict[str, str] = field(default_factory=dict)
    command: str = ""
    record_batches: list[dict[str, Any]] = field(default_factory=list)
    hot_paths: list[dict[str, Any]] = field(default_factory=list)
    against: str | None = None

    def find(self, kind: str, client: str, size: int = 100, codec: str = "none") -> Row | None:
        for row in self.rows:
            if row.kind == kind and row.client == client and row.size == size and row.codec == codec:
                return row
        return None


# ------------------------------------------------------------------------------- helpers


_CREATED: list[str] = []  # topics made since the last `_drop_topics`


def _topic(admin: Any, label: str, partitions: int = PARTITIONS) -> str:
    name = f"bench-{re.sub('[^a-z0-9]+', '-', label.lower())[:24]}-{uuid.uuid4().hex[:6]}"
    admin.create_topics({name: partitions})
    _CREATED.append(name)
    return name


def _drop_topics(admin: Any) -> None:
    """Delete the topics made since the last call. The embedded broker keeps every record in
    memory and a full run writes gigabytes (tansu perf alone over 2 GB at 1 KiB): each row
    should meet a broker that holds only what it reads."""
    names, _CREATED[:] = list(_CREATED), []
    if names:
        try:
            admin.delete_topics(names, missing_ok=True)
        except Exception as exc:  # a broker that cannot delete still serves the next row
            _log(f"could not delete {len(names)} topics: {exc}")


def _value(size: int) -> bytes:
    """A value half random, half repeated bytes, so compression has something to do."""
    half = size // 2
    return os.urandom(half).hex().encode()[:half] + b"x" * (size - half)


def _rk_config(bootstrap: str, codec: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "acks": 1, "compression.type": codec, **extra}


# ------------------------------------------------------------------------------- produce


def produce_raykafka_send(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    from raykafka.driver.producer import Producer

    value, n, times = _value(size), s.messages, []
    with Producer(_rk_config(bootstrap, codec)) as producer:
        for _ in range(s.runs):
            t = _topic(admin, "rk-send")
            _warm(producer, t)
            start = time.perf_counter()
            send = producer.send
            futures = [send(t, value) for _ in range(n)]
            assert producer.flush(300) == 0
            times.append(time.perf_counter() - start)
            assert all(f.exception() is None for f in futures[:: max(1, n // 100)])
    return times


KEYS = [b"key-%02d" % i for i in range(100)]  # the keyed rows: 100 distinct keys, in turn


def produce_raykafka_send_keyed(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    from raykafka.driver.producer import Producer

    value, n, times = _value(size), s.messages, []
    with Producer(_rk_config(bootstrap, codec, **{"linger.ms": 5})) as producer:
        for _ in range(s.runs):
            t = _topic(admin, "rk-send-keyed")
            _warm(producer, t)
            start = time.perf_counter()
            send = producer.send
            futures = [send(t, value, key=KEYS[i % 100]) for i in range(n)]
            assert producer.flush(300) == 0
            times.append(time.perf_counter() - start)
            assert all(f.exception() is None for f in futures[:: max(1, n // 100)])
    return times


def _warm(producer: Any, t: str) -> None:
    """One message to every partition, so the dispatcher actors start outside the timing."""
    assert producer.send_batch(t, [b"warm"] * PARTITIONS, partitions=list(range(PARTITIONS))).result(60).ok


def _arrow_values(value: bytes, n: int) -> Any:
    import pyarrow as pa

    return pa.table({"value": pa.array([value] * n, pa.binary())})


def produce_raykafka_batch(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    from raykafka.driver.producer import Producer

    table, n, times = _arrow_values(_value(size), s.messages), s.messages, []
    with Producer(_rk_config(bootstrap, codec)) as producer:
        for _ in range(s.runs):
            t = _topic(admin, "rk-batch")
            _warm(producer, t)
            start = time.perf_counter()
            result = producer.send_batch(t, table).result(300)  # the whole table, as a user would
            times.append(time.perf_counter() - start)
            assert result.delivered == n, result.failed
    return times


class _Pipeline:
    """One producer pipeline in its own process: N of them write in parallel."""

    def __init__(self, config: dict[str, Any]):
        from raykafka.driver.producer import Producer

        self.producer = Producer(config)

    def warm(self, topic: str) -> None:
        _warm(self.producer, topic)

    def write(self, topic: str, n: int, size: int) -> int:
        return self.producer.send_batch(topic, _arrow_values(_value(size), n)).result(300).delivered

    def close(self) -> None:
        self.producer.close()


def produce_raykafka_pipelines(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    import ray

    cls = ray.remote(num_cpus=0)(_Pipeline)
    pipes = [cls.remote(_rk_config(bootstrap, codec)) for _ in range(s.pipelines)]
    times = []
    try:
        for _ in range(s.runs):
            t = _topic(admin, "rk-pipes")
            ray.get([p.warm.remote(t) for p in pipes])
            share = s.messages // s.pipelines
            start = time.perf_counter()
            delivered = sum(ray.get([p.write.remote(t, share, size) for p in pipes]))
            times.append((time.perf_counter() - start) * s.messages / (share * s.pipelines))
            assert delivered == share * s.pipelines
    finally:
        ray.get([p.close.remote() for p in pipes])
        for p in pipes:
            ray.kill(p)
    return times


def produce_confluent(bootstrap: str, admin: Any, s: Settings, size: int, codec: str,
                      keyed: bool = False) -> list[float]:
    from confluent_kafka import Producer

    value, times, keys = _value(size), [], KEYS if keyed else [None]
    for _ in range(s.runs):
        t = _topic(admin, "confluent")
        producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "compression.type": codec})
        producer.produce(t, b"warm")
        producer.flush(30)
        start = time.perf_counter()
        confluent_produce(producer, t, value, s.messages, keys)
        times.append(time.perf_counter() - start)
    return times


def confluent_produce(producer: Any, t: str, value: bytes, n: int, keys: list[Any]) -> None:
    """`n` messages through confluent-kafka's `produce()`, keys in turn, waiting for room when its
    queue is full, then flushed. No callback a message (a Python callback would be most of the
    cost): `flush` returning 0 is what vouches for the delivery."""
    for i in range(n):
        while True:
            try:
                producer.produce(t, value, key=keys[i % len(keys)])
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0


def produce_confluent_keyed(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    return produce_confluent(bootstrap, admin, s, size, codec, keyed=True)


def produce_aiokafka_keyed(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    return produce_aiokafka(bootstrap, admin, s, size, codec, keyed=True)


def produce_aiokafka(bootstrap: str, admin: Any, s: Settings, size: int, codec: str,
                     keyed: bool = False) -> list[float]:
    from aiokafka import AIOKafkaProducer

    value = _value(size)
    keys = KEYS if keyed else [None]

    async def run(t: str) -> float:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5,
                                    compression_type=None if codec == "none" else codec)
        await producer.start()
        try:
            await producer.send_and_wait(t, b"warm")
            start = time.perf_counter()
            futures = [await producer.send(t, value, key=keys[i % len(keys)]) for i in range(s.messages)]
            await asyncio.gather(*futures)
            return time.perf_counter() - start
        finally:
            await producer.stop()

    return [asyncio.run(run(_topic(admin, "aiokafka"))) for _ in range(s.runs)]


def produce_kafka_python(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    from kafka import KafkaProducer

    value, times = _value(size), []
    for _ in range(s.runs):
        t = _topic(admin, "kafka-python")
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5,
                                 compression_type=None if codec == "none" else codec)
        producer.send(t, b"warm").get(30)
        start = time.perf_counter()
        futures = [producer.send(t, value) for _ in range(s.messages)]
        producer.flush(300)
        times.append(time.perf_counter() - start)
        assert all(f.succeeded() for f in futures[:: max(1, s.messages // 100)])
        producer.close()
    return times


def _string_dataset(size: int, n: int) -> Any:
    """A Ray Dataset of `n` rows with one string column `value`, materialized (blocks in the store)."""
    import pyarrow as pa
    import ray

    value = _value(size).decode()
    blocks = max(PARTITIONS, n // 50_000)
    per = -(-n // blocks)
    tables = [pa.table({"value": pa.array([value] * min(per, n - i), pa.string())}) for i in range(0, n, per)]
    return ray.data.from_arrow(tables).materialize()


def produce_ray_data(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    ds, times = _string_dataset(size, s.messages), []
    t = _topic(admin, "ray-data")
    for _ in range(s.runs):
        start = time.perf_counter()
        ds.write_kafka(t, bootstrap, value_serializer="string",
                       producer_config={"acks": 1, "linger.ms": 5, "compression.type": codec})
        times.append(time.perf_counter() - start)
    return times


def _cached_writes(write: Callable[..., dict[str, int]], data: Any, first: Any, topic: str, config: dict[str, Any],
                   s: Settings) -> list[float]:
    """`write(data, topic, config)` timed `s.runs` times on the producer cached for `config`,
    which an untimed write of `first` starts (timing starts once a client is connected)."""
    from raykafka.spark_bridge.producer_cache import PRODUCERS

    PRODUCERS.close_all()
    write(first, topic, config)
    times = []
    for _ in range(s.runs):
        start = time.perf_counter()
        counts = write(data, topic, config)
        times.append(time.perf_counter() - start)
        assert counts["delivered"] == s.messages, counts
    PRODUCERS.close_all()
    return times


def produce_raykafka_dataset(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    """Writes one after another with one config, as a notebook's are, on the producer cached for it."""
    from raykafka.spark_bridge.writer import write_dataset

    ds = _string_dataset(size, s.messages)
    return _cached_writes(write_dataset, ds, ds.limit(PARTITIONS * 10), _topic(admin, "rk-dataset"),
                          _rk_config(bootstrap, codec), s)


def produce_raykafka_dataset_cold(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    """As above with the cache emptied before every run: each write starts its own pipeline."""
    from raykafka.spark_bridge.producer_cache import PRODUCERS
    from raykafka.spark_bridge.writer import write_dataset

    ds, times = _string_dataset(size, s.messages), []
    t, config = _topic(admin, "rk-dataset-cold"), _rk_config(bootstrap, codec)
    for _ in range(s.runs):
        PRODUCERS.close_all()
        start = time.perf_counter()
        counts = write_dataset(ds, t, config)
        times.append(time.perf_counter() - start)
        assert counts["delivered"] == s.messages, counts
    PRODUCERS.close_all()
    return times


_SPARK: list[Any] = []  # the run's one Spark session: RayDP starts one per process


def _spark() -> Any:
    if not _SPARK:
        from raykafka.spark_bridge.session import init_spark

        _SPARK.append(init_spark("raykafka-bench"))
    return _SPARK[0]


def _spark_frame(s: Settings, size: int) -> Any:
    """A cached Spark DataFrame of `s.messages` string values."""
    spark = _spark()
    value = _value(size).decode()
    df = spark.range(s.messages).selectExpr(f"'{value}' AS value").cache()
    df.count()
    return df


def produce_ray_data_spark(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    """Ray Data's write_kafka of the same Spark DataFrame: `ray.data.from_spark`, then its writer."""
    import ray

    df, times = _spark_frame(s, size), []
    t = _topic(admin, "ray-data-spark")
    for _ in range(s.runs):
        start = time.perf_counter()
        ray.data.from_spark(df).write_kafka(t, bootstrap, value_serializer="string",
                                            producer_config={"acks": 1, "linger.ms": 5, "compression.type": codec})
        times.append(time.perf_counter() - start)
    df.unpersist()
    return times


def produce_raykafka_spark(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    """`write_kafka` of a Spark DataFrame, on the producer cached for the config, as the Ray Data path's row."""
    from raykafka.spark_bridge.writer import write_kafka

    df = _spark_frame(s, size)
    try:
        return _cached_writes(write_kafka, df, df.limit(PARTITIONS * 10), _topic(admin, "rk-spark"),
                              _rk_config(bootstrap, codec), s)
    finally:
        df.unpersist()


PERF_LINE = re.compile(r"produce_duration_ms=")


def produce_tansu_perf(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    """`tansu perf produce` for `perf_seconds`: every produce call it logs carries batch-size records."""
    from raykafka.driver.embedded_broker import tansu_binary

    batch, times = 1000, []
    for _ in range(s.runs):
        t = _topic(admin, "tansu-perf")
        cmd = [tansu_binary(), "perf", t, "--broker", f"tcp://{bootstrap}", "produce", "--batch-size", str(batch),
               "--record-size", str(size), "--producers", "2", "--duration", f"{s.perf_seconds}s"]
        env = {**os.environ, "RUST_LOG": "tansu_perf=debug", "NO_COLOR": "1"}
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=s.perf_seconds + 60, env=env)
        calls = len(PERF_LINE.findall(out.stdout + out.stderr))
        if out.returncode or not calls:
            raise RuntimeError(f"tansu perf exited {out.returncode} after {calls} produce calls")
        times.append(s.perf_seconds * s.messages / (calls * batch))  # seconds per `messages` at its rate
    return times


# Rows whose runs are mostly start-up (a producer's actors per run, a second pipeline, tansu
# perf's fixed 10 s): measured at the first codec only, to keep the whole run near 15 minutes
NEW_CONSUMER = "raykafka Consumer → Arrow, new Consumer"
UNCOMPRESSED_ONLY = {"raykafka N pipelines send_batch()", NEW_CONSUMER, "raykafka send() per message, keyed",
                     "confluent-kafka produce(), keyed", "aiokafka send(), keyed", "raykafka Ray Data write_dataset",
                     "raykafka Ray Data write_dataset, cold start",
                     "Ray Data write_kafka from Spark", "raykafka Spark write_kafka", "tansu perf (broker ceiling)",
                     *READS, *(label + SINGLE for label in READS)}

PRODUCERS: list[tuple[str, Callable[..., list[float]]]] = [
    ("raykafka send() per message", produce_raykafka_send),
    ("raykafka send_batch() Arrow", produce_raykafka_batch),
    ("raykafka N pipelines send_batch()", produce_raykafka_pipelines),
    ("confluent-kafka produce()", produce_confluent),
    ("aiokafka send()", produce_aiokafka),
    ("raykafka send() per message, keyed", produce_raykafka_send_keyed),
    ("confluent-kafka produce(), keyed", produce_confluent_keyed),
    ("aiokafka send(), keyed", produce_aiokafka_keyed),
    ("kafka-python send()", produce_kafka_python),
    ("Ray Data write_kafka", produce_ray_data),
    ("raykafka Ray Data write_dataset", produce_raykafka_dataset),
    ("raykafka Ray Data write_dataset, cold start", produce_raykafka_dataset_cold),
    ("Ray Data write_kafka from Spark", produce_ray_data_spark),
    ("raykafka Spark write_kafka", produce_raykafka_spark),
    ("tansu perf (broker ceiling)", produce_tansu_perf),
]


# ------------------------------------------------------------------------------- consume


def fill_topic(bootstrap: str, admin: Any, n: int, size: int, codec: str, per_batch: int = 10_000) -> str:
    """A topic of `n` messages written by confluent-kafka, `per_batch` records per record batch at
    most; message i to partition i % PARTITIONS. Each partition's last message goes alone, in a
    batch of its own, so that tansu's ListOffsets(latest), the last batch's base offset + 1, is the
    partition's end: Ray Data's `read_kafka` ends each partition there (an end offset it is given
    is clamped to that answer), and would otherwise stop at the last batch's first record."""
    from confluent_kafka import Producer

    t = _topic(admin, f"consume-{size}-{codec}-{per_batch}")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20 if per_batch > 1 else 0,
                         "batch.num.messages": per_batch, "queue.buffering.max.messages": 1_000_000,
                         "compression.type": codec})
    value = _value(size)
    alone = min(n, PARTITIONS)  # the last message of each partition
    for i in range(n - alone):
        while True:
            try:
                producer.produce(t, value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    for i in range(n - alone, n):
        producer.produce(t, value, partition=i % PARTITIONS)
        assert producer.flush(30) == 0  # a batch of its own
    return t


def consume_raykafka(bootstrap: str, t: str, s: Settings) -> list[float]:
    """Warm: the consumer's actors run already; each run seeks to 0 and reads everything again."""
    from raykafka.driver.consumer import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap})
    times = []
    try:
        partitions = sorted(consumer.assign_topic(t, "latest"))
        for run in range(s.runs + 1):  # run 0 starts the actors and is not counted
            start = time.perf_counter()
            for p in partitions:
                consumer.seek(t, p, 0)
            got = 0
            for batch in consumer.batches(timeout=60):
                got += batch.num_rows
                if got >= s.messages:
                    break
            if run:
                times.append(time.perf_counter() - start)
            assert got == s.messages, got
    finally:
        consumer.close()
    return times


def consume_raykafka_new(bootstrap: str, t: str, s: Settings) -> list[float]:
    """Cold, as a user waits: each run is a new Consumer, timed from its construction (its
    actors' start and `assign_topic` included) to every message held."""
    from raykafka.driver.consumer import Consumer

    times = []
    for _ in range(s.runs):
        start = time.perf_counter()
        consumer = Consumer({"bootstrap.servers": bootstrap})
        try:
            consumer.assign_topic(t, "earliest")
            got = 0
            for batch in consumer.batches(timeout=60):
                got += batch.num_rows
                if got >= s.messages:
                    break
            times.append(time.perf_counter() - start)
            assert got == s.messages, got
        finally:
            consumer.close()
    return times


def _count_rows(batch: Any) -> None:
    """The group members' handler: reading into Arrow is the work measured."""


def consume_raykafka_group(bootstrap: str, t: str, s: Settings) -> list[float]:
    """A ConsumerGroup of N members, timed from the first claimed partition to every partition's
    end committed: joining takes tens of seconds on tansu and is left out (see the row's note)."""
    from raykafka.driver.consumer_group import ConsumerGroup

    times = []
    per_partition = -(-s.messages // PARTITIONS)
    for _ in range(s.runs):
        config = {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "auto.commit.interval.ms": 50}
        with ConsumerGroup(config, [t], _count_rows, members=s.pipelines) as group:
            deadline, start = time.monotonic() + 180, None
            while True:
                committed: dict[Any, int] = {}
                statuses = group.status()
                for status in statuses:
                    if status.get("error"):
                        raise RuntimeError(status["error"])
                    committed.update(status.get("committed") or {})
                if start is None and any(status.get("claims") for status in statuses):
                    start = time.perf_counter()
                done = sum(min(int(v), per_partition) for v in committed.values())
                if done >= s.messages:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"group committed {done} of {s.messages}")
                time.sleep(0.02)  # polling the members' committed offsets: no event to await
            times.append(time.perf_counter() - (start or time.perf_counter()))
    return times


def consume_confluent(bootstrap: str, t: str, s: Settings) -> list[float]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    times = []
    for _ in range(s.runs):
        start = time.perf_counter()
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                      "enable.auto.commit": False})
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got = 0
        while got < s.messages:
            got += sum(1 for m in c.consume(num_messages=10000, timeout=1.0) if not m.error())
        times.append(time.perf_counter() - start)
        c.close()
    return times


def consume_aiokafka(bootstrap: str, t: str, s: Settings) -> list[float]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go() -> float:
        start = time.perf_counter()
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await c.start()
        tps = [TopicPartition(t, p) for p in range(PARTITIONS)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        got = 0
        while got < s.messages:
            batches = await c.getmany(timeout_ms=1000, max_records=10000)
            got += sum(len(v) for v in batches.values())
        elapsed = time.perf_counter() - start
        await c.stop()
        return elapsed

    return [asyncio.run(go()) for _ in range(s.runs)]


def consume_kafka_python(bootstrap: str, t: str, s: Settings) -> list[float]:
    from kafka import KafkaConsumer, TopicPartition

    times = []
    for _ in range(s.runs):
        start = time.perf_counter()
        c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        tps = [TopicPartition(t, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        got = 0
        while got < s.messages:
            got += sum(len(v) for v in c.poll(timeout_ms=1000, max_records=10000).values())
        times.append(time.perf_counter() - start)
        c.close()
    return times


def consume_ray_data(bootstrap: str, t: str, s: Settings) -> list[float]:
    import ray

    times = []
    for _ in range(s.runs):
        start = time.perf_counter()
        n = ray.data.read_kafka(t, bootstrap_servers=bootstrap).materialize().count()
        times.append(time.perf_counter() - start)
        assert n == s.messages, n
    return times


def consume_raykafka_dataset(bootstrap: str, t: str, s: Settings) -> list[float]:
    from raykafka.spark_bridge.reader import read_dataset

    times = []
    for _ in range(s.runs):
        start = time.perf_counter()
        n = read_dataset(t, {"bootstrap.servers": bootstrap}).materialize().count()
        times.append(time.perf_counter() - start)
        assert n == s.messages, n
    return times


def consume_ray_data_spark(bootstrap: str, t: str, s: Settings) -> list[float]:
    """Ray Data's read_kafka of the same range into a Spark DataFrame (`Dataset.to_spark`)."""
    import ray

    spark, times = _spark(), []
    for _ in range(s.runs):
        start = time.perf_counter()
        n = ray.data.read_kafka(t, bootstrap_servers=bootstrap).to_spark(spark).count()
        times.append(time.perf_counter() - start)
        assert n == s.messages, n
    return times


def consume_raykafka_spark(bootstrap: str, t: str, s: Settings) -> list[float]:
    from raykafka.spark_bridge.reader import read_kafka

    spark, times = _spark(), []
    for _ in range(s.runs):
        start = time.perf_counter()
        n = read_kafka(spark, t, config={"bootstrap.servers": bootstrap}).count()
        times.append(time.perf_counter() - start)
        assert n == s.messages, n
    return times


# The Ray Data and Spark reads again on a topic of one record per batch: the worst case, where
# the broker sets the pace (each batch a fetch's worth of work for one record).
SINGLE_RECORD_BATCHES = {label + SINGLE for label in READS}
# at most this many messages a run on a topic of one record per batch: writing 1,000,000 such
# batches took confluent-kafka over 120 s here, and then the embedded tansu dropped its connections
SINGLE_RECORD_CAP = 200_000
# --quick leaves out what costs tens of seconds of start-up: a group's join (~25 s on tansu) and
# a second set of producer actors
QUICK_SKIPS = {"raykafka ConsumerGroup N members", "raykafka N pipelines send_batch()"}
NOTES = {NEW_CONSUMER: "each run a new Consumer, timed from its construction: its actors' start and assign_topic "
                       "included, as confluent-kafka consume()'s runs are",
         "raykafka ConsumerGroup N members": "from the first claim; joining (tansu answers a JoinGroup after half "
                                                "of session.timeout.ms, 22.5 s by default) not counted",
         "Ray Data read_kafka": "each partition's last record in a batch of its own, so that tansu's ListOffsets "
                                "answer is the partition's end",
         "Ray Data read_kafka to Spark": "as Ray Data read_kafka; ends with the DataFrame counted",
         "raykafka Spark read_kafka": "ends with the DataFrame counted",
         "Ray Data read_kafka" + SINGLE: "topic of 1 record per batch, at most 200,000 messages a run",
         "raykafka Ray Data read_dataset" + SINGLE: "topic of 1 record per batch, at most 200,000 messages a run",
         "Ray Data read_kafka to Spark" + SINGLE: "topic of 1 record per batch, at most 200,000 messages a run; ends "
                                                  "with the DataFrame counted",
         "raykafka Spark read_kafka" + SINGLE: "topic of 1 record per batch, at most 200,000 messages a run; ends with "
                                               "the DataFrame counted",
         "Ray Data write_kafka from Spark": "from a cached Spark DataFrame, through ray.data.from_spark",
         "raykafka Spark write_kafka": "from the same cached DataFrame; the producer cached for the config",
         "raykafka Ray Data write_dataset": "the producer cached for the config, started by an untimed first write",
         "raykafka Ray Data write_dataset, cold start": "the cache emptied before each run: a producer started per run, its start-up counted"}

CONSUMERS: list[tuple[str, Callable[..., list[float]]]] = [
    ("raykafka Consumer → Arrow", consume_raykafka),
    (NEW_CONSUMER, consume_raykafka_new),
    ("raykafka ConsumerGroup N members", consume_raykafka_group),
    ("confluent-kafka consume()", consume_confluent),
    ("aiokafka getmany()", consume_aiokafka),
    ("kafka-python poll()", consume_kafka_python),
    ("Ray Data read_kafka", consume_ray_data),
    ("raykafka Ray Data read_dataset", consume_raykafka_dataset),
    ("Ray Data read_kafka to Spark", consume_ray_data_spark),
    ("raykafka Spark read_kafka", consume_raykafka_spark),
    ("Ray Data read_kafka" + SINGLE, consume_ray_data),
    ("raykafka Ray Data read_dataset" + SINGLE, consume_raykafka_dataset),
    ("Ray Data read_kafka to Spark" + SINGLE, consume_ray_data_spark),
    ("raykafka Spark read_kafka" + SINGLE, consume_raykafka_spark),
]


# ------------------------------------------------------------------------------- latency and memory


def _percentiles(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    p = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    return p(0.50), p(0.99)


def _paced(count: int, rate: int, send: Callable[[float], None], idle: Callable[[float], None]) -> None:
    start = time.perf_counter()
    for i in range(count):
        due = start + i / rate
        while (now := time.perf_counter()) < due:
            idle(due - now)
        send(time.perf_counter())


def latency_label(client: str, rate: int, keyed: bool = False) -> str:
    """A paced latency row's label: `raykafka send()` or `confluent-kafka produce()` at `rate`."""
    return f"{client} linger.ms=0, {rate:,} msg/s" + (", keyed" if keyed else "")


RAYKAFKA_SEND, CONFLUENT_PRODUCE = "raykafka send()", "confluent-kafka produce()"
ONE_AT_A_TIME_PER_SECOND = 100  # the one-at-a-time rows send this many messages per second of latency_seconds


def latency_raykafka(bootstrap: str, admin: Any, s: Settings, rate: int, keyed: bool = False,
                     nagle_wait: float | None = None) -> tuple[float, float]:
    """`nagle_wait`: the sender's NAGLE_WAIT for this run (None: as shipped)."""
    from raykafka.driver import producer as producer_module

    shipped = producer_module.NAGLE_WAIT
    if nagle_wait is not None:
        producer_module.NAGLE_WAIT = nagle_wait
    try:
        return _latency_raykafka(bootstrap, admin, s, rate, keyed)
    finally:
        producer_module.NAGLE_WAIT = shipped


def _latency_raykafka(bootstrap: str, admin: Any, s: Settings, rate: int, keyed: bool) -> tuple[float, float]:
    from raykafka.driver.producer import Producer

    t, lat, keys, sent = _topic(admin, "lat-rk"), [], KEYS if keyed else [None], itertools.count()
    with Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0}) as producer:
        _warm(producer, t)
        value = _value(100)

        def send(t0: float) -> None:
            producer.send(t, value, key=keys[next(sent) % len(keys)]).add_done_callback(
                lambda f, t0=t0: lat.append(time.perf_counter() - t0))

        _paced(int(rate * s.latency_seconds), rate, send, lambda d: time.sleep(min(d, 0.0005)))
        assert producer.flush(60) == 0
    return _percentiles(lat)


def latency_one_at_a_time(bootstrap: str, admin: Any, s: Settings) -> tuple[float, float]:
    from raykafka.app.bench import budget

    count = max(1, int(s.latency_seconds * ONE_AT_A_TIME_PER_SECOND))
    return _percentiles(budget.one_at_a_time_latencies(bootstrap, _topic(admin, "lat-one"), count, _warm))


def latency_chain(bootstrap: str, admin: Any, s: Settings) -> tuple[float, float]:
    from raykafka.app.bench import budget

    return _percentiles(budget.chain_latencies(max(1, int(s.latency_seconds * ONE_AT_A_TIME_PER_SECOND))))


def latency_clients(s: Settings) -> list[tuple[str, Callable[..., tuple[float, float]]]]:
    """Every latency row's label and how it is measured: each rate, keyed and not, ours and
    confluent-kafka's; then, one message at a time, ours and the plain-Ray chain as long as our
    warm path; and what the sender's Nagle wait is worth, at the top rate (a diagnostic)."""
    from raykafka.app.bench.budget import CHAIN_ROW, ONE_AT_A_TIME_ROW

    clients: list[tuple[str, Callable[..., tuple[float, float]]]] = []
    for rate in s.latency_rates:
        for keyed in (False, True):
            clients += [(latency_label(RAYKAFKA_SEND, rate, keyed), functools.partial(latency_raykafka, rate=rate, keyed=keyed)),
                        (latency_label(CONFLUENT_PRODUCE, rate, keyed),
                         functools.partial(latency_confluent, rate=rate, keyed=keyed))]
    clients += [(ONE_AT_A_TIME_ROW, latency_one_at_a_time), (CHAIN_ROW, latency_chain)]
    top = max(s.latency_rates)
    clients.append((latency_label(RAYKAFKA_SEND, top, keyed=True) + ", Nagle wait off",
                    functools.partial(latency_raykafka, rate=top, keyed=True, nagle_wait=0.0)))
    return [(label, fn) for label, fn in clients if _wanted(s, label)]


def latency_rows(bootstrap: str, admin: Any, s: Settings) -> list[Row]:
    """Each client's p50 and p99, the median over `s.runs` runs taken in turn (a run is short, so
    one stall on the box would otherwise decide a p99)."""
    clients = latency_clients(s)
    figures: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in clients}
    failed: dict[str, str] = {}
    for _ in range(s.runs):
        for label, fn in clients:
            if label in failed:
                continue
            try:
                figures[label].append(fn(bootstrap, admin, s))
            except Exception as exc:
                failed[label] = _why(exc)
    rows = []
    for label, _ in clients:
        runs = figures[label]
        if label in failed or not runs:
            rows.append(Row("latency", label, 100, "none", float("nan"), note=failed.get(label, "no run")))
        else:
            rows.append(Row("latency", label, 100, "none", statistics.median(p50 for p50, _ in runs),
                            [statistics.median(p99 for _, p99 in runs)],
                            spread={"p50": [p50 for p50, _ in runs], "p99": [p99 for _, p99 in runs]}))
        _log(f"latency {label} done")
    return rows


def latency_confluent(bootstrap: str, admin: Any, s: Settings, rate: int, keyed: bool = False) -> tuple[float, float]:
    from confluent_kafka import Producer

    t, lat, keys, sent = _topic(admin, "lat-confluent"), [], KEYS if keyed else [None], itertools.count()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    producer.produce(t, b"warm")
    producer.flush(30)
    value = _value(100)

    def send(t0: float) -> None:
        producer.produce(t, value, key=keys[next(sent) % len(keys)],
                         on_delivery=lambda err, msg, t0=t0: lat.append(time.perf_counter() - t0))
        producer.poll(0)

    _paced(int(rate * s.latency_seconds), rate, send, lambda d: producer.poll(min(d, 0.0005)))
    assert producer.flush(60) == 0
    return _percentiles(lat)


def command_line_rows(bootstrap: str, admin: Any, s: Settings) -> list[Row]:
    """The command line's rows (`cli_rows`), each the median of `s.runs` runs in seconds."""
    rows = []
    for label, runs, note in cli_rows.rows_of(cli_rows.measure(bootstrap, lambda: _topic(admin, "cli"), s.runs)):
        rows.append(Row("cli", label, 100, "none", statistics.median(runs) if runs else float("nan"), runs or [],
                        note=note))
        _log(f"cli {label}: {rows[-1].rate:.2f} s {note}")
    return rows


def budget_rows(bootstrap: str, admin: Any, s: Settings) -> list[Row]:
    """The process budget's rows (`budget`): a new Consumer's start on a wide topic, a
    producer's first messages to new topics, and one producer's memory and CPU a message during
    `send_batch`s of `s.messages`."""
    from raykafka.app.bench import budget

    rows = []
    try:
        t = _topic(admin, "assign", budget.ASSIGN_PARTITIONS)
        times, processes = budget.assign_seconds(bootstrap, t, s.runs)
        rows.append(Row("startup", budget.ASSIGN_ROW, 100, "none", statistics.median(times), times,
                        note="consumer processes each run: " + ", ".join(map(str, processes))))
    except Exception as exc:
        rows.append(Row("startup", budget.ASSIGN_ROW, 100, "none", float("nan"), note=_why(exc)))
    try:
        topics = [_topic(admin, "first") for _ in range(budget.NEW_TOPICS + 1)]
        seconds, before, after = budget.new_topics_seconds(bootstrap, topics, _rk_config(bootstrap, "none"))
        rows.append(Row("startup", budget.NEW_TOPICS_ROW, 100, "none", seconds, [seconds],
                        note=f"producer processes: {before} before, {after} after", spread={"processes": [before, after]}))
    except Exception as exc:
        rows.append(Row("startup", budget.NEW_TOPICS_ROW, 100, "none", float("nan"), note=_why(exc)))
    _drop_topics(admin)
    try:
        got = budget.batch_footprint(lambda: _topic(admin, "footprint"), _warm, _arrow_values(_value(100), s.messages),
                                     s.runs, _rk_config(bootstrap, "none"))
        peak, cpu, services = got["peak_mib"], got["cpu_us"], got["ray_services_cpu_us"]
        bare_pss, bare_note = _bare_actor()
        rows.append(Row("memory", budget.MEMORY_ROW, 100, "none", peak["pss"], note=(
            f"{got['processes']} processes, send_batch of {s.messages:,}; peaks of the sums: PSS {peak['pss']:,.0f} "
            f"MiB, RSS {peak['rss']:,.0f} MiB, USS {peak['uss']:,.0f} MiB; each process's peak PSS: "
            + ", ".join(f"{role} {mib:,.0f}" for role, mib in sorted(got["pss_mib"].items())) + " MiB; "
            + bare_note), spread={"processes": [got["processes"]], "bare actor PSS": [bare_pss],
                                  "rss": [peak["rss"]], "uss": [peak["uss"]]}))
        rows.append(Row("cpu", budget.CPU_ROW, 100, "none", statistics.median(cpu), cpu, note=(
            f"the producer's {got['processes']} processes and the driver, µs a message; Ray's raylet and GCS "
            f"beside them: {statistics.median(services):.2f} µs; the broker's not counted"),
            spread={"ray services": services}))
    except Exception as exc:
        rows += [Row(kind, label, 100, "none", float("nan"), note=_why(exc))
                 for kind, label in (("memory", budget.MEMORY_ROW), ("cpu", budget.CPU_ROW))]
    _drop_topics(admin)
    for row in rows:
        _log(f"{row.kind} {row.client}: {row.rate:,.2f} {row.note}")
    return rows


def _bare_actor() -> tuple[float, str]:
    """What one Ray actor process holds with nothing of ours in it, every role's floor: its PSS
    (MiB), and a note of its PSS, RSS and USS."""
    import psutil
    import ray

    @ray.remote(num_cpus=0)
    class Bare:
        def pid(self) -> int:
            return os.getpid()

    bare = Bare.remote()
    try:
        info = psutil.Process(ray.get(bare.pid.remote(), timeout=60)).memory_full_info()
    finally:
        ray.kill(bare)
    return info.pss / 2**20, (f"a bare Ray actor: {info.pss / 2**20:.0f} MiB PSS, {info.rss / 2**20:.0f} MiB RSS, "
                              f"{info.uss / 2**20:.0f} MiB its own (USS)")


# ------------------------------------------------------------------------------- the run


def machine() -> dict[str, str]:
    import aiokafka
    import confluent_kafka
    import kafka
    import pyarrow
    import ray

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    from raykafka.driver.embedded_broker import tansu_binary

    return {"nproc": str(os.cpu_count()), "cpu": cpu, "python": platform.python_version(),
            "os": f"{platform.system()} {platform.release()}", "ray": ray.__version__,
            "pyarrow": pyarrow.__version__, "confluent-kafka": importlib.metadata.version("confluent-kafka"),
            "librdkafka": confluent_kafka.libversion()[0], "aiokafka": aiokafka.__version__,
            "kafka-python": kafka.__version__, "tansu": os.path.basename(tansu_binary()),
            "load": " ".join(f"{x:.2f}" for x in os.getloadavg())}


def _wanted(s: Settings, label: str) -> bool:
    if "Spark" in label and not s.spark:
        return False
    return s.clients is None or any(label.startswith(c) for c in s.clients)


_PROGRESS: list[Any] = []  # the run's progress bar (app/progress.py), while run_suite runs


def _log(msg: str) -> None:
    line = f"[bench {time.strftime('%H:%M:%S')}] {msg}"
    if _PROGRESS and not _PROGRESS[0].disable:
        _PROGRESS[0].write(line, file=sys.stderr)  # above the bar, which is drawn again below
    else:
        print(line, file=sys.stderr, flush=True)


def run_suite(s: Settings, command: str = "") -> Report:
    import ray

    from raykafka.app.progress import bar
    from raykafka.driver.admin import Admin
    from raykafka.driver.embedded_broker import EmbeddedBroker

    report = Report(settings=s, machine=machine(), command=command)
    _PROGRESS.append(bar("bench", unit="row"))  # a row measured per step; off unless stderr is a terminal
    started_ray = not ray.is_initialized()
    if started_ray and any(_wanted(s, label) for label in cli_rows.RAYKAFKA_ROWS):
        with EmbeddedBroker() as broker, Admin(broker.bootstrap) as admin:  # first: no Ray runs yet
            report.rows += command_line_rows(broker.bootstrap, admin, s)
            _drop_topics(admin)
    if started_ray:
        from raykafka.spark_bridge.session import init_ray

        init_ray(num_cpus=2, configure_logging=False) if s.spark else ray.init(
            num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        from ray.data import DataContext

        DataContext.get_current().enable_progress_bars = False
    except Exception:
        pass
    try:
        with EmbeddedBroker() as broker, Admin(broker.bootstrap) as admin:
            bootstrap = broker.bootstrap
            report.rows += latency_rows(bootstrap, admin, s)  # first, while nothing else runs on the box
            _drop_topics(admin)
            if _wanted(s, "raykafka budget"):
                report.rows += budget_rows(bootstrap, admin, s)  # start-up next, the box still quiet
            for size in s.sizes:
                for codec in s.codecs:
                    report.rows += _config_rows(bootstrap, admin, s, size, codec, spark=False)
            if s.spark:  # last: from its start, Spark's executor holds one of the CPUs Ray tasks use
                for size in s.sizes:
                    report.rows += _config_rows(bootstrap, admin, s, size, s.codecs[0], spark=True)
    finally:
        if _SPARK:
            from raykafka.spark_bridge.session import stop_spark

            stop_spark()
            _SPARK.clear()
        if started_ray:
            ray.shutdown()
        _PROGRESS.pop().close()
    if s.record_batches:
        report.record_batches = record_batch_rates()
    if s.hot_paths:
        from raykafka.app.bench import hot_paths

        _log("hot paths")
        report.hot_paths, report.against = hot_paths.measure(s.against), s.against
    return report


def _config_rows(bootstrap: str, admin: Any, s: Settings, size: int, codec: str, spark: bool) -> list[Row]:
    """One value size and codec: its produce rows, then its consume rows on topics written for
    them; the Spark rows alone, or every other row."""
    def wanted(label: str) -> bool:
        return (_wanted(s, label) and ("Spark" in label) == spark and not (label in QUICK_SKIPS and s.quick_mode)
                and not (label in UNCOMPRESSED_ONLY and codec != s.codecs[0]))

    rows = []
    for label, fn in PRODUCERS:
        if wanted(label):
            rows.append(_measure("produce", label, size, codec, s,
                                 lambda fn=fn: fn(bootstrap, admin, s, size, codec)))
            _drop_topics(admin)
    topics: dict[bool, str] = {}  # one record per batch or not -> the topic written for that
    for label, fn in CONSUMERS:
        if not wanted(label) or (label in QUICK_SKIPS and (size, codec) != (s.sizes[0], s.codecs[0])):
            continue  # the group's join costs ~25 s a run: one config is enough
        single = label in SINGLE_RECORD_BATCHES
        run = dataclasses.replace(s, messages=min(s.messages, SINGLE_RECORD_CAP)) if single else s
        if single not in topics:
            topics[single] = fill_topic(bootstrap, admin, run.messages, size, codec, **({"per_batch": 1} if single else {}))
        rows.append(_measure("consume", label, size, codec, run, lambda fn=fn, t=topics[single], run=run: fn(bootstrap, t, run),
                             NOTES.get(label, "")))
    _drop_topics(admin)
    return rows


def _why(exc: BaseException) -> str:
    return f"failed: {type(exc).__name__}: {str(exc)[:120]}".replace("|", "/").replace("\n", " ")


def _measure(kind: str, label: str, size: int, codec: str, s: Settings, fn: Callable[[], list[float]],
             note: str = "") -> Row:
    """One client's runs; a client failing leaves a row saying why, and the others still run."""
    try:
        times = fn()
        row = Row(kind, label, size, codec, s.messages / statistics.median(times), times, note, messages=s.messages)
    except Exception as exc:
        row = Row(kind, label, size, codec, float("nan"), note=_why(exc))
    _log(f"{kind} {label} {size}B {codec}: {row.rate:,.0f} msg/s {row.note}")
    if _PROGRESS:
        _PROGRESS[0].update(1)
    return row


def record_batch_rates() -> list[dict[str, Any]]:
    """The codec table of app/bench/record_batches.py (encode/decode in this process)."""
    from raykafka.app.bench import record_batches

    return record_batches.measure()
