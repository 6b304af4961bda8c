"""The Ray Data rows: Ray Data's own `write_kafka` and `read_kafka` beside raykafka's Ray Data
path (`spark_bridge.write_dataset`, warm and cold, and `read_dataset`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .rows import Settings
from .workload import PARTITIONS, new_topic, raykafka_config, value_of


def _string_dataset(size: int, n: int) -> Any:
    """A Ray Dataset of `n` rows with one string column `value`, materialized (blocks in the store)."""
    import pyarrow as pa
    import ray

    value = value_of(size).decode()
    blocks = max(PARTITIONS, n // 50_000)
    per = -(-n // blocks)
    tables = [pa.table({"value": pa.array([value] * min(per, n - i), pa.string())}) for i in range(0, n, per)]
    return ray.data.from_arrow(tables).materialize()


def produce_ray_data(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    ds, times = _string_dataset(size, s.messages), []
    t = new_topic(admin, "ray-data")
    for _ in range(s.runs):
        start = time.perf_counter()
        ds.write_kafka(t, bootstrap, value_serializer="string",
                       producer_config={"acks": 1, "linger.ms": 5, "compression.type": codec})
        times.append(time.perf_counter() - start)
    return times


def cached_writes(write: Callable[..., dict[str, int]], data: Any, first: Any, topic: str, config: dict[str, Any],
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
    return cached_writes(write_dataset, ds, ds.limit(PARTITIONS * 10), new_topic(admin, "rk-dataset"),
                          raykafka_config(bootstrap, codec), s)


def produce_raykafka_dataset_cold(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    """As above with the cache emptied before every run: each write starts its own pipeline."""
    from raykafka.spark_bridge.producer_cache import PRODUCERS
    from raykafka.spark_bridge.writer import write_dataset

    ds, times = _string_dataset(size, s.messages), []
    t, config = new_topic(admin, "rk-dataset-cold"), raykafka_config(bootstrap, codec)
    for _ in range(s.runs):
        PRODUCERS.close_all()
        start = time.perf_counter()
        counts = write_dataset(ds, t, config)
        times.append(time.perf_counter() - start)
        assert counts["delivered"] == s.messages, counts
    PRODUCERS.close_all()
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
