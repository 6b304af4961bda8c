"""`raykafka demo --exactly-once`: Kafka → Spark transform → Kafka, exactly once, with the
writer killed mid-run.

It starts tansu, local Ray and Spark through RayDP; writes `rows` input events to the topic
`eos-in`; reads them back into Spark (`read_kafka`), transforms each (`value` becomes
`seen:<value>`), and writes the result to `eos-out` with `write_kafka(..., exactly_once=True)`,
each block in a transaction of its own. While that write runs, `kill_mid_block` kills the
writer (`ray.kill`, restarted by Ray) once a block's transaction is open with rows in the log: Ray restarts
it, its `init_transactions` aborts what the killed attempt left open, and the block is written
again. Then the output is read back read_committed through raykafka's own read (`read_topic`;
tansu serves aborted records to every reader, so the reader decides by the transaction
markers): every input must be there exactly once. The counts are printed; `run_exactly_once_demo` raises `AssertionError` (the command
exits non-zero) if a row is missing or doubled.

Called by app/cli_demo.py; calls spark_bridge (read_kafka, write_kafka, read_dataset, the
writer pool).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

IN_TOPIC, OUT_TOPIC = "eos-in", "eos-out"


@dataclass
class ExactlyOnceReport:
    rows: int
    write_seconds: float
    killed: bool  # the writer was killed while a block's transaction was open
    committed: int  # rows a read_committed read finds in the output
    duplicates: int
    missing: int
    in_log: int  # rows a read_uncommitted read finds (committed, and the aborted attempt's)


def run_exactly_once_demo(rows: int = 200_000, partitions: int = 4, out: Any = sys.stdout) -> ExactlyOnceReport:
    import ray

    from ..driver.admin import Admin
    from ..driver.embedded_broker import EmbeddedBroker
    from ..spark_bridge import read_kafka, write_kafka
    from ..spark_bridge.node_writers import POOLS, PoolKind
    from ..spark_bridge.producer_cache import PRODUCERS
    from ..spark_bridge.session import init_ray, init_spark, stop_spark

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    with EmbeddedBroker() as broker:
        say(f"broker   tansu on {broker.bootstrap}")
        config = {"bootstrap.servers": broker.bootstrap}
        with Admin(config) as admin:
            admin.create_topics({IN_TOPIC: partitions, OUT_TOPIC: partitions})
        init_ray(num_cpus=2)
        spark = init_spark("raykafka-demo-exactly-once")
        try:
            events = spark.range(0, rows).selectExpr("cast(id % 1000 as string) as key",
                                                     "cast(id as string) as value")
            write_kafka(events, IN_TOPIC, config)
            say(f"input    {rows:,} events in {IN_TOPIC}")

            source = read_kafka(spark, IN_TOPIC, config=config)
            transformed = source.selectExpr("key", "concat('seen:', cast(value as string)) as value")

            pool = POOLS.acquire(config, PoolKind(1, True))  # the pool the write takes, to kill its writer
            POOLS.release(pool)
            progress = [0]
            killer = threading.Thread(target=kill_mid_block, args=(pool.handles()[0], progress), daemon=True)
            killer.start()
            started = time.monotonic()
            counts = write_kafka(transformed, OUT_TOPIC, config, exactly_once=True,
                                 on_progress=lambda n: progress.__setitem__(0, progress[0] + n))
            write_seconds = time.monotonic() - started
            progress[0] = -1  # the killer stops looking
            killer.join()
            killed = bool(getattr(killer, "killed", False))
            say(f"write    {counts['delivered']:,} rows committed to {OUT_TOPIC} in {write_seconds:.1f}s, a "
                f"transaction per block; writer killed mid-block: {'yes' if killed else 'no (the write ended first)'}")

            values, in_log = read_topic(OUT_TOPIC, config)
            seen = Counter(values)
            expected = {f"seen:{i}".encode() for i in range(rows)}
            duplicates = sum(n - 1 for n in seen.values() if n > 1)
            missing = len(expected - seen.keys())
            unknown = len(seen.keys() - expected)
            say(f"check    read_committed: {len(values):,} rows, {duplicates} duplicates, {missing} missing, "
                f"{unknown} unknown; read_uncommitted: {in_log:,} rows ({in_log - len(values):,} aborted)")
            report = ExactlyOnceReport(rows, write_seconds, killed, len(values), duplicates, missing, in_log)
            if duplicates or missing or unknown:
                raise AssertionError(f"not exactly once: {duplicates} duplicates, {missing} missing, {unknown} unknown")
            say("check    every input is in the output exactly once")
            return report
        finally:
            POOLS.close_all()
            PRODUCERS.close_all()
            stop_spark()
            ray.shutdown()


def kill_mid_block(writer: Any, progress: list[int]) -> None:
    """Kill `writer` (Ray restarts it) once a block has ended and the next one's transaction is
    open with some of its rows in the log; sets `killed` on the running thread. Stops looking
    when `progress[0]` is -1."""
    import ray

    me = threading.current_thread()
    while progress[0] >= 0:
        if progress[0] > 0 and ray.get(writer.acknowledged.remote()) > 0:
            ray.kill(writer, no_restart=False)
            me.killed = True  # type: ignore[attr-defined]
            return
        time.sleep(0.01)  # polling the writer's state: it has no event to await


def read_topic(topic: str, config: dict[str, Any]) -> tuple[list[bytes], int]:
    """Every value of `topic` a read_committed reader hands out, to each partition's last stable
    offset, through raykafka's own Ray Data read; and how many data records the log holds in all
    (the same read at read_uncommitted: tansu serves aborted records to it)."""
    from ..spark_bridge.reader import read_dataset

    committed = read_dataset(topic, {**config, "isolation.level": "read_committed"}).select_columns(["value"])
    values = [bytes(v) for v in committed.to_pandas()["value"]]
    in_log = read_dataset(topic, {**config, "isolation.level": "read_uncommitted"}).count()
    return values, in_log
