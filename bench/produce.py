"""Produce throughput side by side, on one embedded tansu in the same run.

raykafka (per-message `send`, and `send_batch`), confluent-kafka (per-message `produce`),
aiokafka and kafka-python: N messages of 100 bytes, null keys, 6 partitions, acks=1; each client
writes to its own topic, every run timed from the first send to the last acknowledgement; the
median of RUNS runs. Producer start-up (for raykafka: its actors) is outside the timing.
Prints a Markdown table with msg/s and the ratio to confluent-kafka.

Run: python bench/produce.py [N] [RUNS]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
PARTITIONS = 6
VALUE = b"v" * 100


def topic(admin, label: str) -> str:
    name = f"bench-{label}-{uuid.uuid4().hex[:6]}"
    admin.create_topics({name: PARTITIONS})
    return name


def warm(producer, t: str) -> None:
    """One message to every partition: its dispatcher actors start outside the timing."""
    assert producer.send_batch(t, [b"warm"] * PARTITIONS, partitions=list(range(PARTITIONS))).result(60).ok


def bench_raykafka_send(bootstrap: str, admin) -> list[float]:
    from raykafka.driver.producer import Producer

    times = []
    with Producer({"bootstrap.servers": bootstrap, "acks": 1}) as producer:
        for _ in range(RUNS):
            t = topic(admin, "rk-send")
            warm(producer, t)
            start = time.perf_counter()
            send = producer.send
            futures = [send(t, VALUE) for _ in range(N)]
            assert producer.flush(300) == 0
            times.append(time.perf_counter() - start)
            assert all(f.exception() is None for f in futures[:: max(1, N // 100)])
    return times


def bench_raykafka_batch(bootstrap: str, admin) -> list[float]:
    from raykafka.driver.producer import Producer

    times = []
    values = [VALUE] * N
    with Producer({"bootstrap.servers": bootstrap, "acks": 1}) as producer:
        for _ in range(RUNS):
            t = topic(admin, "rk-batch")
            warm(producer, t)
            start = time.perf_counter()
            futures = [producer.send_batch(t, values[i:i + 20_000]) for i in range(0, N, 20_000)]
            results = [f.result(300) for f in futures]
            times.append(time.perf_counter() - start)
            assert sum(r.delivered for r in results) == N
    return times


def bench_confluent(bootstrap: str, admin) -> list[float]:
    from confluent_kafka import Producer

    times = []
    for _ in range(RUNS):
        t = topic(admin, "confluent")
        producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5})
        producer.produce(t, b"warm")
        producer.flush(30)
        start = time.perf_counter()
        for i in range(N):
            while True:
                try:
                    producer.produce(t, VALUE)
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 10_000 == 0:
                producer.poll(0)
        assert producer.flush(300) == 0
        times.append(time.perf_counter() - start)
    return times


def bench_aiokafka(bootstrap: str, admin) -> list[float]:
    from aiokafka import AIOKafkaProducer

    async def run(t: str) -> float:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
        await producer.start()
        try:
            await producer.send_and_wait(t, b"warm")
            start = time.perf_counter()
            futures = [await producer.send(t, VALUE) for _ in range(N)]
            await asyncio.gather(*futures)
            return time.perf_counter() - start
        finally:
            await producer.stop()

    return [asyncio.run(run(topic(admin, "aiokafka"))) for _ in range(RUNS)]


def bench_kafka_python(bootstrap: str, admin) -> list[float]:
    from kafka import KafkaProducer

    times = []
    for _ in range(RUNS):
        t = topic(admin, "kafka-python")
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
        producer.send(t, b"warm").get(30)
        start = time.perf_counter()
        futures = [producer.send(t, VALUE) for _ in range(N)]
        producer.flush(300)
        times.append(time.perf_counter() - start)
        assert all(f.succeeded() for f in futures[:: max(1, N // 100)])
        producer.close()
    return times


def main() -> None:
    import ray

    from raykafka.driver.admin import Admin
    from raykafka.driver.embedded_broker import EmbeddedBroker

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    clients = [
        ("raykafka send() per message", bench_raykafka_send),
        ("raykafka send_batch()", bench_raykafka_batch),
        ("confluent-kafka produce() per message", bench_confluent),
        ("aiokafka send() per message", bench_aiokafka),
        ("kafka-python send() per message", bench_kafka_python),
    ]
    rows = []
    with EmbeddedBroker() as broker, Admin(broker.bootstrap) as admin:
        for label, fn in clients:
            try:
                times = fn(broker.bootstrap, admin)
                rows.append((label, N / statistics.median(times), times))
            except Exception as exc:  # one client failing should not hide the others
                rows.append((label, float("nan"), [repr(exc)[:80]]))
            print(f"{label}: done", file=sys.stderr)
    ray.shutdown()
    base = next((rate for label, rate, _ in rows if label.startswith("confluent")), float("nan"))
    print(f"\n{N:,} messages of {len(VALUE)} bytes, {PARTITIONS} partitions, acks=1, one tansu, "
          f"median of {RUNS} runs\n")
    print("| client | msg/s | vs confluent-kafka | runs (s) |")
    print("| --- | ---: | ---: | --- |")
    for label, rate, times in rows:
        runs = ", ".join(f"{t:.2f}" if isinstance(t, float) else t for t in times)
        print(f"| {label} | {rate:,.0f} | {rate / base:.2f}x | {runs} |")


if __name__ == "__main__":
    main()
