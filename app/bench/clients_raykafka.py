"""raykafka's own rows: `send` per message (keyed and not), `send_batch` of an Arrow table, N
pipelines in parallel; the `Consumer` (warm and new) and a `ConsumerGroup`; paced send→ack
latency, and one message at a time."""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

from .rows import Settings
from .workload import KEYS, PARTITIONS, new_topic, paced, percentiles, raykafka_config, value_of


def produce_raykafka_send(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    from raykafka.driver.producer import Producer

    value, n, times = value_of(size), s.messages, []
    with Producer(raykafka_config(bootstrap, codec)) as producer:
        for _ in range(s.runs):
            t = new_topic(admin, "rk-send")
            warm(producer, t)
            start = time.perf_counter()
            send = producer.send
            futures = [send(t, value) for _ in range(n)]
            assert producer.flush(300) == 0
            times.append(time.perf_counter() - start)
            assert all(f.exception() is None for f in futures[:: max(1, n // 100)])
    return times


def produce_raykafka_send_keyed(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    from raykafka.driver.producer import Producer

    value, n, times = value_of(size), s.messages, []
    with Producer(raykafka_config(bootstrap, codec, **{"linger.ms": 5})) as producer:
        for _ in range(s.runs):
            t = new_topic(admin, "rk-send-keyed")
            warm(producer, t)
            start = time.perf_counter()
            send = producer.send
            futures = [send(t, value, key=KEYS[i % 100]) for i in range(n)]
            assert producer.flush(300) == 0
            times.append(time.perf_counter() - start)
            assert all(f.exception() is None for f in futures[:: max(1, n // 100)])
    return times


def warm(producer: Any, t: str) -> None:
    """One message to every partition, so the dispatcher actors start outside the timing."""
    assert producer.send_batch(t, [b"warm"] * PARTITIONS, partitions=list(range(PARTITIONS))).result(60).ok


def arrow_values(value: bytes, n: int) -> Any:
    import pyarrow as pa

    return pa.table({"value": pa.array([value] * n, pa.binary())})


def produce_raykafka_batch(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    from raykafka.driver.producer import Producer

    table, n, times = arrow_values(value_of(size), s.messages), s.messages, []
    with Producer(raykafka_config(bootstrap, codec)) as producer:
        for _ in range(s.runs):
            t = new_topic(admin, "rk-batch")
            warm(producer, t)
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
        warm(self.producer, topic)

    def write(self, topic: str, n: int, size: int) -> int:
        return self.producer.send_batch(topic, arrow_values(value_of(size), n)).result(300).delivered

    def close(self) -> None:
        self.producer.close()


def produce_raykafka_pipelines(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    import ray

    cls = ray.remote(num_cpus=0)(_Pipeline)
    pipes = [cls.remote(raykafka_config(bootstrap, codec)) for _ in range(s.pipelines)]
    times = []
    try:
        for _ in range(s.runs):
            t = new_topic(admin, "rk-pipes")
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


ONE_AT_A_TIME_PER_SECOND = 100  # the one-at-a-time rows send this many messages per second of latency_seconds


def latency_raykafka(bootstrap: str, admin: Any, s: Settings, rate: int, keyed: bool = False,
                     nagle_wait: float | None = None) -> tuple[float, float]:
    """`nagle_wait`: the sender's NAGLE_WAIT for this run (None: as shipped)."""
    from raykafka.driver import producer_sender as sender_module

    shipped = sender_module.NAGLE_WAIT
    if nagle_wait is not None:
        sender_module.NAGLE_WAIT = nagle_wait
    try:
        return _latency_raykafka(bootstrap, admin, s, rate, keyed)
    finally:
        sender_module.NAGLE_WAIT = shipped


def _latency_raykafka(bootstrap: str, admin: Any, s: Settings, rate: int, keyed: bool) -> tuple[float, float]:
    from raykafka.driver.producer import Producer

    t, lat, keys, sent = new_topic(admin, "lat-rk"), [], KEYS if keyed else [None], itertools.count()
    with Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0}) as producer:
        warm(producer, t)
        value = value_of(100)

        def send(t0: float) -> None:
            producer.send(t, value, key=keys[next(sent) % len(keys)]).add_done_callback(
                lambda f, t0=t0: lat.append(time.perf_counter() - t0))

        paced(int(rate * s.latency_seconds), rate, send, lambda d: time.sleep(min(d, 0.0005)))
        assert producer.flush(60) == 0
    return percentiles(lat)


def latency_one_at_a_time(bootstrap: str, admin: Any, s: Settings) -> tuple[float, float]:
    from raykafka.app.bench import budget

    count = max(1, int(s.latency_seconds * ONE_AT_A_TIME_PER_SECOND))
    return percentiles(budget.one_at_a_time_latencies(bootstrap, new_topic(admin, "lat-one"), count, warm))


def latency_chain(bootstrap: str, admin: Any, s: Settings) -> tuple[float, float]:
    from raykafka.app.bench import budget

    return percentiles(budget.chain_latencies(max(1, int(s.latency_seconds * ONE_AT_A_TIME_PER_SECOND))))
