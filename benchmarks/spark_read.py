"""Kafka into a counted Spark DataFrame, for SCALING.md ("Reads into Spark"):

    python -m raykafka.benchmarks.spark_read [--rows 1000000] [--runs 3] [--out SCALING.spark-read.json]

Writes `--rows` rows of 100 B to a topic of 6 partitions on an embedded tansu with `send_batch`,
then times each way of counting them, in turn, `--runs` times (see `run`). Prints one JSON line
per run and a summary (median, min-max) per figure, through `scaling`'s helpers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

from raykafka.app.bench.missed_targets import READ_KAFKA_PARTS
from raykafka.benchmarks.scaling import VALUE, summary, topic, write_figures

# the ways of counting, in the order each run takes them: the floor first
WAYS = ("read_dataset alone", "read_kafka", "Ray Data to_spark (pandas UDF)")


def run(args: argparse.Namespace, config: dict[str, Any], admin: Any) -> None:
    """Kafka into a counted Spark DataFrame, three ways on one topic, each run in turn, in one
    process: `read_dataset` alone (the floor: Ray Data's read, no Spark); `read_kafka` (the read
    tasks' Arrow streams, decoded by Spark's executors); and the same Dataset through Ray Data's
    `to_spark` (RayDP's pandas UDF, the way `read_kafka` went before). `read_kafka` is also
    timed in its two parts (`READ_KAFKA_PARTS`). The first run of each carries its cold start
    (Spark's Python workers for the pandas way)."""
    import pyarrow as pa

    from raykafka.driver.producer import Producer
    from raykafka.spark_bridge.quiet_executions import quietly
    from raykafka.spark_bridge.reader import read_dataset, read_kafka
    from raykafka.spark_bridge.session import init_spark, stop_spark

    name = topic(admin)
    with Producer(config) as producer:
        values = pa.array([os.urandom(50) + VALUE[:50] for _ in range(args.rows)], pa.binary())
        sent = producer.send_batch(name, pa.table({"value": values})).result()
    assert sent.delivered == args.rows, sent
    spark = init_spark("raykafka-spark-read")
    found: dict[str, list[float]] = {way: [] for way in (*WAYS, *READ_KAFKA_PARTS)}

    def read_kafka_in_parts() -> int:
        """`read_kafka`'s count, its two parts timed: the DataFrame made, then counted."""
        start = time.perf_counter()
        df = read_kafka(spark, name, config=config)
        made = time.perf_counter()
        rows = df.count()
        found[READ_KAFKA_PARTS[0]].append(made - start)
        found[READ_KAFKA_PARTS[1]].append(time.perf_counter() - made)
        for part in READ_KAFKA_PARTS:
            print(json.dumps({"part": part, "s": round(found[part][-1], 3)}), flush=True)
        return rows

    ways = dict(zip(WAYS, (lambda: read_dataset(name, config).materialize().count(), read_kafka_in_parts,
                           lambda: quietly(read_dataset(name, config)).to_spark(spark).count()), strict=True))
    try:
        for run_index in range(args.runs):
            for way, read in ways.items():
                start = time.perf_counter()
                assert read() == args.rows
                found[way].append(time.perf_counter() - start)
                print(json.dumps({"run": run_index, "way": way, "s": round(found[way][-1], 3)}), flush=True)
    finally:
        stop_spark()
    alone = statistics.median(found[WAYS[0]])
    for way, runs in found.items():
        print(summary(f"spark read: {way}", runs, " s"))
        if way in WAYS[1:]:
            print(summary(f"spark read: {way}, over read_dataset's median", [r - alone for r in runs], " s"))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", help="also write the run's summaries here, as JSON (SCALING.spark-read.json)")
    args = parser.parse_args()

    import ray

    from raykafka.driver.admin import Admin
    from raykafka.driver.embedded_broker import EmbeddedBroker
    from raykafka.spark_bridge.session import init_ray

    with EmbeddedBroker() as broker:
        config = {"bootstrap.servers": broker.bootstrap}
        init_ray(num_cpus=2)  # with the JVM options Spark needs
        try:
            with Admin(config) as admin:
                run(args, config, admin)
        finally:
            ray.shutdown()
    if args.out:
        write_figures(args.out, [a for a in sys.argv[1:] if not a.startswith("--out") and a != args.out], "spark_read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
