"""The benchmark suite's smallest configuration, end to end: its own tansu, two clients each way,
the report's rows and figures. Not a timed test: it checks the suite works, not how fast."""

from __future__ import annotations

import math

import pytest

from raykafka.app.bench.report import render_markdown, target_results
from raykafka.app.bench.rows import Settings
from raykafka.app.bench.suite import run_suite

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(240)]

CLIENTS = ("raykafka send_batch", "confluent-kafka produce", "raykafka Consumer", "confluent-kafka consume")


@pytest.fixture(scope="module")
def report(ray_stopper):
    import ray

    ray_stopper()  # the suite starts Ray itself and shuts it down
    settings = Settings(messages=600, runs=1, sizes=(100,), codecs=("none",), latency_rates=(500,),
                        latency_seconds=0.4, clients=CLIENTS, record_batches=False, quick_mode=True)
    result = run_suite(settings, command="raykafka bench (smoke)")
    assert not ray.is_initialized()
    return result


def test_report_has_one_row_per_client_with_positive_rates(report):
    produce = {r.client: r for r in report.rows if r.kind == "produce"}
    consume = {r.client: r for r in report.rows if r.kind == "consume"}
    assert set(produce) == {"raykafka send_batch() Arrow", "confluent-kafka produce()",
                            "confluent-kafka produce(), keyed"}
    assert set(consume) == {"raykafka Consumer → Arrow", "raykafka Consumer → Arrow, new Consumer",
                            "confluent-kafka consume()"}
    for row in [*produce.values(), *consume.values()]:
        assert not row.note.startswith("failed"), row.note
        assert row.size == 100 and row.codec == "none"
        assert len(row.runs) == 1 and row.runs[0] > 0
        assert math.isfinite(row.rate) and row.rate > 0
        assert row.rate == pytest.approx(600 / row.runs[0])


def test_latency_rows_have_ordered_percentiles(report):
    rows = {r.client: r for r in report.rows if r.kind == "latency"}
    assert set(rows) == {"confluent-kafka produce() linger.ms=0, 500 msg/s",
                         "confluent-kafka produce() linger.ms=0, 500 msg/s, keyed"}
    for row in rows.values():
        p50, p99 = row.rate, row.runs[0]
        assert 0 < p50 <= p99 < 5000
        assert row.spread == {"p50": [p50], "p99": [p99]}


def test_a_cell_gives_the_median_and_the_slowest_and_fastest_run():
    from raykafka.app.bench.report import _cell
    from raykafka.app.bench.rows import Row

    row = Row("produce", "x", 100, "none", 1_000_000 / 2.0, [2.0, 1.0, 4.0])
    assert _cell(row, 1_000_000) == "500,000 (250k–1.00M)"
    assert _cell(Row("produce", "x", 100, "none", 10.0, [1.0]), 10) == "10"
    assert _cell(Row("produce", "x", 100, "none", float("nan"), note="failed: E: x"), 10) == "— (failed: E: x)"


def test_a_run_of_latency_rows_only_renders_without_a_chart(tmp_path):
    """`raykafka bench --clients` may keep no throughput row: nothing to draw, and the report is
    still written (the chart once raised on an empty figure, after the whole run)."""
    pytest.importorskip("matplotlib")
    from raykafka.app.bench.report import render_chart
    from raykafka.app.bench.rows import Report, Row

    report = Report(settings=Settings(messages=1000, sizes=(100,), codecs=("none",)))
    report.rows = [Row("latency", "raykafka send() linger.ms=0", 100, "none", 7.5, [12.0]),
                   Row("latency", "confluent-kafka produce() linger.ms=0", 100, "none", 0.14, [3.2])]
    assert render_chart(report, str(tmp_path / "chart.png")) is None
    assert not (tmp_path / "chart.png").exists()
    assert "| raykafka send() linger.ms=0 | 7.50" in render_markdown(report, None)


def test_markdown_names_machine_command_rows_and_ratios(report):
    text = render_markdown(report, None, "skipped: matplotlib is not installed")
    assert "Command: `raykafka bench (smoke)`" in text
    assert f"Machine: {report.machine['nproc']} CPUs" in text
    assert "| raykafka send_batch() Arrow |" in text
    assert "| confluent-kafka consume() |" in text
    assert "Chart: skipped: matplotlib is not installed" in text
    assert "### Produce: raykafka's ratio to each peer" in text
    (target,) = [t for t in target_results(report) if t[0].startswith("batch produce 100 B ≥ 1.5×")]
    assert target[1] is not None and target[1] > 0


def test_a_saved_run_renders_again_the_same(report, tmp_path):
    """BENCHMARKS.json holds everything BENCHMARKS.md is made from."""
    import dataclasses
    import json

    from raykafka.app.bench.report import load_report

    path = tmp_path / "BENCHMARKS.json"
    path.write_text(json.dumps(dataclasses.asdict(report), default=str))
    assert render_markdown(load_report(str(path)), None) == render_markdown(report, None)


def test_each_profile_names_a_target_and_only_missed_ones_are_printed():
    from raykafka.app.bench import cli_rows, missed_targets
    from raykafka.app.bench.report import (
        CPU_TARGET,
        MEMORY_TARGET,
        P50_TARGET,
        P99_TARGET,
        SPARK_SIDE_TARGET,
        TARGETS,
    )

    latency = {P99_TARGET.format(rate="1,000 msg/s"), P50_TARGET.format(rate="2,000 msg/s, keyed")}
    named = [t[0] for t in TARGETS] + [*latency, MEMORY_TARGET, CPU_TARGET, SPARK_SIDE_TARGET] + [
        f"{label} ≤ 2 s" for label in cli_rows.RAYKAFKA_ROWS]
    assert all(any(text.startswith(key) for text in named) for key in missed_targets.PROFILES)
    assert missed_targets.section([]) == ""
    text = missed_targets.section([*latency, MEMORY_TARGET])
    assert text.startswith(missed_targets.HEADING)
    assert text.count("**Send → acknowledgement latency") == 1  # one profile for both latency targets
    assert "**Producer memory: summed PSS" in text and "**Batch produce" not in text


def test_the_latency_profile_quotes_the_hops_run_it_is_given_and_only_names_the_command_without_one(tmp_path):

    from raykafka.app.bench import missed_targets

    labels = [missed_targets.PLAIN, missed_targets.COMPILED, "raykafka send()->ack, idle, linger.ms=0"]
    figures = {f"{label}: {p}": {"median": 1.5 + i, "min": 1.25 + i, "max": 2.0 + i, "n": 3}
               for i, label in enumerate(labels) for p in ("p50", "p99")}
    figures.update({missed_targets.PLAIN_IDLE: {"median": 0.03, "min": 0.02, "max": 0.05, "n": 3},
                    missed_targets.COMPILED_IDLE: 1.75})
    path = _figures_file(tmp_path / "hops.json", "python -m raykafka.benchmarks.scaling hops --runs 3", figures)
    text = missed_targets.latency(path)
    assert "`python -m raykafka.benchmarks.scaling hops --runs 3` (2026-01-02;" in text
    assert "plain Ray calls take 1.50 ms (1.25–2.00)\nat p50" in text
    assert "graph take 2.50 ms (2.25–3.00)" in text and "is 3.50 ms (3.25–4.00) at p50" in text
    assert "keep 1.75 cores (1.50–2.25) busy" in text and "plain actors keep\n0.03 cores (0.02–0.05)" in text
    missing = missed_targets.latency(tmp_path / "none.json")
    assert "Ray calls take" not in missing and "scaling hops --out SCALING.hops.json" in missing
    without_idle = {label: f for label, f in figures.items() if "idle" not in label}  # a file of the older command
    older = _figures_file(tmp_path / "older.json", "python -m raykafka.benchmarks.scaling hops --runs 3", without_idle)
    assert "Ray calls take" not in missed_targets.latency(older)


def test_a_target_is_met_only_when_our_slowest_run_meets_it():
    import statistics

    from raykafka.app.bench.rows import Report, Row, Settings

    def verdict(ours: list[float], peer: list[float]) -> tuple[str | None, tuple[float, float] | None]:
        report = Report(settings=Settings(messages=1000))
        report.rows = [Row("produce", "raykafka send() per message", 100, "none", 1000 / statistics.median(ours), ours),
                       Row("produce", "aiokafka send()", 100, "none", 1000 / statistics.median(peer), peer)]
        (target,) = [t for t in target_results(report) if t[0] == "per-message send ≥ 1.0× aiokafka"]
        return target[3], target[4]

    assert verdict([1.0, 0.9, 0.95], [1.2, 1.2, 1.2])[0] == "yes"  # our slowest run: 1.2×
    met, (low, high) = verdict([0.8, 1.5, 1.0], [1.2, 1.2, 1.2])  # median 1.2×, slowest 0.8×
    assert met == "straddles" and low == pytest.approx(0.8) and high == pytest.approx(1.5)
    assert verdict([1.5, 1.4, 1.6], [1.2, 1.2, 1.2])[0] == "no"  # even the fastest: 0.86×


def test_a_budget_bound_is_met_only_when_our_worst_run_is_within_it():
    from raykafka.app.bench import budget
    from raykafka.app.bench.report import (
        ASSIGN_TARGET,
        CPU_TARGET,
        MEMORY_TARGET,
        NEW_TOPICS_TARGET,
        P50_TARGET,
        P99_TARGET,
        bound_results,
    )
    from raykafka.app.bench.rows import Report, Row
    from raykafka.app.bench.suite import latency_label

    def lat(label: str, p50s: list[float], p99s: list[float]) -> Row:
        return Row("latency", label, 100, "none", sorted(p50s)[len(p50s) // 2], [sorted(p99s)[len(p99s) // 2]],
                   spread={"p50": p50s, "p99": p99s})

    report = Report(settings=Settings(messages=1000, latency_rates=(1000,)))
    report.rows = [Row("startup", budget.ASSIGN_ROW, 100, "none", 1.9, [1.5, 1.9, 2.5]),
                   Row("startup", budget.NEW_TOPICS_ROW, 100, "none", 3.0, [3.0], spread={"processes": [5, 5]}),
                   Row("memory", budget.MEMORY_ROW, 100, "none", 300.0),
                   Row("cpu", budget.CPU_ROW, 100, "none", 0.7, [0.6, 0.7, 0.8]),
                   lat(budget.CHAIN_ROW, [4.0], [8.0]), lat(budget.ONE_AT_A_TIME_ROW, [7.0], [9.0]),
                   lat(latency_label("confluent-kafka produce()", 1000), [0.1], [3.0]),
                   lat(latency_label("raykafka send()", 1000), [9.0, 10.0], [10.0, 12.0])]
    got = {text.split(" (")[0]: met for text, _, met in bound_results(report)}
    assert got[ASSIGN_TARGET] == "straddles"  # 2.5 s in the worst run
    assert got[NEW_TOPICS_TARGET] == "yes" and got[MEMORY_TARGET] == "yes" and got[CPU_TARGET] == "no"
    assert got[P99_TARGET.format(rate="1,000 msg/s")] == "straddles"  # bound 8 + 3 = 11 ms: 10 in, 12 out
    assert got[P50_TARGET.format(rate="1,000 msg/s")] == "yes"  # bound 1.5 × 7 = 10.5 ms
    assert got[P99_TARGET.format(rate="1,000 msg/s, keyed")] is None  # no keyed rows: not measured


def test_command_line_rows_render_and_are_bound_by_two_seconds():
    from raykafka.app.bench import cli_rows
    from raykafka.app.bench.report import bound_results
    from raykafka.app.bench.rows import Report, Row

    report = Report(settings=Settings(messages=1000, runs=2))
    report.rows = [Row("cli", cli_rows.PRODUCE_ROW, 100, "none", 15.0, [14.0, 16.0]),
                   Row("cli", cli_rows.PEER_PRODUCE_ROW, 100, "none", 0.1, [0.1, 0.1]),
                   Row("cli", cli_rows.CONSUME_ROW, 100, "none", 1.2, [1.1, 1.3])]
    text = render_markdown(report, None)
    assert "## Command line" in text and f"| {cli_rows.PRODUCE_ROW} | 15.00 (14.00–16.00) |" in text
    got = {t: met for t, _, met in bound_results(report)}
    assert got[f"{cli_rows.PRODUCE_ROW} ≤ 2 s"] == "no" and got[f"{cli_rows.CONSUME_ROW} ≤ 2 s"] == "yes"
    assert not any(t.startswith(cli_rows.NO_TOPIC_ROW) for t in got)  # not measured: no line


def test_the_spark_read_is_bound_by_what_it_adds_to_read_dataset_alone():
    from raykafka.app.bench.report import DATASET_READ_ROW, SPARK_READ_ROW, SPARK_SIDE_TARGET, bound_results
    from raykafka.app.bench.rows import Report, Row

    def got(spark_runs: list[float]) -> tuple[str, str | None]:
        report = Report(settings=Settings(messages=1000, runs=3))
        report.rows = [Row("consume", DATASET_READ_ROW, 100, "none", 1000 / 0.5, [0.4, 0.5, 0.9]),
                       Row("consume", SPARK_READ_ROW, 100, "none", 1000 / sorted(spark_runs)[1], spark_runs)]
        (bound,) = [(measured, met) for text, measured, met in bound_results(report) if text == SPARK_SIDE_TARGET]
        return bound

    assert got([1.2, 1.4, 1.5]) == ("0.90 s (0.70–1.00)", "yes")  # each run against read_dataset's median, 0.5 s
    assert got([1.2, 1.4, 1.6])[1] == "straddles"
    assert got([1.6, 1.7, 2.0])[1] == "no"
    report = Report(settings=Settings(messages=1000))
    report.rows = [Row("consume", DATASET_READ_ROW, 100, "none", 2000.0, [0.5])]
    assert not any(text == SPARK_SIDE_TARGET for text, *_ in bound_results(report))  # without --spark: no line


def test_the_memory_and_new_consumer_profiles_quote_the_run_they_are_given():
    from raykafka.app.bench import budget, missed_targets
    from raykafka.app.bench.rows import Report, Row

    report = Report(settings=Settings(messages=1000))
    report.rows = [Row("memory", budget.MEMORY_ROW, 100, "none", 450.0,
                       spread={"processes": [5], "bare actor PSS": [80.0]}),
                   Row("startup", budget.ASSIGN_ROW, 100, "none", 1.0, [0.9, 1.0, 1.25]),
                   Row("consume", "raykafka Consumer → Arrow, new Consumer", 100, "none", 500.0, [2.0, 1.5, 2.5]),
                   Row("consume", "raykafka Consumer → Arrow", 100, "none", 2000.0, [0.5]),
                   Row("consume", "confluent-kafka consume()", 100, "none", 250.0, [4.0])]
    memory = missed_targets.memory(report)
    assert "holds 80 MiB of PSS" in memory and "5 of them,\n400 MiB, are over the bound" in memory
    assert missed_targets.memory(None) == missed_targets.MEMORY_UNKNOWN
    cold = missed_targets.new_consumer(report)
    assert "our runs took 2.00 s (1.50–2.50) for 1,000 messages, confluent-kafka's 4.00 s" in cold
    assert "start-up row: 1.00 s (0.90–1.25)" in cold and "reads the same in 0.50 s" in cold
    assert "Its rows" in missed_targets.new_consumer(None)


def test_the_reads_profile_quotes_the_reads_run_it_is_given_and_only_names_the_command_without_one(tmp_path):

    from raykafka.app.bench import missed_targets

    figures = {f"{kind}, {n} reader(s): {what}": {"median": 10 * i + n + j / 10, "min": 10 * i + n, "max": 10 * i + n + 0.5,
                                                  "n": 3}
               for i, kind in enumerate(("single-record batches", "10,000-record batches")) for n in (1, 2)
               for j, what in enumerate(("wall", "readers' CPU", "broker's CPU"))}
    path = _figures_file(tmp_path / "reads.json", "python -m raykafka.benchmarks.scaling reads --runs 3", figures)
    text = missed_targets.reads(path)
    assert "`python -m raykafka.benchmarks.scaling reads --runs 3` (2026-01-02;" in text
    assert "took 1.00 s (1.00–1.50) of wall time, tansu\nspending 1.20 s (1.00–1.50) of CPU and the reader 1.10 s" in text
    assert "are, 2.00 s (2.00–2.50), tansu spending 2.20 s" in text
    assert "faster: 12.00 s (12.00–12.50)\nagainst 11.00 s (11.00–11.50) for one" in text
    missing = missed_targets.reads(tmp_path / "none.json")
    assert " s (" not in missing and "scaling reads --out SCALING.reads.json" in missing
    assert missed_targets.section(["Ray Data path read ≥ 2× Ray Data read_kafka"]).count("**Ray Data read") == 1


def test_the_spark_side_profile_quotes_read_kafkas_parts_and_only_names_the_command_without_them(tmp_path):
    from raykafka.app.bench import missed_targets
    from raykafka.app.bench.report import SPARK_SIDE_TARGET

    labels = ["read_dataset alone", "read_kafka", "read_kafka, over read_dataset's median",
              "read_kafka: the DataFrame made", "read_kafka: Spark's count"]
    figures = {f"spark read: {label}": float(i + 1) for i, label in enumerate(labels)}
    path = _figures_file(tmp_path / "spark-read.json", "python -m raykafka.benchmarks.spark_read --runs 3", figures)
    text = missed_targets.spark_side(path)
    assert "`python -m raykafka.benchmarks.spark_read --runs 3` (2026-01-02;" in text
    assert "`read_dataset` alone took 1.00 s (0.75–1.50); `read_kafka` took 2.00 s (1.75–2.50), 3.00 s (2.75–3.50)" in text
    assert "hand-over to Spark) took 4.00 s (3.75–4.50), and Spark's count 5.00 s (4.75–5.50)" in text
    del figures["spark read: read_kafka: Spark's count"]  # a file taken before the parts were timed
    older = missed_targets.spark_side(_figures_file(tmp_path / "older.json", "python -m x", figures))
    assert " s (" not in older and "spark_read --out SCALING.spark-read.json" in older
    assert missed_targets.section([SPARK_SIDE_TARGET]).count("**The Spark side of a read") == 1


def _figures_file(path, command, labels):
    """A `scaling --out` file taken on 2026-01-02: each label's figure as given, or a number as
    its median (lowest 0.25 below it, highest 0.5 above)."""
    import json

    path.write_text(json.dumps({"command": command, "taken": "2026-01-02", "figures": {
        label: value if isinstance(value, dict) else {"median": value, "min": value - 0.25, "max": value + 0.5, "n": 3}
        for label, value in labels.items()}}))
    return path


def test_the_batch_produce_profile_quotes_the_three_sends_runs_and_only_names_the_commands_without_one(tmp_path):
    from raykafka.app.bench import missed_targets

    roles = ("all", "flusher", "driver", "broker", "partition_dispatcher")
    paths = {
        "batch": _figures_file(tmp_path / "b.json", "python -m raykafka.benchmarks.scaling sends --batch",
                               {"send_batch: msg/s": 1_400_000, **{f"send_batch: {r} CPU per msg": 1 + i / 10
                                                                   for i, r in enumerate(roles)}}),
        "batch-keyed": _figures_file(tmp_path / "k.json", "python -m raykafka.benchmarks.scaling sends --batch --keyed",
                                     {"send_batch, keyed: msg/s": 800_000,
                                      **{f"send_batch, keyed: {r} CPU per msg": 2 + i / 10 for i, r in enumerate(roles)}}),
        "confluent": _figures_file(tmp_path / "c.json", "python -m raykafka.benchmarks.scaling sends --confluent",
                                   {"confluent-kafka produce(): msg/s": 1_000_000,
                                    **{f"confluent-kafka produce(): {r} CPU per msg": 3 + i / 10
                                       for i, r in enumerate(roles)}})}
    text = missed_targets.batch_produce(paths)
    assert "`python -m raykafka.benchmarks.scaling sends --batch` and `python -m raykafka.benchmarks.scaling sends " \
           "--confluent`" in text
    assert "spent 1.00 (0.75–1.50) at 1,400k (1,400k–1,400k) msg/s: the BrokerWorker\n1.10 (0.85–1.60)" in text
    assert "(1.40× for `send_batch`" in text and "in 1.33 µs" in text  # two cores at 1.5 × 1,000,000 msg/s
    assert "PartitionDispatcher\n2.40 (2.15–2.90)" in text
    paths["confluent"] = tmp_path / "none.json"
    missing = missed_targets.batch_produce(paths)
    assert "(0." not in missing and "--out SCALING.sends-batch.json" in missing


def test_the_demo_write_profile_quotes_the_demo_write_run_and_is_printed_with_any_missed_target(tmp_path):
    from raykafka.app.bench import missed_targets
    from raykafka.app.bench.report import MEMORY_TARGET

    path = _figures_file(tmp_path / "d.json", "python -m raykafka.benchmarks.scaling demo-write --runs 3",
                         {"demo write: spark_to_ray_s": 7.0, "demo write: first_write_s": 4.0,
                          "demo write: write_alone_s": 2.0, "demo write: spark_alone_s": 6.0,
                          "demo write: write_kafka_s": 11.0})
    text = missed_targets.demo_write(path)
    assert "Ray,\n7.00 s (6.75–7.50); the first write" in text and "stages up, 2.00 s (1.75–2.50)" in text
    assert "takes 6.00 s (5.75–6.50): over the target" in text
    assert "timed whole in a fresh process,\ntake 11.00 s (10.75–11.50): the bridge adds" in text
    assert "in_process_writer" not in text and "Spark's job (the events" not in text  # a run before either
    assert "scaling demo-write --rows 1000000" in missed_targets.demo_write(tmp_path / "none.json")
    assert "**The demo's write" in missed_targets.section([MEMORY_TARGET])
    path = _figures_file(tmp_path / "e.json", "python -m raykafka.benchmarks.scaling demo-write --runs 3",
                         {"demo write: spark_to_ray_s": 7.0, "demo write: first_write_s": 4.0,
                          "demo write: write_alone_s": 2.0, "demo write: spark_alone_s": 6.0,
                          "demo write: write_kafka_s": 11.0, "demo write: in_process_write_s": 9.0,
                          "demo write: in_process_early_s": 8.0, "demo write: in_process_pull_s": 7.0,
                          "demo write: spark_job_s": 5.0})
    text = missed_targets.demo_write(path)
    assert "write_kafka's steps take 9.00 s (8.75–9.50);\n8.00 s (7.75–8.50) with that writer" in text
    assert "and 7.00 s (6.75–7.50) with it started before Spark's\njob and fetching" in text
    assert "cached in Spark) takes 5.00 s (4.75–5.50); the fetches" in text


def test_the_demo_write_profile_quotes_the_cpu_of_each_process_and_the_early_pool_when_the_run_took_them(tmp_path):
    from raykafka.app.bench import missed_targets
    from raykafka.app.bench.missed_targets import SPARK_JVMS, TASK_WORKERS

    steps = {"demo write: spark_to_ray_s": 7.0, "demo write: first_write_s": 4.0, "demo write: write_alone_s": 2.0,
             "demo write: spark_alone_s": 6.0, "demo write: write_kafka_s": 11.0}
    cpu = {"spark_alone CPU: cores busy": 1.75, f"spark_alone CPU: {SPARK_JVMS}": 10.0,
           "write_kafka CPU: cores busy": 1.5, f"write_kafka CPU: {SPARK_JVMS}": 11.0,
           f"write_kafka CPU: {TASK_WORKERS}": 1.0, "write_kafka CPU: node writer": 1.25,
           "write_kafka CPU: topic_dispatcher": 0.5, "write_kafka CPU: retry_handler": 0.75,
           "write_kafka CPU: partition_dispatcher": 2.0, "write_kafka CPU: leader_dispatcher": 3.0,
           "write_kafka CPU: broker_worker": 4.0}
    path = _figures_file(tmp_path / "d.json", "python -m raykafka.benchmarks.scaling demo-write --runs 3",
                         {**steps, **{f"demo write: {label}": v for label, v in cpu.items()}})
    text = missed_targets.demo_write(path)
    assert "In Spark's job alone, 1.75 (1.50–2.25) of the two cores are busy on average,\nSpark's JVMs spending " \
           "10.00 s (9.75–10.50)" in text
    assert "1.50 (1.25–2.00) of the two cores are busy:\nSpark's JVMs spend 11.00 s" in text
    assert "which run the fetch tasks, 1.00 s (0.75–1.50)" in text
    assert "the TopicDispatcher 0.50 s (0.25–1.00) and the RetryHandler 0.75 s" in text
    assert "the LeaderDispatcher 3.00 s (2.75–3.50) and the BrokerWorker\n4.00 s (3.75–4.50); the driver" in text
    without = _figures_file(tmp_path / "e.json", "python -m raykafka.benchmarks.scaling demo-write --runs 3", steps)
    assert "CPU each process spent" not in missed_targets.demo_write(without)  # a run that did not count it
    assert "pool of writers started" not in missed_targets.demo_write(without)
    early = _figures_file(tmp_path / "f.json", "python -m raykafka.benchmarks.scaling demo-write --runs 3",
                          {**steps, "demo write: early_pool_s": 10.0})
    assert "`write_kafka`'s steps take 10.00 s (9.75–10.50). " in missed_targets.demo_write(early)
