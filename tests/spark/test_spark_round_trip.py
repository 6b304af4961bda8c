"""Spark → Kafka → Spark through the producer actors and the Kafka reader, on the real broker."""

import re
import subprocess
import sys

import pytest

from raykafka.driver.admin import Admin
from raykafka.spark_bridge import KafkaWriteError, read_kafka, write_kafka

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.spark]

ROWS = 100_000


def test_round_trip_of_100k_rows_keeps_keys_values_headers_and_partitions(spark, bootstrap, topic_name):
    topic = topic_name("spark-rt")
    config = {"bootstrap.servers": bootstrap}
    with Admin(config) as admin:
        admin.create_topics({topic: 4})
    df = spark.range(0, ROWS).selectExpr(
        "cast(id % 1000 as string) as key",
        "cast(id as string) as value",
        "cast(id % 4 as int) as partition",
        "array(named_struct('key', 'id', 'value', cast(cast(id as string) as binary))) as headers")
    assert write_kafka(df, topic, config) == {"delivered": ROWS, "failed": 0}

    out = read_kafka(spark, topic, config=config)
    assert out.count() == ROWS
    out.createOrReplaceTempView("rt")
    checks = spark.sql("""
        SELECT
          SUM(CASE WHEN CAST(CAST(value AS STRING) AS BIGINT) % 1000 = CAST(CAST(key AS STRING) AS BIGINT)
                   THEN 0 ELSE 1 END) AS wrong_keys,
          SUM(CASE WHEN CAST(CAST(value AS STRING) AS BIGINT) % 4 = partition THEN 0 ELSE 1 END) AS wrong_partitions,
          SUM(CASE WHEN CAST(headers[0].value AS STRING) = CAST(value AS STRING) AND headers[0].key = 'id'
                   THEN 0 ELSE 1 END) AS wrong_headers,
          COUNT(DISTINCT CAST(value AS STRING)) AS distinct_values
        FROM rt""").collect()[0]
    assert checks["wrong_keys"] == 0
    assert checks["wrong_partitions"] == 0
    assert checks["wrong_headers"] == 0
    assert checks["distinct_values"] == ROWS
    # Offsets are dense and, within a partition, follow the order each block's rows were written in
    # (blocks are written side by side, each by a pipeline on its node: no order across blocks,
    # as Spark's Kafka sink promises none across tasks). spark.range's blocks are id ranges.
    per_partition = spark.sql("""
        SELECT partition, MIN(offset) AS lo, MAX(offset) AS hi, COUNT(*) AS n FROM rt GROUP BY partition""").collect()
    assert sorted((r["partition"], r["lo"], r["hi"], r["n"]) for r in per_partition) == [
        (p, 0, ROWS // 4 - 1, ROWS // 4) for p in range(4)]
    ordered = spark.sql("""
        SELECT partition, offset, CAST(CAST(value AS STRING) AS BIGINT) AS v FROM rt
        WHERE partition = 1 ORDER BY offset""").collect()
    values = [r["v"] for r in ordered]
    blocks = df.rdd.getNumPartitions()
    bounds = [ROWS * b // blocks for b in range(blocks + 1)]
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        in_block = [v for v in values if lo <= v < hi]
        assert in_block == sorted(in_block) and len(in_block) == len({v for v in range(lo, hi) if v % 4 == 1})

    # A per-partition JSON range reads exactly that range.
    ranged = read_kafka(spark, topic, f'{{"{topic}": {{"0": 10, "1": -2, "2": 100, "3": -1}}}}',
                        f'{{"{topic}": {{"0": 20, "1": 5, "2": -1, "3": -1}}}}', config)
    got = sorted((r["partition"], r["offset"]) for r in ranged.select("partition", "offset").collect())
    expected = ([(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]
                + [(2, o) for o in range(100, ROWS // 4)])
    assert got == expected


def test_write_fails_loudly_naming_the_cause(spark, bootstrap, topic_name):
    config = {"bootstrap.servers": bootstrap}
    df = spark.range(0, 10).selectExpr("cast(id as string) as value")
    with pytest.raises(KafkaWriteError, match="10 of 10 rows.*does not exist"):
        write_kafka(df, topic_name("missing"), config)
    with pytest.raises(ValueError, match="'value' column"):
        write_kafka(spark.range(0, 3), "t", config)


def cached_rdds(spark) -> list[str]:
    """What Spark holds cached (persisted RDDs with blocks in memory or on disk)."""
    return [f"rdd {info.id()}: {info.memSize()} B in memory, {info.diskSize()} B on disk"
            for info in spark.sparkContext._jsc.sc().getRDDStorageInfo()]


def test_a_write_leaves_nothing_cached_in_spark_whether_it_succeeds_or_fails(spark, bootstrap, topic_name):
    """The Spark → Ray conversion caches the DataFrame's Arrow bytes in Spark, to fetch them again
    if a Ray node is lost mid-write; a write releases them when it ends, whatever its outcome, so
    that a notebook writing again and again does not fill Spark's memory and disk."""
    topic = topic_name("spark-cache")
    config = {"bootstrap.servers": bootstrap}
    with Admin(config) as admin:
        admin.create_topics({topic: 2})
    assert cached_rdds(spark) == []
    df = spark.range(0, 20_000).selectExpr("cast(id as string) as value")
    for _ in range(2):  # the same DataFrame twice: each write's cache is released
        assert write_kafka(df, topic, config) == {"delivered": 20_000, "failed": 0}
        assert cached_rdds(spark) == []
    with pytest.raises(KafkaWriteError):
        write_kafka(df, topic_name("missing"), config)
    assert cached_rdds(spark) == []


def test_a_release_that_fails_does_not_hide_the_writes_own_outcome(spark, bootstrap, topic_name, monkeypatch,
                                                                     caplog):
    """A Spark gone under the write fails the release too; the write's own error is what the
    caller gets, and the failed release is logged."""
    from raykafka.spark_bridge import from_spark

    release, left = from_spark.release, []

    def gone(df, cached) -> None:
        left.append((df, cached))
        raise RuntimeError("py4j: the JVM is gone")

    monkeypatch.setattr(from_spark, "release", gone)
    df = spark.range(0, 10).selectExpr("cast(id as string) as value")
    with pytest.raises(KafkaWriteError, match="10 of 10 rows.*does not exist"):
        write_kafka(df, topic_name("missing"), {"bootstrap.servers": bootstrap})
    assert "releasing the DataFrame's cached Arrow bytes in Spark failed: py4j: the JVM is gone" in caplog.text
    assert len(left) == 1 and cached_rdds(spark) != []  # the failed release left the bytes cached
    release(*left[0])  # for the tests after this one
    assert cached_rdds(spark) == []


# what the demo printed before its calls were mended: Ray's `parallelism` deprecation (from
# `ray.data.from_spark`), Ray Data without tqdm, log4j without a configuration, RayDP's reading of
# `ray.worker.global_worker`, pyspark's `sql_ctx` deprecation (also RayDP's), Spark's start-up notes
NOT_SHOWN = ("parallelism", "override_num_blocks", "tqdm is not installed", "No configuration found",
             "ray.worker.global_worker", "DeprecationWarning", "sql_ctx", "Setting default log level",
             "NativeCodeLoader")


def phase_table(lines: list[str]) -> dict[str, tuple[float, list[tuple[str, float]]]]:
    """The demo's "where the time went" lines: side -> (its total, [(phase, seconds)])."""
    table: dict[str, tuple[float, list[tuple[str, float]]]] = {}
    rows: list[tuple[str, float]] = []
    for line in lines:
        side = re.fullmatch(r"time     the (\w+)'s (\d+\.\d\d)s, phase by phase", line)
        if side:
            rows = []
            table[side[1]] = (float(side[2]), rows)
        elif table and (phase := re.match(r" {11}(\S.*?) +(\d+\.\d\d)s +\d+%  ", line)):
            rows.append((phase[1], float(phase[2])))
    return table


def check_phases(lines: list[str], said: str) -> None:
    """Every phase boundary was seen (no phase joined to the next), and each side's phases add
    up to its total, which is the time its own line in `said` gives."""
    phases = phase_table(lines)
    assert [name for name, _ in phases["write"][1]] == ["Spark's job", "hand-over", "pipeline start", "first message",
                                                        "Kafka write", "release"], lines
    assert [name for name, _ in phases["read"][1]] == ["group forming", "reading", "group close"], lines
    for side, (total, rows) in phases.items():
        seconds = [s for _, s in rows]
        rounding = 0.005 * len(seconds)  # each figure is rounded to 0.01 s
        assert min(seconds) >= 0 and sum(seconds) <= total + rounding, (side, lines)
        assert sum(seconds) >= total - rounding, (side, lines)  # and nothing left out
        line = re.search(rf"^{side} .* in (\d+\.\d)s \(", said, re.M)
        assert abs(float(line[1]) - total) <= 0.051, (side, said)  # the line rounds to 0.1 s


def test_the_demos_job_on_the_runs_spark_writes_reads_back_and_checks_every_count(spark, bootstrap, topic_name,
                                                                                   tmp_path, wait_for, live_actors_of):
    """The demo's job (`demo_job`, what `raykafka demo` runs on the broker, Ray and Spark it
    starts) on the run's ones, at 20,000 rows: written through the producer actors, read back by
    a group of 2 Ray actors, aggregated in Spark, every count checked; its lines, its phases and
    its plot as the command shows them. The command itself, in a process of its own, is the slow
    test below."""
    import io

    from raykafka.app.demo import demo_job, expected_aggregates, plot_rates

    out = io.StringIO()
    report = demo_job(spark, {"bootstrap.servers": bootstrap}, 20_000, topic=topic_name("demo"),
                      group_id=topic_name("demo-g"), out=out, progress_stream=io.StringIO())
    said = out.getvalue()
    assert (report.delivered, report.consumed) == (20_000, 20_000)
    assert {kind: (n, amount) for kind, n, amount in report.aggregates} == expected_aggregates(20_000)
    assert "write    20,000 delivered, 0 failed" in said and "read     20,000 rows" in said, said
    assert said.rstrip().endswith("check    every count matches what was generated"), said
    check_phases(report.phases.lines(), said)
    assert plot_rates(report.timeline, report.phases, tmp_path / "rates.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    wait_for(lambda: not live_actors_of(("BatchCollector",)), timeout=30)  # and left no collector behind


def test_the_demos_job_with_a_group_id_of_the_wrong_type_names_it_and_leaves_no_collector(
        spark, bootstrap, topic_name, wait_for, live_actors_of):
    """A bad value met after the write, once the collector runs (the group's config): the job
    raises the ValueError naming the key, and its collector goes with it."""
    import io

    from raykafka.app.demo import demo_job

    with pytest.raises(ValueError, match="group.id: expected a string"):
        demo_job(spark, {"bootstrap.servers": bootstrap}, 200, topic=topic_name("demo"), group_id=12345,
                 out=io.StringIO(), progress_stream=io.StringIO())
    wait_for(lambda: not live_actors_of(("BatchCollector",)), timeout=30)


@pytest.mark.slow  # about 2 minutes beside the run's Ray; the default tier keeps the job above, on the run's Spark
def test_demo_runs_end_to_end_cleanly_and_checks_its_counts(tmp_path):
    """`raykafka demo` (a smaller run, with `--plot`): its own broker, Ray and Spark; exit 0 and
    correct counts; its own lines, a summary and where each side's time went on stdout, nothing on
    stderr, Ray's and Spark's output in the log it names, and none of the warnings above anywhere,
    not even in that log. Every phase boundary was seen (no phase joined to the next), and each
    side's phases add up to its total, which is the time its own line gives."""
    result = subprocess.run([sys.executable, "-m", "raykafka.app.cli", "demo", "--rows", "20000", "--plot", "rates.png"],
                            capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "write    20,000 delivered, 0 failed" in result.stdout
    assert "read     20,000 rows" in result.stdout
    assert "every count matches" in result.stdout
    lines = result.stdout.splitlines()
    assert all(line.split(" ", 1)[0] in ("broker", "spark", "write", "read", "check", "summary", "time", "")
               for line in lines), result.stdout
    summary = next(line for line in lines if line.startswith("summary  "))
    assert summary.startswith("summary  20,000 events written at ")
    assert result.stderr == ""

    check_phases(lines[lines.index(summary) + 1:], result.stdout)
    assert (tmp_path / "rates.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    log = summary.rsplit("Ray and Spark logged to ", 1)[1]
    logged = open(log, encoding="utf-8", errors="replace").read()
    for text in NOT_SHOWN:
        assert text not in result.stdout and text not in logged, text
