"""Consume throughput, side by side: raykafka (Arrow batches through Ray actors) against
confluent-kafka `consume`, aiokafka `getmany` and kafka-python `poll`, on one tansu.

    python bench/consume.py [--messages 100000] [--size 100] [--partitions 6] [--runs 3] [-b HOST:PORT]

Every client reads the same topic from the beginning with partitions assigned directly (no
group), until it holds every message. Each figure is the median of `--runs`; raykafka "cold"
includes starting its actors, "warm" re-reads with `seek` on running actors after one
unmeasured read. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid


def produce(bootstrap: str, topic: str, n: int, size: int, partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 1_000_000})
    value = b"x" * size
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def raykafka_cold(bootstrap: str, topic: str, n: int) -> float:
    from raykafka.driver.consumer import Consumer

    start = time.perf_counter()
    consumer = Consumer({"bootstrap.servers": bootstrap})
    try:
        consumer.assign_topic(topic, "earliest")
        got = 0
        for batch in consumer.batches(timeout=30):
            got += batch.num_rows
            if got >= n:
                break
        elapsed = time.perf_counter() - start
        assert got == n, got
    finally:
        consumer.close()
    return elapsed


def raykafka_warm(bootstrap: str, topic: str, n: int, runs: int) -> list[float]:
    from raykafka.driver.consumer import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap})
    times = []
    try:
        partitions = sorted(consumer.assign_topic(topic, "latest"))
        for run in range(runs + 1):  # run 0 warms the actors up and is not counted
            start = time.perf_counter()
            for p in partitions:
                consumer.seek(topic, p, 0)
            got = 0
            for batch in consumer.batches(timeout=30):
                got += batch.num_rows
                if got >= n:
                    break
            if run:
                times.append(time.perf_counter() - start)
            assert got == n, got
    finally:
        consumer.close()
    return times


def confluent(bootstrap: str, topic: str, n: int, partitions: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    start = time.perf_counter()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    while got < n:
        msgs = c.consume(num_messages=10000, timeout=1.0)
        got += sum(1 for m in msgs if not m.error())
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


def aiokafka_getmany(bootstrap: str, topic: str, n: int, partitions: int) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go() -> float:
        start = time.perf_counter()
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await c.start()
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        got = 0
        while got < n:
            batches = await c.getmany(timeout_ms=1000, max_records=10000)
            got += sum(len(v) for v in batches.values())
        elapsed = time.perf_counter() - start
        await c.stop()
        return elapsed

    return asyncio.run(go())


def kafka_python(bootstrap: str, topic: str, n: int, partitions: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    start = time.perf_counter()
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    got = 0
    while got < n:
        got += sum(len(v) for v in c.poll(timeout_ms=1000, max_records=10000).values())
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("-b", "--bootstrap")
    args = parser.parse_args(argv)

    import ray

    from raykafka.driver.admin import Admin
    from raykafka.driver.embedded_broker import EmbeddedBroker

    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        topic = f"bench-consume-{uuid.uuid4().hex[:6]}"
        with Admin(bootstrap) as admin:
            admin.create_topics({topic: args.partitions})
        t0 = time.perf_counter()
        produce(bootstrap, topic, args.messages, args.size, args.partitions)
        print(f"produced {args.messages} x {args.size} B over {args.partitions} partitions in "
              f"{time.perf_counter() - t0:.1f}s", file=sys.stderr)
        n, p, runs = args.messages, args.partitions, args.runs
        results = {
            "raykafka → Arrow batches (cold: actors started in the run)": [raykafka_cold(bootstrap, topic, n)
                                                                           for _ in range(runs)],
            "raykafka → Arrow batches (warm: seek on running actors, after one unmeasured read)": raykafka_warm(bootstrap, topic, n, runs),
            "confluent-kafka `consume`": [confluent(bootstrap, topic, n, p) for _ in range(runs)],
            "aiokafka `getmany`": [aiokafka_getmany(bootstrap, topic, n, p) for _ in range(runs)],
            "kafka-python `poll`": [kafka_python(bootstrap, topic, n, p) for _ in range(runs)],
        }
    finally:
        ray.shutdown()
        if broker is not None:
            broker.stop()
    rates = {name: n / statistics.median(times) for name, times in results.items()}
    base = rates["confluent-kafka `consume`"]
    print(f"\nConsume {n:,} messages of {args.size} B over {p} partitions, one tansu, "
          f"median of {runs} runs, 2 cores\n")
    print("| client | msg/s | vs confluent-kafka | runs (s) |")
    print("| --- | ---: | ---: | --- |")
    for name, times in results.items():
        print(f"| {name} | {rates[name]:,.0f} | {rates[name] / base:.2f}x | "
              f"{', '.join(f'{t:.2f}' for t in times)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
