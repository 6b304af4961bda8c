"""The benchmark suite behind `raykafka bench`: every client side by side on one tansu, one run.

It starts its own tansu (`EmbeddedBroker`), then for each value size and codec measures, each
figure the median of `runs` runs, every client on a fresh topic of 6 partitions with acks=1:

* produce: raykafka `send` per message, `send_batch`, N pipelines in parallel; confluent-kafka
  `produce`; aiokafka `send`; kafka-python `send`; Ray Data's `Dataset.write_kafka`; raykafka's
  Ray Data path (`spark_bridge.write_dataset`); and `tansu perf` as the broker's ceiling;
* consume (a topic written once by confluent-kafka): raykafka `Consumer` into Arrow batches, a
  `ConsumerGroup` of N members, confluent-kafka `consume`, aiokafka `getmany`, kafka-python
  `poll`, `ray.data.read_kafka` and raykafka's `spark_bridge.read_dataset`;
* with --spark, a cached Spark DataFrame into Kafka (raykafka's `write_kafka`, and Ray Data's
  `write_kafka` after `ray.data.from_spark`) and a range back into a DataFrame (raykafka's
  `read_kafka`, and Ray Data's `read_kafka` then `Dataset.to_spark`);
* send→ack latency at a fixed rate with linger.ms=0 (raykafka and confluent-kafka), and the
  peak RSS of the producer's actor processes.

Timing starts after each client has connected (and, for raykafka, its actors have started),
and ends at the last acknowledgement (produce) or once every message has been read (consume).
`run_suite` returns a `Report`; `render_markdown` writes BENCHMARKS.md, `render_chart` the PNG.

This module is the run: which rows there are (`PRODUCERS`, `CONSUMERS`, the latency rows), in
which order and with which settings they are measured, and the rows of the command line and the
process budget. Each client family's rows are measured in a file of their own: `clients_raykafka`,
`clients_confluent`, `clients_aiokafka`, `clients_kafka_python`, `clients_ray_data`,
`clients_spark` and `clients_tansu_perf`, over `workload` (topics, values, keys) and `rows`.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import os
import platform
import statistics
from collections.abc import Callable
from typing import Any

from . import cli_rows, clients_spark
from .clients_aiokafka import consume_aiokafka, produce_aiokafka, produce_aiokafka_keyed
from .clients_confluent import (
    consume_confluent,
    fill_topic,
    latency_confluent,
    produce_confluent,
    produce_confluent_keyed,
)
from .clients_kafka_python import consume_kafka_python, produce_kafka_python
from .clients_ray_data import (
    consume_ray_data,
    consume_raykafka_dataset,
    produce_ray_data,
    produce_raykafka_dataset,
    produce_raykafka_dataset_cold,
)
from .clients_raykafka import (
    arrow_values,
    consume_raykafka,
    consume_raykafka_group,
    consume_raykafka_new,
    latency_chain,
    latency_one_at_a_time,
    latency_raykafka,
    produce_raykafka_batch,
    produce_raykafka_pipelines,
    produce_raykafka_send,
    produce_raykafka_send_keyed,
    warm,
)
from .clients_spark import (
    consume_ray_data_spark,
    consume_raykafka_spark,
    produce_ray_data_spark,
    produce_raykafka_spark,
)
from .clients_tansu_perf import produce_tansu_perf
from .rows import Report, Row, Settings
from .run_log import PROGRESS, log
from .workload import drop_topics, new_topic, raykafka_config, value_of

SINGLE = ", 1 record a batch"  # a read row's label on the topic of one record per batch

READS = ("Ray Data read_kafka", "raykafka Ray Data read_dataset", "Ray Data read_kafka to Spark",
         "raykafka Spark read_kafka")  # each on an ordinary topic, and again with SINGLE


# Rows whose runs are mostly start-up (a producer's actors per run, a second pipeline, tansu
# perf's fixed 10 s): measured at the first codec only, to keep the whole run near 15 minutes
NEW_CONSUMER = "raykafka Consumer → Arrow, new Consumer"

UNCOMPRESSED_ONLY = {"raykafka N pipelines send_batch()", NEW_CONSUMER, "raykafka send() per message, keyed",
                     "confluent-kafka produce(), keyed", "aiokafka send(), keyed", "raykafka Ray Data write_dataset",
                     "raykafka Ray Data write_dataset, cold start",
                     "Ray Data write_kafka from Spark", "raykafka Spark write_kafka", "tansu perf (broker ceiling)",
                     *READS, *(label + SINGLE for label in READS)}


PRODUCERS: list[tuple[str, Callable[..., list[float]]]] = [
    ("raykafka send() per message", produce_raykafka_send),
    ("raykafka send_batch() Arrow", produce_raykafka_batch),
    ("raykafka N pipelines send_batch()", produce_raykafka_pipelines),
    ("confluent-kafka produce()", produce_confluent),
    ("aiokafka send()", produce_aiokafka),
    ("raykafka send() per message, keyed", produce_raykafka_send_keyed),
    ("confluent-kafka produce(), keyed", produce_confluent_keyed),
    ("aiokafka send(), keyed", produce_aiokafka_keyed),
    ("kafka-python send()", produce_kafka_python),
    ("Ray Data write_kafka", produce_ray_data),
    ("raykafka Ray Data write_dataset", produce_raykafka_dataset),
    ("raykafka Ray Data write_dataset, cold start", produce_raykafka_dataset_cold),
    ("Ray Data write_kafka from Spark", produce_ray_data_spark),
    ("raykafka Spark write_kafka", produce_raykafka_spark),
    ("tansu perf (broker ceiling)", produce_tansu_perf),
]


# The Ray Data and Spark reads again on a topic of one record per batch: the worst case, where
# the broker sets the pace (each batch a fetch's worth of work for one record).
SINGLE_RECORD_BATCHES = {label + SINGLE for label in READS}


# at most this many messages a run on a topic of one record per batch: writing 1,000,000 such
# batches took confluent-kafka over 120 s here, and then the embedded tansu dropped its connections
SINGLE_RECORD_CAP = 200_000


# --quick leaves out what costs tens of seconds of start-up: a group's join (~25 s on tansu) and
# a second set of producer actors
QUICK_SKIPS = {"raykafka ConsumerGroup N members", "raykafka N pipelines send_batch()"}

NOTES = {NEW_CONSUMER: "each run a new Consumer, timed from its construction: its actors' start and assign_topic "
                       "included, as confluent-kafka consume()'s runs are",
         "raykafka ConsumerGroup N members": "from the first claim; joining (tansu answers a JoinGroup after half "
                                                "of session.timeout.ms, 22.5 s by default) not counted",
         "Ray Data read_kafka": "each partition's last record in a batch of its own, so that tansu's ListOffsets "
                                "answer is the partition's end",
         "Ray Data read_kafka to Spark": "as Ray Data read_kafka; ends with the DataFrame counted",
         "raykafka Spark read_kafka": "ends with the DataFrame counted",
         "Ray Data read_kafka" + SINGLE: "topic of 1 record per batch, at most 200,000 messages a run",
         "raykafka Ray Data read_dataset" + SINGLE: "topic of 1 record per batch, at most 200,000 messages a run",
         "Ray Data read_kafka to Spark" + SINGLE: "topic of 1 record per batch, at most 200,000 messages a run; ends "
                                                  "with the DataFrame counted",
         "raykafka Spark read_kafka" + SINGLE: "topic of 1 record per batch, at most 200,000 messages a run; ends with "
                                               "the DataFrame counted",
         "Ray Data write_kafka from Spark": "from a cached Spark DataFrame, through ray.data.from_spark",
         "raykafka Spark write_kafka": "from the same cached DataFrame; the producer cached for the config",
         "raykafka Ray Data write_dataset": "the producer cached for the config, started by an untimed first write",
         "raykafka Ray Data write_dataset, cold start": "the cache emptied before each run: a producer started per run, its start-up counted"}


CONSUMERS: list[tuple[str, Callable[..., list[float]]]] = [
    ("raykafka Consumer → Arrow", consume_raykafka),
    (NEW_CONSUMER, consume_raykafka_new),
    ("raykafka ConsumerGroup N members", consume_raykafka_group),
    ("confluent-kafka consume()", consume_confluent),
    ("aiokafka getmany()", consume_aiokafka),
    ("kafka-python poll()", consume_kafka_python),
    ("Ray Data read_kafka", consume_ray_data),
    ("raykafka Ray Data read_dataset", consume_raykafka_dataset),
    ("Ray Data read_kafka to Spark", consume_ray_data_spark),
    ("raykafka Spark read_kafka", consume_raykafka_spark),
    ("Ray Data read_kafka" + SINGLE, consume_ray_data),
    ("raykafka Ray Data read_dataset" + SINGLE, consume_raykafka_dataset),
    ("Ray Data read_kafka to Spark" + SINGLE, consume_ray_data_spark),
    ("raykafka Spark read_kafka" + SINGLE, consume_raykafka_spark),
]


def latency_label(client: str, rate: int, keyed: bool = False) -> str:
    """A paced latency row's label: `raykafka send()` or `confluent-kafka produce()` at `rate`."""
    return f"{client} linger.ms=0, {rate:,} msg/s" + (", keyed" if keyed else "")


RAYKAFKA_SEND, CONFLUENT_PRODUCE = "raykafka send()", "confluent-kafka produce()"


def latency_clients(s: Settings) -> list[tuple[str, Callable[..., tuple[float, float]]]]:
    """Every latency row's label and how it is measured: each rate, keyed and not, ours and
    confluent-kafka's; then, one message at a time, ours and the plain-Ray chain as long as our
    warm path; and what the sender's Nagle wait is worth, at the top rate (a diagnostic)."""
    from raykafka.app.bench.budget import CHAIN_ROW, ONE_AT_A_TIME_ROW

    clients: list[tuple[str, Callable[..., tuple[float, float]]]] = []
    for rate in s.latency_rates:
        for keyed in (False, True):
            clients += [(latency_label(RAYKAFKA_SEND, rate, keyed), functools.partial(latency_raykafka, rate=rate, keyed=keyed)),
                        (latency_label(CONFLUENT_PRODUCE, rate, keyed),
                         functools.partial(latency_confluent, rate=rate, keyed=keyed))]
    clients += [(ONE_AT_A_TIME_ROW, latency_one_at_a_time), (CHAIN_ROW, latency_chain)]
    top = max(s.latency_rates)
    clients.append((latency_label(RAYKAFKA_SEND, top, keyed=True) + ", Nagle wait off",
                    functools.partial(latency_raykafka, rate=top, keyed=True, nagle_wait=0.0)))
    return [(label, fn) for label, fn in clients if _wanted(s, label)]


def latency_rows(bootstrap: str, admin: Any, s: Settings) -> list[Row]:
    """Each client's p50 and p99, the median over `s.runs` runs taken in turn (a run is short, so
    one stall on the box would otherwise decide a p99)."""
    clients = latency_clients(s)
    figures: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in clients}
    failed: dict[str, str] = {}
    for _ in range(s.runs):
        for label, fn in clients:
            if label in failed:
                continue
            try:
                figures[label].append(fn(bootstrap, admin, s))
            except Exception as exc:
                failed[label] = _why(exc)
    rows = []
    for label, _ in clients:
        runs = figures[label]
        if label in failed or not runs:
            rows.append(Row("latency", label, 100, "none", float("nan"), note=failed.get(label, "no run")))
        else:
            rows.append(Row("latency", label, 100, "none", statistics.median(p50 for p50, _ in runs),
                            [statistics.median(p99 for _, p99 in runs)],
                            spread={"p50": [p50 for p50, _ in runs], "p99": [p99 for _, p99 in runs]}))
        log(f"latency {label} done")
    return rows


def command_line_rows(bootstrap: str, admin: Any, s: Settings) -> list[Row]:
    """The command line's rows (`cli_rows`), each the median of `s.runs` runs in seconds."""
    rows = []
    for label, runs, note in cli_rows.rows_of(cli_rows.measure(bootstrap, lambda: new_topic(admin, "cli"), s.runs)):
        rows.append(Row("cli", label, 100, "none", statistics.median(runs) if runs else float("nan"), runs or [],
                        note=note))
        log(f"cli {label}: {rows[-1].rate:.2f} s {note}")
    return rows


def budget_rows(bootstrap: str, admin: Any, s: Settings) -> list[Row]:
    """The process budget's rows (`budget`): a new Consumer's start on a wide topic, a
    producer's first messages to new topics, and one producer's memory and CPU a message during
    `send_batch`s of `s.messages`."""
    from raykafka.app.bench import budget

    rows = []
    try:
        t = new_topic(admin, "assign", budget.ASSIGN_PARTITIONS)
        times, processes = budget.assign_seconds(bootstrap, t, s.runs)
        rows.append(Row("startup", budget.ASSIGN_ROW, 100, "none", statistics.median(times), times,
                        note="consumer processes each run: " + ", ".join(map(str, processes))))
    except Exception as exc:
        rows.append(Row("startup", budget.ASSIGN_ROW, 100, "none", float("nan"), note=_why(exc)))
    try:
        topics = [new_topic(admin, "first") for _ in range(budget.NEW_TOPICS + 1)]
        seconds, before, after = budget.new_topics_seconds(bootstrap, topics, raykafka_config(bootstrap, "none"))
        rows.append(Row("startup", budget.NEW_TOPICS_ROW, 100, "none", seconds, [seconds],
                        note=f"producer processes: {before} before, {after} after", spread={"processes": [before, after]}))
    except Exception as exc:
        rows.append(Row("startup", budget.NEW_TOPICS_ROW, 100, "none", float("nan"), note=_why(exc)))
    drop_topics(admin)
    try:
        got = budget.batch_footprint(lambda: new_topic(admin, "footprint"), warm, arrow_values(value_of(100), s.messages),
                                     s.runs, raykafka_config(bootstrap, "none"))
        peak, cpu, services = got["peak_mib"], got["cpu_us"], got["ray_services_cpu_us"]
        bare_pss, bare_note = _bare_actor()
        rows.append(Row("memory", budget.MEMORY_ROW, 100, "none", peak["pss"], note=(
            f"{got['processes']} processes, send_batch of {s.messages:,}; peaks of the sums: PSS {peak['pss']:,.0f} "
            f"MiB, RSS {peak['rss']:,.0f} MiB, USS {peak['uss']:,.0f} MiB; each process's peak PSS: "
            + ", ".join(f"{role} {mib:,.0f}" for role, mib in sorted(got["pss_mib"].items())) + " MiB; "
            + bare_note), spread={"processes": [got["processes"]], "bare actor PSS": [bare_pss],
                                  "rss": [peak["rss"]], "uss": [peak["uss"]]}))
        rows.append(Row("cpu", budget.CPU_ROW, 100, "none", statistics.median(cpu), cpu, note=(
            f"the producer's {got['processes']} processes and the driver, µs a message; Ray's raylet and GCS "
            f"beside them: {statistics.median(services):.2f} µs; the broker's not counted"),
            spread={"ray services": services}))
    except Exception as exc:
        rows += [Row(kind, label, 100, "none", float("nan"), note=_why(exc))
                 for kind, label in (("memory", budget.MEMORY_ROW), ("cpu", budget.CPU_ROW))]
    drop_topics(admin)
    for row in rows:
        log(f"{row.kind} {row.client}: {row.rate:,.2f} {row.note}")
    return rows


def _bare_actor() -> tuple[float, str]:
    """What one Ray actor process holds with nothing of ours in it, every role's floor: its PSS
    (MiB), and a note of its PSS, RSS and USS."""
    import psutil
    import ray

    @ray.remote(num_cpus=0)
    class Bare:
        def pid(self) -> int:
            return os.getpid()

    bare = Bare.remote()
    try:
        info = psutil.Process(ray.get(bare.pid.remote(), timeout=60)).memory_full_info()
    finally:
        ray.kill(bare)
    return info.pss / 2**20, (f"a bare Ray actor: {info.pss / 2**20:.0f} MiB PSS, {info.rss / 2**20:.0f} MiB RSS, "
                              f"{info.uss / 2**20:.0f} MiB its own (USS)")


def machine() -> dict[str, str]:
    import aiokafka
    import confluent_kafka
    import kafka
    import pyarrow
    import ray

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    from raykafka.driver.embedded_broker import tansu_binary

    return {"nproc": str(os.cpu_count()), "cpu": cpu, "python": platform.python_version(),
            "os": f"{platform.system()} {platform.release()}", "ray": ray.__version__,
            "pyarrow": pyarrow.__version__, "confluent-kafka": importlib.metadata.version("confluent-kafka"),
            "librdkafka": confluent_kafka.libversion()[0], "aiokafka": aiokafka.__version__,
            "kafka-python": kafka.__version__, "tansu": os.path.basename(tansu_binary()),
            "load": " ".join(f"{x:.2f}" for x in os.getloadavg())}


def _wanted(s: Settings, label: str) -> bool:
    if "Spark" in label and not s.spark:
        return False
    return s.clients is None or any(label.startswith(c) for c in s.clients)


def run_suite(s: Settings, command: str = "") -> Report:
    import ray

    from raykafka.app.progress import bar
    from raykafka.driver.admin import Admin
    from raykafka.driver.embedded_broker import EmbeddedBroker

    report = Report(settings=s, machine=machine(), command=command)
    PROGRESS.append(bar("bench", unit="row"))  # a row measured per step; off unless stderr is a terminal
    started_ray = not ray.is_initialized()
    if started_ray and any(_wanted(s, label) for label in cli_rows.RAYKAFKA_ROWS):
        with EmbeddedBroker() as broker, Admin(broker.bootstrap) as admin:  # first: no Ray runs yet
            report.rows += command_line_rows(broker.bootstrap, admin, s)
            drop_topics(admin)
    if started_ray:
        from raykafka.spark_bridge.session import init_ray

        init_ray(num_cpus=2, configure_logging=False) if s.spark else ray.init(
            num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        from ray.data import DataContext

        DataContext.get_current().enable_progress_bars = False
    except Exception:
        pass
    try:
        with EmbeddedBroker() as broker, Admin(broker.bootstrap) as admin:
            bootstrap = broker.bootstrap
            report.rows += latency_rows(bootstrap, admin, s)  # first, while nothing else runs on the box
            drop_topics(admin)
            if _wanted(s, "raykafka budget"):
                report.rows += budget_rows(bootstrap, admin, s)  # start-up next, the box still quiet
            for size in s.sizes:
                for codec in s.codecs:
                    report.rows += _config_rows(bootstrap, admin, s, size, codec, spark=False)
            if s.spark:  # last: from its start, Spark's executor holds one of the CPUs Ray tasks use
                for size in s.sizes:
                    report.rows += _config_rows(bootstrap, admin, s, size, s.codecs[0], spark=True)
    finally:
        if clients_spark.SPARK:
            from raykafka.spark_bridge.session import stop_spark

            stop_spark()
            clients_spark.SPARK.clear()
        if started_ray:
            ray.shutdown()
        PROGRESS.pop().close()
    if s.record_batches:
        report.record_batches = record_batch_rates()
    if s.hot_paths:
        from raykafka.app.bench import hot_paths

        log("hot paths")
        report.hot_paths, report.against = hot_paths.measure(s.against), s.against
    return report


def _config_rows(bootstrap: str, admin: Any, s: Settings, size: int, codec: str, spark: bool) -> list[Row]:
    """One value size and codec: its produce rows, then its consume rows on topics written for
    them; the Spark rows alone, or every other row."""
    def wanted(label: str) -> bool:
        return (_wanted(s, label) and ("Spark" in label) == spark and not (label in QUICK_SKIPS and s.quick_mode)
                and not (label in UNCOMPRESSED_ONLY and codec != s.codecs[0]))

    rows = []
    for label, fn in PRODUCERS:
        if wanted(label):
            rows.append(_measure("produce", label, size, codec, s,
                                 lambda fn=fn: fn(bootstrap, admin, s, size, codec)))
            drop_topics(admin)
    topics: dict[bool, str] = {}  # one record per batch or not -> the topic written for that
    for label, fn in CONSUMERS:
        if not wanted(label) or (label in QUICK_SKIPS and (size, codec) != (s.sizes[0], s.codecs[0])):
            continue  # the group's join costs ~25 s a run: one config is enough
        single = label in SINGLE_RECORD_BATCHES
        run = dataclasses.replace(s, messages=min(s.messages, SINGLE_RECORD_CAP)) if single else s
        if single not in topics:
            topics[single] = fill_topic(bootstrap, admin, run.messages, size, codec, **({"per_batch": 1} if single else {}))
        rows.append(_measure("consume", label, size, codec, run, lambda fn=fn, t=topics[single], run=run: fn(bootstrap, t, run),
                             NOTES.get(label, "")))
    drop_topics(admin)
    return rows


def _why(exc: BaseException) -> str:
    return f"failed: {type(exc).__name__}: {str(exc)[:120]}".replace("|", "/").replace("\n", " ")


def _measure(kind: str, label: str, size: int, codec: str, s: Settings, fn: Callable[[], list[float]],
             note: str = "") -> Row:
    """One client's runs; a client failing leaves a row saying why, and the others still run."""
    try:
        times = fn()
        row = Row(kind, label, size, codec, s.messages / statistics.median(times), times, note, messages=s.messages)
    except Exception as exc:
        row = Row(kind, label, size, codec, float("nan"), note=_why(exc))
    log(f"{kind} {label} {size}B {codec}: {row.rate:,.0f} msg/s {row.note}")
    if PROGRESS:
        PROGRESS[0].update(1)
    return row


def record_batch_rates() -> list[dict[str, Any]]:
    """The codec table of app/bench/record_batches.py (encode/decode in this process)."""
    from raykafka.app.bench import record_batches

    return record_batches.measure()
