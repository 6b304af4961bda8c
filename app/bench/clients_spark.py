"""The Spark rows (with --spark): a cached DataFrame into Kafka through Ray Data's `write_kafka`
after `ray.data.from_spark` and through raykafka's `write_kafka`, and a range back into a
DataFrame through Ray Data's `read_kafka` then `to_spark` and through raykafka's `read_kafka`."""

from __future__ import annotations

import time
from typing import Any

from .clients_ray_data import cached_writes
from .rows import Settings
from .workload import PARTITIONS, new_topic, raykafka_config, value_of

SPARK: list[Any] = []  # the run's one Spark session: RayDP starts one per process


def spark_session() -> Any:
    if not SPARK:
        from raykafka.spark_bridge.session import init_spark

        SPARK.append(init_spark("raykafka-bench"))
    return SPARK[0]


def _spark_frame(s: Settings, size: int) -> Any:
    """A cached Spark DataFrame of `s.messages` string values."""
    spark = spark_session()
    value = value_of(size).decode()
    df = spark.range(s.messages).selectExpr(f"'{value}' AS value").cache()
    df.count()
    return df


def produce_ray_data_spark(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    """Ray Data's write_kafka of the same Spark DataFrame: `ray.data.from_spark`, then its writer."""
    import ray

    df, times = _spark_frame(s, size), []
    t = new_topic(admin, "ray-data-spark")
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
        return cached_writes(write_kafka, df, df.limit(PARTITIONS * 10), new_topic(admin, "rk-spark"),
                              raykafka_config(bootstrap, codec), s)
    finally:
        df.unpersist()


def consume_ray_data_spark(bootstrap: str, t: str, s: Settings) -> list[float]:
    """Ray Data's read_kafka of the same range into a Spark DataFrame (`Dataset.to_spark`)."""
    import ray

    spark, times = spark_session(), []
    for _ in range(s.runs):
        start = time.perf_counter()
        n = ray.data.read_kafka(t, bootstrap_servers=bootstrap).to_spark(spark).count()
        times.append(time.perf_counter() - start)
        assert n == s.messages, n
    return times


def consume_raykafka_spark(bootstrap: str, t: str, s: Settings) -> list[float]:
    from raykafka.spark_bridge.reader import read_kafka

    spark, times = spark_session(), []
    for _ in range(s.runs):
        start = time.perf_counter()
        n = read_kafka(spark, t, config={"bootstrap.servers": bootstrap}).count()
        times.append(time.perf_counter() - start)
        assert n == s.messages, n
    return times
