"""The pull variant of benchmarks/in_process_writer.py, which `scaling demo-write` times
(`in_process_pull_s`): each writer fetches its Spark partitions from the executor itself, with
no fetch task, and writes them. Every row of the DataFrame arrives once, keys and headers with
it, and the writer is gone after."""

from __future__ import annotations

import pytest
import ray

from raykafka.driver.admin import Admin

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.spark]

ROWS = 3000


def test_writers_that_fetch_their_partitions_from_spark_write_every_row_once(spark, bootstrap, topic_name):
    from raykafka.benchmarks.in_process_writer import pull_in_process, start_writers
    from raykafka.spark_bridge import from_spark, read_kafka

    topic = topic_name("pull")
    config = {"bootstrap.servers": bootstrap}
    with Admin(config) as admin:
        admin.create_topics({topic: 3})
    df = spark.range(0, ROWS, numPartitions=3).selectExpr(
        "cast(id % 7 as string) as key", "cast(id as string) as value",
        "array(named_struct('key', 'n', 'value', cast(cast(id as string) as binary))) as headers")
    writers = start_writers(config)
    cached = from_spark.cache(df)
    try:
        result = pull_in_process(writers, from_spark.sources(cached), topic)
    finally:
        from_spark.release(df, cached)
    assert result.counts() == {"delivered": ROWS, "failed": 0}
    for writer in (w for ws in writers.values() for w in ws):  # stopped after the write
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(writer.where.remote(), timeout=30)
    back = read_kafka(spark, topic, config=config).selectExpr(
        "cast(key as string) k", "cast(value as string) v", "cast(headers[0].value as string) h").collect()
    assert sorted((r.k, r.v, r.h) for r in back) == sorted((str(i % 7), str(i), str(i)) for i in range(ROWS))
