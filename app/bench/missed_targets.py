"""What explains each target the bench misses, and what would close it: `report.py` copies
into BENCHMARKS.md the profile of every target the run missed. Each names the rows of the same
run that hold the evidence; the profiles it quotes were taken apart from the bench, each with
the command that takes it again and the day it was taken."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from .budget import WARM_PATH_CALLS

HEADING = "## Targets missed: what explains them, what would close them"

# what `python -m raykafka.benchmarks.scaling <command> --out FILE` wrote, at the package's root
ROOT = Path(__file__).resolve().parents[2]
HOPS_FIGURES = ROOT / "SCALING.hops.json"  # hops
READS_FIGURES = ROOT / "SCALING.reads.json"  # reads
SENDS_FIGURES = {kind: ROOT / f"SCALING.sends-{kind}.json"  # sends --batch [--keyed] | --confluent
                 for kind in ("batch", "batch-keyed", "confluent")}
DEMO_WRITE_FIGURES = ROOT / "SCALING.demo-write.json"  # demo-write
SPARK_READ_FIGURES = ROOT / "SCALING.spark-read.json"  # python -m raykafka.benchmarks.spark_read
# read_kafka's two parts as that command names them (it imports these): its read tasks reading
# Kafka into Arrow IPC streams and handing them to Spark, then Spark's count
READ_KAFKA_PARTS = ("read_kafka: the DataFrame made", "read_kafka: Spark's count")

LATENCY_PATH = (
    "**Send → acknowledgement latency at `linger.ms=0`.** A warm message takes {calls} actor calls\n"
    "from `send` to its future (the latency table names them), and the plain-Ray chain row is what\n"
    "that many trivial calls cost here, one at a time. One call chain per message is more than two\n"
    "cores carry at the bench's rates, so the sender coalesces as Nagle's rule does: while messages\n"
    "it handed over are unanswered, new ones gather (up to 50 ms). The latency table's row \"Nagle\n"
    "wait off\" is the top rate's keyed run with that wait switched off: what the rule saves.\n")
LATENCY_HOPS = (
    "`{command}` ({taken}; median of the runs, lowest–highest run): through a chain of {calls}\n"
    "trivial actors, each call's result the next one's argument, plain Ray calls take {plain_p50}\n"
    "at p50 and {plain_p99} at p99; the same actors as a Ray compiled graph take {compiled_p50} and\n"
    "{compiled_p99}. Our idle send→ack at linger.ms=0, one message at a time, is {ours_p50} at p50\n"
    "and {ours_p99} at p99. A compiled graph is not the way out on this machine: while it runs\n"
    "nothing, its actors keep {compiled_idle} busy polling their channels, as plain actors keep\n"
    "{plain_idle}, and that on a node of two. ")
LATENCY_CLOSE = (
    "A Ray compiled graph does not fit our stages either. Seen with Ray 2.60 here (2026-11-26): an\n"
    "async actor's method cannot be a node of a compiled graph (its coroutine is not serializable),\n"
    "and the BrokerWorker is an async actor; an actor already in one compiled graph makes a second\n"
    "graph that shares it hang (no result in 10 s), and that graph's teardown kills the actor, while\n"
    "one BrokerWorker serves every topic of its brokers. What would close it is a decision on the\n"
    "stages, not a faster stage: fewer calls on a warm message's path than the four it takes now.")


class Taken(NamedTuple):
    """What a `scaling --out` file holds, ready to quote."""

    command: str
    day: str
    figures: dict[str, str]  # by label: `median unit (min–max)`
    raw: dict[str, dict[str, float]]  # by label: median, min, max, n


def _taken(path: Path, unit: str, units: dict[str, str] | None = None) -> Taken | None:
    """A `scaling --out` file, each figure formatted with `unit` (or the one `units` gives its
    label); None when it cannot be read."""
    try:
        taken = json.loads(path.read_text())
        units = units or {}
        figures = {label: f"{f['median']:.2f}{_spaced(units.get(label, unit))} ({f['min']:.2f}–{f['max']:.2f})"
                   for label, f in taken["figures"].items()}
        return Taken(taken["command"], taken["taken"], figures, taken["figures"])
    except (OSError, KeyError, TypeError, ValueError):
        return None


def _spaced(unit: str) -> str:
    return f" {unit}" if unit else ""


def _quoted(path: Path, unit: str, fill: Callable[[str, str, dict[str, str]], str], command_only: str,
            units: dict[str, str] | None = None) -> str:
    """`fill(command, day, figures)` of a `scaling --out` file, or `command_only` when the file
    is missing or lacks a figure that `fill` asks for."""
    taken = _taken(path, unit, units)
    try:
        return fill(taken.command, taken.day, taken.figures) if taken is not None else command_only
    except KeyError:
        return command_only


PLAIN, COMPILED = f"plain Ray calls, {WARM_PATH_CALLS} actors", f"compiled graph, {WARM_PATH_CALLS} actors"
PLAIN_IDLE, COMPILED_IDLE = f"{PLAIN}: cores busy while idle", f"{COMPILED}: cores busy while idle"


def latency(path: Path = HOPS_FIGURES) -> str:
    """The latency profile, with the hop figures of the last `scaling hops --out` run (none when
    that file is not there: the profile then names the command only)."""
    hops = _quoted(path, "ms", lambda command, day, f: LATENCY_HOPS.format(
        command=command, taken=day, calls=WARM_PATH_CALLS,
        plain_p50=f[f"{PLAIN}: p50"], plain_p99=f[f"{PLAIN}: p99"],
        compiled_p50=f[f"{COMPILED}: p50"], compiled_p99=f[f"{COMPILED}: p99"],
        ours_p50=f["raykafka send()->ack, idle, linger.ms=0: p50"],
        ours_p99=f["raykafka send()->ack, idle, linger.ms=0: p99"],
        plain_idle=f[PLAIN_IDLE], compiled_idle=f[COMPILED_IDLE]),
        "What one actor hop costs here: `python -m raykafka.benchmarks.scaling hops --out SCALING.hops.json`. ",
        units={PLAIN_IDLE: "cores", COMPILED_IDLE: "cores"})
    return LATENCY_PATH.format(calls=WARM_PATH_CALLS) + hops + LATENCY_CLOSE


READS_TOPIC = (
    "**Ray Data read at 2× Ray Data's `read_kafka`.** The target row reads an ordinary topic whose\n"
    "last record in each partition is a batch of its own (tansu's ListOffsets answers the last\n"
    "batch's base offset + 1, and Ray Data 2.60 clamps any end offset it is given to that answer);\n"
    "the rows marked \"1 record a batch\" read a topic of one record per\n"
    "batch, where the broker sets the pace: tansu serves one connection's fetches for a fraction of\n"
    "the CPU it spends when two connections fetch at once. ")
READS_FIGURES_TEXT = (
    "`{command}` ({taken}; median of the runs, lowest–highest run): `read_ranges` reading\n"
    "the six ranges in one process, over one connection, took {one_wall} of wall time, tansu\n"
    "spending {one_broker} of CPU and the reader {one_cpu}; split between two processes, as\n"
    "`read_dataset`'s two read tasks on two CPUs are, {two_wall}, tansu spending {two_broker}. On\n"
    "a topic of 10,000-record batches (five times the records) two readers are the faster: {big_two}\n"
    "against {big_one} for one. ")
READS_CLOSE = (
    "What would close it on this broker: one read task per broker, not one per CPU, which would\n"
    "give up the parallel decoding a broker that keeps up rewards; we keep a task per CPU.")


def reads(path: Path = READS_FIGURES) -> str:
    """The Ray Data read profile, with the figures of the last `scaling reads --out` run (none
    when that file is not there: the profile then names the command only)."""
    one, two, big_one, big_two = (f"{kind}, {n} reader(s): " for kind in ("single-record batches",
                                                                           "10,000-record batches") for n in (1, 2))
    figures = _quoted(path, "s", lambda command, day, f: READS_FIGURES_TEXT.format(
        command=command, taken=day, one_wall=f[one + "wall"], one_broker=f[one + "broker's CPU"],
        one_cpu=f[one + "readers' CPU"], two_wall=f[two + "wall"], two_broker=f[two + "broker's CPU"],
        big_one=f[big_one + "wall"], big_two=f[big_two + "wall"]),
        "What each reader and the broker spend: `python -m raykafka.benchmarks.scaling reads --out SCALING.reads.json`. ")
    return READS_TOPIC + figures + READS_CLOSE


BATCH_TOPIC = (
    "**Batch produce at 1.5× confluent-kafka, and at most 0.5 µs of our CPU a message.** Both\n"
    "clients spend about the same CPU a message, and two cores carry no more. ")
BATCH_FIGURES_TEXT = (
    "`{batch_cmd}` and `{confluent_cmd}` (CPU of every process, µs a message; median of the runs,\n"
    "lowest–highest run; {day}): `send_batch` spent {b_all} at {b_rate} msg/s: the BrokerWorker\n"
    "{b_flusher}, encoding the record batches; the driver {b_driver}, the Arrow columns; the broker\n"
    "{b_broker}{b_results}. confluent-kafka's `produce()` spent {c_all}, {c_own}\n"
    "of it its own and {c_broker} the broker's, at {c_rate} msg/s ({ratio:.2f}× for `send_batch`, by\n"
    "the medians). 1.5× that rate would need the two cores to carry a message in {need:.2f} µs, the\n"
    "broker's share included. With keys\n"
    "(`{keyed_cmd}`, the 100 keys in turn) the rows of a partition are gathered out of the shared\n"
    "column: {k_all} a message at {k_rate} msg/s, the BrokerWorker {k_flusher} and the PartitionDispatcher\n"
    "{k_pd}. ")
BATCH_CLOSE = (
    "What would close it: less work a message in the BrokerWorker (encoding straight from the shared\n"
    "column into the request buffer) and in the driver; on a node with more cores, a second pipeline.")


def _encoder_cpu(figures: dict[str, str], run: str) -> str:
    """The CPU a message of the process that encodes the record batches: the broker worker's,
    or in runs made before it hosted the flusher, the flusher's."""
    worker = f"{run}: broker_worker CPU per msg"
    return figures[worker] if worker in figures else figures[f"{run}: flusher CPU per msg"]


def _results_cpu(figures: dict[str, str], run: str) -> str:
    """The results actor's CPU a message, in runs made while the producer had one; else nothing
    (the outcomes go from the broker worker to the driver)."""
    results = figures.get(f"{run}: producer_results CPU per msg")
    return "" if results is None else f"; the ProducerResults {results}"


def batch_produce(paths: dict[str, Path] = SENDS_FIGURES) -> str:
    """The batch produce profile, with the figures of the last `scaling sends --batch`, `--batch
    --keyed` and `--confluent` runs written with `--out` (when one is missing, the profile names
    the commands only)."""
    b, k, c = (_taken(paths[kind], "") for kind in ("batch", "batch-keyed", "confluent"))
    try:
        if b is None or k is None or c is None:
            raise KeyError("a sends file")
        theirs, ours = c.raw["confluent-kafka produce(): msg/s"], b.raw["send_batch: msg/s"]
        figures = BATCH_FIGURES_TEXT.format(
            batch_cmd=b.command, confluent_cmd=c.command, keyed_cmd=k.command, day=", ".join(sorted({b.day, c.day, k.day})),
            b_all=b.figures["send_batch: all CPU per msg"], b_rate=_rate(ours),
            b_flusher=_encoder_cpu(b.figures, "send_batch"), b_driver=b.figures["send_batch: driver CPU per msg"],
            b_broker=b.figures["send_batch: broker CPU per msg"],
            b_results=_results_cpu(b.figures, "send_batch"),
            c_all=c.figures["confluent-kafka produce(): all CPU per msg"],
            c_own=c.figures["confluent-kafka produce(): driver CPU per msg"],
            c_broker=c.figures["confluent-kafka produce(): broker CPU per msg"],
            c_rate=_rate(theirs), need=2e6 / (1.5 * theirs["median"]), ratio=ours["median"] / theirs["median"],
            k_all=k.figures["send_batch, keyed: all CPU per msg"], k_rate=_rate(k.raw["send_batch, keyed: msg/s"]),
            k_flusher=_encoder_cpu(k.figures, "send_batch, keyed"),
            k_pd=k.figures["send_batch, keyed: partition_dispatcher CPU per msg"])
    except KeyError:  # a file missing, or without a figure asked for
        figures = ("Where each message's CPU goes: `python -m raykafka.benchmarks.scaling sends --batch --rows 1000000 "
                   "--out SCALING.sends-batch.json`, the same with `--keyed` (`SCALING.sends-batch-keyed.json`) "
                   "and with `--confluent` (`SCALING.sends-confluent.json`). ")
    return BATCH_TOPIC + figures + BATCH_CLOSE


def _rate(figure: dict[str, float]) -> str:
    """A msg/s figure of a `scaling --out` file, in thousands: `1,380k (1,350k–1,400k)`."""
    return f"{figure['median'] / 1000:,.0f}k ({figure['min'] / 1000:,.0f}k–{figure['max'] / 1000:,.0f}k)"


MEMORY_TEXT = (
    "**Producer memory: summed PSS at most 350 MiB.** The producer ran {processes} processes, and a bare\n"
    "Ray actor here holds {bare} of PSS before any of our code is imported: {processes} of them,\n"
    "{floor}, are over the bound before a message is written (the memory row's note gives each\n"
    "process's peak). The design keeps every stage kind an actor (DESIGN.md, \"The process budget\"),\n"
    "and a producer on one broker has five: topic, partition and leader dispatchers, RetryHandler,\n"
    "BrokerWorker. Trimming our imports cannot close it. What would: hosting the stages that carry\n"
    "no data (the TopicDispatcher, which looks topics up, and the RetryHandler) as Ray-free state\n"
    "in the PartitionDispatcher's process, a producer of 2 + W processes; a decision to take, as it\n"
    "reverses the first of the budget's.")
MEMORY_UNKNOWN = (
    "**Producer memory: summed PSS at most 350 MiB.** The memory row's note gives each process's peak\n"
    "PSS and what a bare Ray actor holds here: the floor of every process, whatever it runs.")


def memory(report: Any = None) -> str:
    """The memory profile, with the run's own figures: its processes and a bare actor's PSS."""
    row = _budget_row(report, "memory")
    try:
        processes, bare = int(row.spread["processes"][0]), row.spread["bare actor PSS"][0]
    except (AttributeError, KeyError, IndexError, TypeError):
        return MEMORY_UNKNOWN
    return MEMORY_TEXT.format(processes=processes, bare=f"{bare:,.0f} MiB", floor=f"{processes * bare:,.0f} MiB")


NEW_CONSUMER_TEXT = (
    "**Consume from a new Consumer at 2× confluent-kafka.** Each run is a new client, timed from its\n"
    "construction: our runs took {new} for {messages:,} messages, confluent-kafka's {theirs}. A\n"
    "Consumer already started reads the same in {warm}; the rest of a new one's run is its start: its\n"
    "processes (a partition consumer and a broker consumer) and `assign_topic` (on 24 partitions,\n"
    "the process budget's start-up row: {assign}). What would close it: a start that costs no\n"
    "process, which a Ray actor cannot give; or processes started before they are needed.")


def new_consumer(report: Any = None) -> str:
    """The new Consumer's profile, with the run's own rows: cold, warm, the peer, the start-up."""
    try:
        new, warm, theirs = (_runs(report, "consume", client) for client in (
            "raykafka Consumer → Arrow, new Consumer", "raykafka Consumer → Arrow", "confluent-kafka consume()"))
        assign = _budget_row(report, "startup")
        return NEW_CONSUMER_TEXT.format(new=new, warm=warm, theirs=theirs, messages=report.settings.messages,
                                        assign=_seconds(assign.runs))
    except (AttributeError, TypeError, ValueError):
        return NEW_CONSUMER_TEXT.split(" Each run")[0] + " Its rows: the consume table and the start-up row."


def _budget_row(report: Any, kind: str) -> Any:
    """The run's budget row of `kind` (`startup`: the assign row), or None."""
    from .budget import ASSIGN_ROW, MEMORY_ROW

    client = {"memory": MEMORY_ROW, "startup": ASSIGN_ROW}[kind]
    return None if report is None else report.find(kind, client)


def _runs(report: Any, kind: str, client: str) -> str:
    row = report.find(kind, client)
    return _seconds(row.runs)


def _seconds(runs: list[float]) -> str:
    """Seconds of the runs: `1.23 s (1.10–1.40)`, the median and the range."""
    ordered = sorted(runs)
    median = ordered[len(ordered) // 2]
    return f"{median:.2f} s" + (f" ({ordered[0]:.2f}–{ordered[-1]:.2f})" if len(ordered) > 1 else "")


# a target of the issue that no bench row measures: always printed, with its own command
DEMO_WRITE = (
    "**The demo's write in under 5 s** (no bench row: `raykafka demo` prints it). ")
DEMO_WRITE_FIGURES_TEXT = (
    "`{command}` takes it step by step, each run in a fresh process as the demo is ({taken}; median\n"
    "of the runs, lowest–highest run): Spark making the events and RayDP handing them to Ray,\n"
    "{spark}; the first write, which starts the pool of pipelines and the topic's stages, {first};\n"
    "the same rows again, the stages up, {again}. Spark's job alone, the same events into Spark's\n"
    "noop sink (which writes nowhere) in a fresh process of its own, takes {alone}: over the target\n"
    "before any writer runs. The same events through `write_kafka`, timed whole in a fresh process,\n"
    "take {whole}: the bridge adds the difference to Spark's own job. ")
DEMO_WRITE_IN_PROCESS_TEXT = (
    "With a writer of one process a node, which runs its producer's stages itself where a\n"
    "`write_kafka` writer starts five more actors (`benchmarks/in_process_writer.py`: an experiment\n"
    "for DESIGN.md's process budget, not a public path), write_kafka's steps take {in_process};\n"
    "{early} with that writer started before Spark's job; and {pull} with it started before Spark's\n"
    "job and fetching its Spark partitions itself, in place of RayDP's fetch tasks. ")
DEMO_WRITE_SPARK_JOB_TEXT = (
    "Of Spark making the events and RayDP handing them to Ray, Spark's job (the events made and\n"
    "turned into RayDP's Arrow batches, cached in Spark) takes {job}; the fetches into Ray, and a Ray\n"
    "Dataset made of them, take the rest. ")
DEMO_WRITE_EARLY_POOL_TEXT = (
    "With its pool of writers started in a thread before Spark's job, not after the hand-over,\n"
    "`write_kafka`'s steps take {early_pool}. ")
# the roles `benchmarks/scaling.py demo-write` counts CPU by, beside its actors' (`role_of_actor`)
SPARK_JVMS, TASK_WORKERS, RAY_DAEMONS = "Spark's JVMs", "task workers", "Ray's daemons"
DEMO_WRITE_CPU_TEXT = (
    "The Spark-alone and `write_kafka` runs also count the CPU each process spent, in CPU-seconds\n"
    "(not the broker's). In Spark's job alone, {spark_busy} of the two cores are busy on average,\n"
    "Spark's JVMs spending {spark_jvm}. Through `write_kafka`, {busy} of the two cores are busy:\n"
    "Spark's JVMs spend {jvm}; Ray's task workers, which run the fetch tasks, {fetch}; the node\n"
    "writer {writer}; the TopicDispatcher {topic} and the RetryHandler {retry}, which hand on few rows\n"
    "or none; the PartitionDispatcher {partition}, the LeaderDispatcher {leader} and the BrokerWorker\n"
    "{broker}; the driver and Ray's daemons the rest. ")
DEMO_WRITE_CLOSE = (
    "The write itself is the write-alone figure; the rest is Spark's job on a cold JVM and RayDP's recoverable\n"
    "conversion (Arrow bytes cached in Spark, then fetched by Ray tasks from the executors), and\n"
    "the start of six processes (a node writer and its producer's five actors) on two cores. What\n"
    "would close it: less CPU: fewer processes to start, and a Spark that is warm before the demo\n"
    "asks it for events (its first job is the slow one).")


def _spark_job(figures: dict[str, str]) -> str:
    """The sentence on Spark's job within the hand-over, when the run took it apart."""
    job = figures.get("demo write: spark_job_s")
    return "" if job is None else DEMO_WRITE_SPARK_JOB_TEXT.format(job=job)


def _in_process(figures: dict[str, str]) -> str:
    """The in-process writer's sentence, when the run took it (runs before 2026-11-28 did not)."""
    names = ("in_process_write_s", "in_process_early_s", "in_process_pull_s")
    if any(f"demo write: {name}" not in figures for name in names):
        return ""
    return DEMO_WRITE_IN_PROCESS_TEXT.format(in_process=figures["demo write: in_process_write_s"],
                                             early=figures["demo write: in_process_early_s"],
                                             pull=figures["demo write: in_process_pull_s"])


def _early_pool(figures: dict[str, str]) -> str:
    """The sentence on the pool started before Spark's job, when the run took it (earlier runs did not)."""
    early_pool = figures.get("demo write: early_pool_s")
    return "" if early_pool is None else DEMO_WRITE_EARLY_POOL_TEXT.format(early_pool=early_pool)


def _cpu(figures: dict[str, str]) -> str:
    """The CPU sentence, when the run counted it (earlier runs did not)."""
    def cpu(what: str, role: str) -> str:
        return figures[f"demo write: {what} CPU: {role}"]

    try:
        return DEMO_WRITE_CPU_TEXT.format(
            spark_busy=cpu("spark_alone", "cores busy"), spark_jvm=cpu("spark_alone", SPARK_JVMS),
            busy=cpu("write_kafka", "cores busy"), jvm=cpu("write_kafka", SPARK_JVMS),
            fetch=cpu("write_kafka", TASK_WORKERS), writer=cpu("write_kafka", "node writer"),
            topic=cpu("write_kafka", "topic_dispatcher"), retry=cpu("write_kafka", "retry_handler"),
            partition=cpu("write_kafka", "partition_dispatcher"), leader=cpu("write_kafka", "leader_dispatcher"),
            broker=cpu("write_kafka", "broker_worker"))
    except KeyError:
        return ""


def demo_write(path: Path = DEMO_WRITE_FIGURES) -> str:
    """The demo write's profile, with the figures of the last `scaling demo-write --out` run
    (when that file is missing, the profile names the command only)."""
    figures = _quoted(path, "s", lambda command, day, f: DEMO_WRITE_FIGURES_TEXT.format(
        command=command, taken=day, spark=f["demo write: spark_to_ray_s"], first=f["demo write: first_write_s"],
        again=f["demo write: write_alone_s"], alone=f["demo write: spark_alone_s"],
        whole=f["demo write: write_kafka_s"]) + _early_pool(f) + _spark_job(f) + _in_process(f) + _cpu(f),
        "Step by step: `python -m raykafka.benchmarks.scaling demo-write --rows 1000000 --runs 3 --out "
        "SCALING.demo-write.json`. ",
        units={f"demo write: {what} CPU: cores busy": "" for what in ("spark_alone", "write_kafka")})
    return DEMO_WRITE + figures + DEMO_WRITE_CLOSE


SPARK_SIDE_TOPIC = (
    "**The Spark side of a read: at most 1 s over `read_dataset` alone.** `read_kafka`'s read tasks\n"
    "read Kafka as `read_dataset`'s do, and write each share as Arrow IPC streams, which Spark's\n"
    "executors decode (`spark_bridge/to_spark.py`). ")
SPARK_SIDE_FIGURES_TEXT = (
    "`{command}` ({taken}; median of the runs, lowest–highest run; the first run of each carries\n"
    "its cold start): `read_dataset` alone took {alone}; `read_kafka` took {whole}, {over} over\n"
    "`read_dataset`'s median. Of it, making the DataFrame (the read tasks, their streams, the\n"
    "hand-over to Spark) took {made}, and Spark's count {count}. ")
SPARK_SIDE_CLOSE = (
    "The count is RayDP's reader, in Spark's executors: each stream is got from Ray's object store\n"
    "into the JVM and read as Arrow there, a scan of an existing RDD of rows in Spark's plan (`Scan\n"
    "ExistingRDD`). The target's row above is the bench's: its reads run in the bench's one process,\n"
    "after every row before them (Spark's writes among them). This profile runs in a process of its\n"
    "own, and what makes the bench's runs slower than its own was not found. What would cut Spark's\n"
    "part: a reader of our own in the JVM, handing Spark columnar batches as its Parquet source\n"
    "does; a JVM module of our own to build and ship, which is a decision to take.")


def spark_side(path: Path = SPARK_READ_FIGURES) -> str:
    """The Spark side of a read, with the figures of the last `spark_read --out` run (none when
    that file is not there, or was taken before the command timed read_kafka's parts)."""
    figures = _quoted(path, "s", lambda command, day, f: SPARK_SIDE_FIGURES_TEXT.format(
        command=command, taken=day, alone=f["spark read: read_dataset alone"], whole=f["spark read: read_kafka"],
        over=f["spark read: read_kafka, over read_dataset's median"],
        made=f[f"spark read: {READ_KAFKA_PARTS[0]}"], count=f[f"spark read: {READ_KAFKA_PARTS[1]}"]),
        "Each part timed: `python -m raykafka.benchmarks.spark_read --out SCALING.spark-read.json`. ")
    return SPARK_SIDE_TOPIC + figures + SPARK_SIDE_CLOSE


CLI_PRODUCE = (
    "**`raykafka produce` of 1,000 lines in 2 s.** With no Ray to join, the command starts a local Ray\n"
    "(its GCS, a raylet and workers) and the producer's processes before its first line goes: the\n"
    "row's seconds are mostly that start, as the confluent-kafka script beside it shows. What would\n"
    "close it: producing in the command's own process, on the stages' Ray-free states, when no Ray\n"
    "runs, as `raykafka consume -e` reads.")
CLI_CONSUME = (
    "**`raykafka consume -e` in 2 s.** With no Ray to join the command reads in its own process and\n"
    "starts no Ray; what remains is Python's start and our imports (pyarrow, the wire layer), and\n"
    "the broker's answers.")


# a target's text as report.py's table names it, or the start of it -> what renders its profile
PROFILES: dict[str, Callable[[Any], str]] = {  # each given the run's report (None: none)
    "batch produce 100 B ≥ 1.5× confluent-kafka produce()": lambda report: batch_produce(),
    "per-message send with keys ≥ 1.0× aiokafka with keys": lambda report: (
        "**Per-message `send` with keys at 1.0× aiokafka.** The ratio moves with the machine's load:\n"
        "0.98× in a full run of 2026-11-24, 1.17× and 1.22× in runs of only the send rows and 1.10× in\n"
        "a full run on 2026-11-25. `python -m raykafka.benchmarks.scaling sends\n"
        "--keyed` (3 runs of 500,000): 14.56 µs of CPU a message (14.42–16.10), **10.0 of them in the\n"
        "driver** (9.8–11.2): a future, a ledger entry and a queued row per message on the caller's\n"
        "side, then each message's outcome settled and its future set, in one Python process. At about\n"
        "94,000 msg/s that is one core, the driver's GIL: the limit. (Each keyed hand-over spans every\n"
        "partition; the LeaderDispatcher now sends a hand-over's batches to a broker in one call, not\n"
        "one per partition, which cut its and the Aggregator's CPU from 0.66 and 0.68 µs a message to\n"
        "0.44 and 0.40, and the raylet's from 0.76 to 0.54.) What would close it: fewer Python objects\n"
        "per message on the driver (settling a hand-over's outcomes as arrays, as `send_batch` does at\n"
        "0.25 µs a message, and setting futures lazily), or `send_batch` where the caller can batch."),
    "Ray Data path read ≥ 2× Ray Data read_kafka": lambda report: reads(),
    "p99 at ": lambda report: latency(),  # every rate, keyed or not
    "p50 at ": lambda report: latency(),
    "producer processes' summed PSS": memory,
    "send_batch: our processes' CPU": lambda report: batch_produce(),
    "consume from a new Consumer": new_consumer,
    "Kafka → a counted Spark DataFrame takes ≤": lambda report: spark_side(),
    "raykafka produce, ": lambda report: CLI_PRODUCE,
    "raykafka consume -e": lambda report: CLI_CONSUME,
}


def section(missed: list[str], report: Any = None) -> str:
    """The heading, each missed target's profile, once each, in the order of `missed`, then the
    demo's write (no bench row); nothing when the run missed nothing."""
    seen: list[str] = []
    for target in missed:
        render = next((fn for key, fn in PROFILES.items() if target.startswith(key)), None)
        profile = render(report) if render is not None else None
        if profile is not None and profile not in seen:
            seen.append(profile)
    return "\n\n".join([HEADING, *seen, demo_write()]) if seen else ""
