"""Figures for SCALING.md: driver CPU per row, CPU-seconds per message of each stage, pipelines
and nodes on this machine.

    python -m raykafka.benchmarks.scaling driver   [--rows 2000000] [--runs 5]   # driver CPU/row, stage CPU, both paths
    python -m raykafka.benchmarks.scaling pipelines [--rows 2000000] [--runs 3]  # 1, 2, 3 pipelines on one node
    python -m raykafka.benchmarks.scaling nodes    [--rows 1000000] [--runs 3]   # 1, 2, 3 simulated nodes of 1 CPU
    python -m raykafka.benchmarks.scaling sends    [--rows 500000] [--runs 3] [--keyed | --batch | --confluent]
    python -m raykafka.benchmarks.scaling reads    [--rows 200000] [--runs 3]   # 1 reader, 2: single-record and 10,000-record batches
    python -m raykafka.benchmarks.scaling demo-write [--rows 1000000] [--runs 3]  # the demo's write, step by step, Spark alone, a writer of one process, each process's CPU
    python -m raykafka.benchmarks.scaling hops     [--rows 500] [--runs 3]      # what one actor hop costs here

`sends --batch --keyed`: the table has a key column too (the 100 keys in turn).

`hops`: the floor under send→ack latency. A round trip through a chain of `HOPS` trivial actors
(each call's result the next call's argument), as plain Ray calls and as a Ray compiled graph;
and our producer's send→ack at linger.ms=0 when idle (one message at a time), taken while no
compiled graph runs. `--rows` round trips a run, one every 5 ms. Also the cores the chain's
processes keep busy while they have nothing to do, as plain actors and as a compiled graph.

Object-store bytes are Ray's own count of bytes created in the stores (needs grpcio, which
`ray[data]` does not install: `pip install grpcio`). Every run writes `--rows` rows of 100-byte values (no keys) from a materialized Ray Dataset of
100,000-row blocks to a 6-partition topic on an embedded tansu. The node writers are started by
an untimed first write. CPU is read per process from /proc (user + system) before and after
each run, and attributed by role: the driver, the write tasks (Ray workers that are no actor),
each pipeline role by actor name, the node writers, the broker. Prints one JSON line per run
and a summary (median, min-max) per figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any

import psutil

from raykafka.app.bench.budget import WARM_PATH_CALLS
from raykafka.app.bench.missed_targets import RAY_DAEMONS, SPARK_JVMS, TASK_WORKERS

BLOCK_ROWS = 100_000
VALUE = b"v" * 100
PARTITIONS = 6


def cpu_of(pid: int) -> float:
    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.Error:
        return 0.0


def role_of_actor(actor: dict[str, Any]) -> str:
    name = actor.get("Name") or ""
    if actor.get("ActorClassName") == "NodeWriter":
        return "node writer"
    if "/" in name:  # <producer>/<role>[-key]
        role = name.rsplit("/", 1)[1]
        for known in ("topic_dispatcher", "partition_dispatcher", "leader_dispatcher", "broker_worker",
                      "retry_handler"):
            if role.startswith(known):
                return known
    return "other actor"


def processes(broker_pid: int) -> dict[int, str]:
    """pid -> role, for this Ray's processes (children of its raylets), the driver and the broker."""
    roles = {os.getpid(): "driver", broker_pid: "broker"}
    actors = live_actor_roles()
    for raylet, children in raylet_children():
        roles[raylet] = "raylet"
        for child in children:
            if child.pid in actors:
                roles[child.pid] = actors[child.pid]
            elif is_ray_worker(child):
                roles[child.pid] = "write tasks"
    return roles


def live_actor_roles() -> dict[int, str]:
    """pid -> `role_of_actor`, for this Ray's live actors."""
    import ray._private.state

    return {a["Pid"]: role_of_actor(a) for a in ray._private.state.actors().values()
            if a["State"] == "ALIVE" and a.get("Pid")}


def raylet_children() -> list[tuple[int, list[psutil.Process]]]:
    """Each of this Ray's raylets, with the processes it started (workers, agents)."""
    import ray._private.worker

    raylets = [info.process.pid for info in ray._private.worker._global_node.all_processes.get("raylet", [])]
    return [(raylet, psutil.Process(raylet).children(recursive=False)) for raylet in raylets]


def is_ray_worker(process: psutil.Process) -> bool:
    """A Python worker of Ray's (an actor's or a task's), not one of its agents."""
    try:
        command = process.cmdline()
    except psutil.Error:
        return False
    return "ray::" in " ".join(command[:1]) or "default_worker" in " ".join(command)


def is_jvm(process: psutil.Process) -> bool:
    """A Java process: Spark's driver JVM, or a Java worker of Ray's (RayDP's executors)."""
    try:
        return os.path.basename(process.cmdline()[0]) == "java"
    except (psutil.Error, IndexError):
        return False


def spark_write_roles() -> dict[int, str]:
    """pid -> role, for the processes of a Spark write on this Ray (one node): this driver; Spark's
    JVMs (its driver's, under this process, and RayDP's executors, Ray's Java workers); the
    actors, by `role_of_actor` (RayDP's master is an "other actor"); Ray's other Python workers,
    which run the fetch tasks; Ray's own daemons (the raylet, the GCS, the raylet's agents)."""
    import ray._private.worker

    me = psutil.Process()
    roles = {me.pid: "driver", **{p.pid: SPARK_JVMS for p in me.children(recursive=True) if is_jvm(p)}}
    roles.update({info.process.pid: RAY_DAEMONS
                  for info in ray._private.worker._global_node.all_processes.get("gcs_server", [])})
    actors = live_actor_roles()
    for raylet, children in raylet_children():
        roles[raylet] = RAY_DAEMONS
        for child in children:
            roles[child.pid] = (SPARK_JVMS if is_jvm(child) else actors.get(child.pid)
                                or (TASK_WORKERS if is_ray_worker(child) else RAY_DAEMONS))
    return roles


def cpu_now() -> dict[int, float]:
    """pid -> CPU-seconds so far, for every process of the machine."""
    return {process.pid: cpu_of(process.pid) for process in psutil.process_iter()}


def cpu_since(before: dict[int, float]) -> dict[str, float]:
    """CPU-seconds by role (`spark_write_roles`) since `before` (`cpu_now()` then); a process
    started since counts from 0, one ended since is not seen."""
    roles = spark_write_roles()
    return {k: round(v, 3) for k, v in sorted(by_role(roles, before, snapshot(roles)).items())}


def store_created() -> int | None:
    """Bytes ever created in the object stores of the cluster (Ray's store stats; needs grpcio)."""
    try:
        import ray
        from ray._private.internal_api import get_memory_info_reply, get_state_from_address

        state = get_state_from_address(ray.get_runtime_context().gcs_address)
        return int(get_memory_info_reply(state).store_stats.cumulative_created_bytes)
    except Exception:  # grpcio missing: say nothing rather than a wrong figure
        return None


def snapshot(roles: dict[int, str]) -> dict[int, float]:
    return {pid: cpu_of(pid) for pid in roles}


def by_role(roles: dict[int, str], before: dict[int, float], after: dict[int, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for pid, role in roles.items():
        out[role] = out.get(role, 0.0) + after.get(pid, 0.0) - before.get(pid, 0.0)
    return out


def dataset(rows: int) -> Any:
    import pyarrow as pa
    import ray

    blocks = [ray.put(pa.table({"value": pa.array([VALUE] * min(BLOCK_ROWS, rows - lo), pa.binary())}))
              for lo in range(0, rows, BLOCK_ROWS)]
    return ray.data.from_arrow_refs(blocks)


def topic(admin: Any) -> str:
    name = f"scaling-{uuid.uuid4().hex[:8]}"
    admin.create_topics({name: PARTITIONS})
    return name


def timed_write(write: Any, rows: int, broker_pid: int) -> dict[str, Any]:
    """One write: wall time, rows/s and CPU-seconds by role."""
    roles = processes(broker_pid)
    before = snapshot(roles)
    created = store_created()
    start = time.perf_counter()
    counts = write()
    wall = time.perf_counter() - start
    created_after = store_created()
    roles.update({p: r for p, r in processes(broker_pid).items() if p not in roles})  # workers started meanwhile
    cpu = by_role(roles, before, snapshot(roles))
    assert counts == {"delivered": rows, "failed": 0}, counts
    store = None if created is None or created_after is None else round((created_after - created) / rows, 1)
    return {"wall_s": round(wall, 3), "msg_per_s": round(rows / wall), "store_bytes_per_msg": store,
            "cpu_s": {k: round(v, 3) for k, v in cpu.items()}}


FIGURES: dict[str, dict[str, float]] = {}  # every summary of this run, by label, for `--out`


def summary(label: str, values: list[float], unit: str = "") -> str:
    """One figure's line (median, min, max of the runs), also kept in FIGURES."""
    FIGURES[label] = {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
                      "max": round(max(values), 4), "n": len(values)}
    return f"{label}: median {statistics.median(values):.4g}{unit} (min {min(values):.4g}, max {max(values):.4g}, n={len(values)})"


def write_figures(path: str, argv: list[str], module: str = "scaling") -> None:
    """The run's summaries as JSON, with the command and the day: what a report quotes from."""
    import datetime

    with open(path, "w") as out:
        json.dump({"command": f"python -m raykafka.benchmarks.{module} " + " ".join(argv),
                   "taken": datetime.date.today().isoformat(), "figures": FIGURES}, out, indent=1)
        out.write("\n")


def run_driver(args: argparse.Namespace, config: dict[str, Any], admin: Any, broker_pid: int) -> None:
    from raykafka.driver.producer import Producer
    from raykafka.spark_bridge.writer import write_dataset

    ds = dataset(args.rows).materialize()
    write_dataset(dataset(BLOCK_ROWS), topic(admin), config)  # starts the node writers, untimed
    node_runs = []
    for _ in range(args.runs):
        t = topic(admin)
        node_runs.append(timed_write(lambda t=t: write_dataset(ds, t, config), args.rows, broker_pid))
        print(json.dumps({"path": "node writers", **node_runs[-1]}), flush=True)
    funnel_runs = []
    with Producer(config) as producer:
        for _ in range(args.funnel_runs):
            t = topic(admin)
            funnel_runs.append(timed_write(lambda t=t: write_dataset(ds, t, producer=producer), args.rows,
                                           broker_pid))
            print(json.dumps({"path": "driver funnel", **funnel_runs[-1]}), flush=True)
    for label, runs in (("node writers", node_runs), ("driver funnel", funnel_runs)):
        if runs:
            print_stages(label, runs, args.rows)


def print_stages(label: str, runs: list[dict[str, Any]], rows: int) -> None:
    """The summaries of `timed_write` runs: rate, store bytes, CPU per message of each role, the broker's share."""
    print(summary(f"{label}: driver CPU per row", [r["cpu_s"].get("driver", 0) / rows * 1e6 for r in runs], " us"))
    print(summary(f"{label}: msg/s", [r["msg_per_s"] for r in runs]))
    if all(r["store_bytes_per_msg"] is not None for r in runs):
        print(summary(f"{label}: object-store bytes created per msg", [r["store_bytes_per_msg"] for r in runs]))
    roles = sorted({k for r in runs for k in r["cpu_s"]})
    for role in roles:
        print(summary(f"{label}: {role} CPU per msg", [r["cpu_s"].get(role, 0) / rows * 1e6 for r in runs], " us"))
    total = [sum(r["cpu_s"].values()) for r in runs]
    print(summary(f"{label}: all CPU per msg", [t / rows * 1e6 for t in total], " us"))
    print(summary(f"{label}: broker share of CPU", [r["cpu_s"].get("broker", 0) / t * 100
                                                     for r, t in zip(runs, total, strict=True)], " %"))


def run_sends(args: argparse.Namespace, config: dict[str, Any], admin: Any, broker_pid: int) -> None:
    """Per-message `send` at linger.ms=5, as the bench's send rows: with `--keyed`, 100 keys in
    turn (every hand-over spans all the partitions), else none (the sticky partitioner); with
    `--batch`, one `send_batch` of an Arrow table of the rows instead; with `--confluent`,
    confluent-kafka's `produce()` of the rows in the driver process (its CPU is the driver's)."""
    import pyarrow as pa

    from raykafka.app.bench.workload import KEYS
    from raykafka.driver.producer import Producer

    keys = KEYS if args.keyed else [None]
    if args.confluent:
        return run_confluent(args, config, admin, broker_pid)
    label = ("send_batch" if args.batch else "send") + (", keyed" if args.keyed else "")
    table = None
    if args.batch:
        columns = {"value": pa.array([VALUE] * args.rows, pa.binary())}
        if args.keyed:
            columns["key"] = pa.array([KEYS[i % len(KEYS)] for i in range(args.rows)], pa.binary())
        table = pa.table(columns)
    runs = []
    with Producer({**config, "acks": 1, "linger.ms": 5}) as producer:
        for _ in range(args.runs):
            t = topic(admin)
            assert producer.send_batch(t, [b"w"] * PARTITIONS, partitions=list(range(PARTITIONS))).result(60).ok

            def write(t: str = t) -> dict[str, int]:
                if table is not None:
                    result = producer.send_batch(t, table).result(300)
                    return {"delivered": result.delivered, "failed": result.failed}
                send, n = producer.send, len(keys)
                futures = [send(t, VALUE, key=keys[i % n]) for i in range(args.rows)]
                assert producer.flush(300) == 0
                failed = sum(1 for f in futures if f.exception() is not None)
                return {"delivered": args.rows - failed, "failed": failed}

            runs.append(timed_write(write, args.rows, broker_pid))
            print(json.dumps({"path": label, **runs[-1]}), flush=True)
    print_stages(label, runs, args.rows)


def run_confluent(args: argparse.Namespace, config: dict[str, Any], admin: Any, broker_pid: int) -> None:
    from confluent_kafka import Producer

    from raykafka.app.bench.clients_confluent import confluent_produce

    runs = []
    for _ in range(args.runs):
        t = topic(admin)
        producer = Producer({**config, "acks": 1, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
        producer.produce(t, b"w")
        producer.flush(30)

        def write(t: str = t, producer: Any = producer) -> dict[str, int]:
            confluent_produce(producer, t, VALUE, args.rows, [None])  # as the bench's confluent-kafka row
            return {"delivered": args.rows, "failed": 0}

        runs.append(timed_write(write, args.rows, broker_pid))
        print(json.dumps({"path": "confluent-kafka produce()", **runs[-1]}), flush=True)
    print_stages("confluent-kafka produce()", runs, args.rows)


def run_reads(args: argparse.Namespace, config: dict[str, Any], admin: Any, broker_pid: int) -> None:
    """A topic of `--rows` single-record batches (as the bench's Ray Data read rows), and one of
    5 × `--rows` records in 10,000-record batches, each read whole by `read_ranges` in one plain
    process (one connection), then split between two (as `read_dataset`'s two read tasks on two
    CPUs): wall time, the readers' CPU and the broker's."""
    import multiprocessing

    from raykafka.app.bench.clients_confluent import fill_topic
    from raykafka.spark_bridge.offsets import resolve_ranges

    for per_batch, rows in ((1, args.rows), (10_000, 5 * args.rows)):
        ranges = resolve_ranges(config, [fill_topic(config["bootstrap.servers"], admin, rows, 100, "none",
                                                    per_batch=per_batch)], "earliest", "latest")
        kind = "single-record batches" if per_batch == 1 else f"{per_batch:,}-record batches"
        for readers in (1, 2):
            walls, cpus, broker = [], [], []
            for _ in range(args.runs):
                with multiprocessing.get_context("spawn").Pool(readers) as pool:
                    pool.starmap(_read, [(config, [])] * readers)  # the readers' imports, untimed
                    broker_before = cpu_of(broker_pid)
                    start = time.perf_counter()
                    done = pool.starmap(_read, [(config, ranges[i::readers]) for i in range(readers)])
                    walls.append(time.perf_counter() - start)
                    broker.append(cpu_of(broker_pid) - broker_before)
                assert sum(n for n, _ in done) == rows, done
                cpus.append(sum(c for _, c in done))
                print(json.dumps({"topic": kind, "rows": rows, "readers": readers, "wall_s": round(walls[-1], 3),
                                  "cpu_s": round(cpus[-1], 3), "broker_cpu_s": round(broker[-1], 3)}), flush=True)
            label = f"{kind}, {readers} reader(s)"
            print(summary(f"{label}: wall", walls, " s"))
            print(summary(f"{label}: readers' CPU", cpus, " s"))
            print(summary(f"{label}: broker's CPU", broker, " s"))


def run_demo_write(args: argparse.Namespace, config: dict[str, Any]) -> int:
    """The demo's write, step by step, each run in a process of its own (a cold Ray, Spark and
    pool, as the demo starts them): Spark making the events and RayDP handing them to Ray; the
    first write (the pool of pipelines and the topic's stages start in it); the same rows again
    to a topic whose stages are up (the write alone). And, in one more cold process a run, Spark's
    job alone: the same events into Spark's noop sink, which writes nowhere (the floor under any
    writer's time in the demo; `spark_job_s` is the first process's Spark job alone, RayDP's
    Arrow conversion and cache, before its fetches); in another, the same events through
    `write_kafka`, timed whole (what the bridge adds is this less Spark's job alone); in another,
    write_kafka's steps with its pool of writers started in a thread before Spark's job, not after
    the hand-over (`early_pool_s`); and in three more, write_kafka's steps with a writer of one
    process a node (benchmarks/in_process_writer.py), started after the hand-over as write_kafka
    starts its pool (`in_process_write_s`), before Spark's job (`in_process_early_s`), and before
    Spark's job with each writer fetching its partitions from Spark itself, in place of RayDP's
    fetch tasks (`in_process_pull_s`). Spark's job alone and `write_kafka` whole also give the CPU
    each process spent in them, by role (`cpu_since`: Spark's JVMs, Ray's task workers, the node
    writer, each stage actor, Ray's daemons; not the broker's)."""
    import subprocess

    def once(*extra: str) -> dict[str, Any]:
        done = subprocess.run([sys.executable, "-m", "raykafka.benchmarks.scaling", "demo-write-once", "--rows",
                               str(args.rows), "--bootstrap", config["bootstrap.servers"], *extra],
                              capture_output=True, text=True, check=True)
        # the run's figures are its last line that starts so (Ray may print after it, at shutdown)
        taken = json.loads(next(line for line in reversed(done.stdout.splitlines()) if line.startswith('{"rows"')))
        print(json.dumps(taken), flush=True)
        return taken

    runs = [{**once(), **once("--spark-only"), **once("--write-kafka"), **once("--early-pool"), **once("--in-process"),
             **once("--in-process", "--early"), **once("--in-process", "--pull")} for _ in range(args.runs)]
    for step in ("spark_alone_s", "write_kafka_s", "early_pool_s", "in_process_write_s", "in_process_early_s",
                 "in_process_pull_s", "spark_to_ray_s", "spark_job_s", "first_write_s", "write_alone_s"):
        print(summary(f"demo write: {step}", [r[step] for r in runs], " s"))
    for what in ("spark_alone", "write_kafka"):  # the CPU of each process, as `cpu_since` tells it
        cpus = [r[f"{what}_cpu_s"] for r in runs]
        print(summary(f"demo write: {what} CPU: all", [sum(c.values()) for c in cpus], " s"))
        print(summary(f"demo write: {what} CPU: cores busy", [sum(c.values()) / r[f"{what}_s"]
                                                             for c, r in zip(cpus, runs, strict=True)]))
        for role in sorted({role for c in cpus for role in c}):
            print(summary(f"demo write: {what} CPU: {role}", [c.get(role, 0.0) for c in cpus], " s"))
    return 0


def demo_write_once(rows: int, bootstrap: str, spark_only: bool = False, write_kafka: bool = False,
                    in_process: bool = False, early: bool = False, pull: bool = False, early_pool: bool = False) -> int:
    import ray

    from raykafka.app.demo import demo_events
    from raykafka.driver.admin import Admin
    from raykafka.spark_bridge import from_spark
    from raykafka.spark_bridge.node_writers import POOLS
    from raykafka.spark_bridge.session import init_ray, init_spark, stop_spark
    from raykafka.spark_bridge.writer import write_dataset

    config = {"bootstrap.servers": bootstrap}
    init_ray(num_cpus=2)
    spark = init_spark("raykafka-demo-write")
    try:
        if spark_only:
            before, start = cpu_now(), time.perf_counter()
            demo_events(spark, rows).write.format("noop").mode("overwrite").save()
            wall = time.perf_counter() - start
            print(json.dumps({"rows": rows, "spark_alone_s": round(wall, 3),
                              "spark_alone_cpu_s": cpu_since(before)}), flush=True)
            return 0
        with Admin(config) as admin:
            first, again = topic(admin), topic(admin)
        if write_kafka:  # the public call, whole; and the CPU each process spent in it
            from raykafka.spark_bridge.writer import write_kafka as write

            before, start = cpu_now(), time.perf_counter()
            assert write(demo_events(spark, rows), first, config) == {"delivered": rows, "failed": 0}
            wall = time.perf_counter() - start
            print(json.dumps({"rows": rows, "write_kafka_s": round(wall, 3),
                              "write_kafka_cpu_s": cpu_since(before)}), flush=True)  # before the pool closes
            return 0
        if early_pool:  # write_kafka's steps, its pool of writers started in a thread before Spark's job
            from concurrent.futures import ThreadPoolExecutor

            from raykafka.spark_bridge.node_writers import write_refs

            start = time.perf_counter()
            with ThreadPoolExecutor(1) as starter:
                ahead = starter.submit(POOLS.acquire, config, 1)  # its processes start while Spark works
                events = demo_events(spark, rows)
                cached = from_spark.cache(events)
                try:
                    blocks = from_spark.fetched(from_spark.fetch(events, cached))
                    pool = ahead.result()
                    try:
                        result = write_refs(pool.routes(), first, blocks)
                    except BaseException:  # as write_kafka: a pool that failed is not kept
                        POOLS.discard(pool)
                        raise
                    POOLS.release(pool)
                finally:
                    from_spark.release(events, cached)
            assert result.counts() == {"delivered": rows, "failed": 0}, result
            print(json.dumps({"rows": rows, "early_pool_s": round(time.perf_counter() - start, 3)}), flush=True)
            return 0
        if in_process:  # write_kafka's steps, each node's writer running its producer's stages itself
            from raykafka.benchmarks.in_process_writer import pull_in_process, start_writers, write_in_process

            start = time.perf_counter()
            writers = start_writers(config) if early or pull else None  # their processes start while Spark works
            events = demo_events(spark, rows)
            cached = from_spark.cache(events)
            try:
                if pull:  # each writer fetches its partitions from Spark itself
                    result = pull_in_process(writers, from_spark.sources(cached), first)
                else:
                    blocks = from_spark.fetched(from_spark.fetch(events, cached))
                    result = write_in_process(writers or start_writers(config), blocks, first)
            finally:
                from_spark.release(events, cached)
            assert result.counts() == {"delivered": rows, "failed": 0}, result
            figure = "in_process_pull_s" if pull else "in_process_early_s" if early else "in_process_write_s"
            print(json.dumps({"rows": rows, figure: round(time.perf_counter() - start, 3)}), flush=True)
            return 0
        start = time.perf_counter()
        events = demo_events(spark, rows)
        cached = from_spark.cache(events)  # Spark's job, then the hand-over, as write_kafka takes them
        spark_job = time.perf_counter() - start
        ds = ray.data.from_arrow_refs([block.ref for block in from_spark.fetched(from_spark.fetch(events, cached))])
        made = time.perf_counter()
        assert write_dataset(ds, first, config) == {"delivered": rows, "failed": 0}
        first_write = time.perf_counter() - made
        write_dataset(ds.limit(1000), again, config)  # the topic's stages up, untimed
        start_again = time.perf_counter()
        assert write_dataset(ds, again, config) == {"delivered": rows, "failed": 0}
        alone = time.perf_counter() - start_again
        print(json.dumps({"rows": rows, "spark_to_ray_s": round(made - start, 3), "spark_job_s": round(spark_job, 3),
                          "first_write_s": round(first_write, 3),
                          "write_alone_s": round(alone, 3)}), flush=True)
    finally:
        POOLS.close_all()
        stop_spark()
        ray.shutdown()
    return 0


def _read(config: dict[str, Any], ranges: list[Any]) -> tuple[int, float]:
    from raykafka.spark_bridge.ray_data import read_ranges

    start = time.process_time()
    n = sum(table.num_rows for table in read_ranges(config, ranges))
    return n, time.process_time() - start


def run_pipelines(args: argparse.Namespace, config: dict[str, Any], admin: Any, broker_pid: int) -> None:
    from raykafka.spark_bridge.writer import write_dataset

    ds = dataset(args.rows).materialize()
    for n in (1, 2, 3):
        write_dataset(dataset(BLOCK_ROWS), topic(admin), config, pipelines_per_node=n)  # untimed start
        runs = []
        for _ in range(args.runs):
            t = topic(admin)
            runs.append(timed_write(lambda t=t, n=n: write_dataset(ds, t, config, pipelines_per_node=n),
                                    args.rows, broker_pid))
            print(json.dumps({"pipelines": n, **runs[-1]}), flush=True)
        print(summary(f"{n} pipeline(s): msg/s", [r["msg_per_s"] for r in runs]))
        print(summary(f"{n} pipeline(s): all CPU per msg", [sum(r["cpu_s"].values()) / args.rows * 1e6
                                                           for r in runs], " us"))


HOPS = WARM_PATH_CALLS  # actor calls of a warm message's path and its answer's (budget.WARM_PATH)
IDLE_S = 2.0  # how long the chain's actors are watched with nothing to do (plain, then compiled)


def run_hops(args: argparse.Namespace, config: dict[str, Any], admin: Any, broker_pid: int) -> None:
    """p50 and p99 of one message at a time through: our producer at linger.ms=0 (send → ack);
    a chain of HOPS trivial actors by plain Ray calls; the same HOPS as a Ray compiled graph. Each
    run compiles the graph anew and tears it down before the next run's send: a compiled graph's
    actors poll their channels while it runs nothing, and the CPU they take then (cores busy, CPU
    seconds a second) is measured too."""
    import ray
    from ray.dag import InputNode

    from raykafka.driver.producer import Producer

    @ray.remote(num_cpus=0)
    class Hop:
        def f(self, x: bytes) -> bytes:
            return x

        def pid(self) -> int:
            return os.getpid()

    chain = [Hop.remote() for _ in range(HOPS)]
    chain_processes = [psutil.Process(pid) for pid in ray.get([h.pid.remote() for h in chain])]

    def plain() -> None:
        ref: Any = VALUE
        for h in chain:
            ref = h.f.remote(ref)
        ray.get(ref)

    def compile_chain() -> Any:
        with InputNode() as given:
            node = given
            for h in chain:
                node = h.f.bind(node)
        return node.experimental_compile()

    def idle_cores() -> float:
        """CPU seconds a second the chain's processes take over IDLE_S of nothing to do."""
        def cpu() -> float:
            return sum(sum(p.cpu_times()[:2]) for p in chain_processes)

        before, start = cpu(), time.perf_counter()
        time.sleep(IDLE_S)  # the span measured: nothing happens in it, by design
        return (cpu() - before) / (time.perf_counter() - start)

    def timed(label: str, call: Any) -> tuple[float, float]:
        for _ in range(20):  # warm
            call()
        took = []
        for _ in range(args.rows):
            start = time.perf_counter()
            call()
            took.append(time.perf_counter() - start)
            time.sleep(0.005)
        took.sort()
        p50, p99 = took[len(took) // 2] * 1e3, took[min(len(took) - 1, len(took) * 99 // 100)] * 1e3
        print(json.dumps({"way": label, "p50_ms": round(p50, 3), "p99_ms": round(p99, 3)}), flush=True)
        return p50, p99

    ours, chained, compiled = ("raykafka send()->ack, idle, linger.ms=0", f"plain Ray calls, {HOPS} actors",
                               f"compiled graph, {HOPS} actors")
    found: dict[str, list[tuple[float, float]]] = {ours: [], chained: [], compiled: []}
    plain_idle, graph_idle = [], []
    name = topic(admin)
    with Producer({**config, "linger.ms": 0, "acks": 1}) as producer:
        for _ in range(args.runs):
            found[ours].append(timed(ours, lambda: producer.send(name, VALUE).result(30)))
            found[chained].append(timed(chained, plain))
            plain_idle.append(idle_cores())
            graph = compile_chain()
            try:
                ray.get(graph.execute(VALUE))
                graph_idle.append(idle_cores())
                found[compiled].append(timed(compiled, lambda graph=graph: ray.get(graph.execute(VALUE))))
            finally:
                graph.teardown()
    for label, runs in found.items():
        print(summary(f"{label}: p50", [r[0] for r in runs], " ms"))
        print(summary(f"{label}: p99", [r[1] for r in runs], " ms"))
    print(summary(f"{chained}: cores busy while idle", plain_idle))
    print(summary(f"{compiled}: cores busy while idle", graph_idle))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["driver", "pipelines", "nodes", "sends", "reads", "demo-write",
                                         "demo-write-once", "hops"])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--funnel-runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=0, help="with `nodes`: only this many nodes")
    parser.add_argument("--keyed", action="store_true", help="with `sends`: 100 keys in turn")
    parser.add_argument("--batch", action="store_true", help="with `sends`: one send_batch of an Arrow table")
    parser.add_argument("--confluent", action="store_true", help="with `sends`: confluent-kafka's produce()")
    parser.add_argument("--bootstrap", help="with `demo-write-once`: the broker to write to")
    parser.add_argument("--spark-only", action="store_true",
                        help="with `demo-write-once`: Spark's job alone, into Spark's noop sink")
    parser.add_argument("--write-kafka", action="store_true",
                        help="with `demo-write-once`: the same events through `write_kafka`, timed whole")
    parser.add_argument("--early-pool", action="store_true",
                        help="with `demo-write-once`: write_kafka's steps, its pool of writers started in a thread "
                             "before Spark's job, timed whole")
    parser.add_argument("--in-process", action="store_true",
                        help="with `demo-write-once`: write_kafka's steps, each node's writer running its "
                             "producer's stages in its own process (benchmarks/in_process_writer.py), timed whole")
    parser.add_argument("--early", action="store_true",
                        help="with `--in-process`: the writers asked to start before Spark's job, not after the hand-over")
    parser.add_argument("--pull", action="store_true",
                        help="with `--in-process`: started early, and each writer fetches its Spark partitions "
                             "itself (no fetch tasks)")
    parser.add_argument("--out", help="also write the run's summaries here, as JSON (`hops`: SCALING.hops.json, "
                                      "which BENCHMARKS.md's latency profile quotes)")
    args = parser.parse_args()
    code = run(args)
    if args.out:
        write_figures(args.out, [a for a in sys.argv[1:] if not a.startswith("--out")
                                 and a != args.out])
    return code


def run(args: argparse.Namespace) -> int:
    if args.what == "demo-write-once":
        return demo_write_once(args.rows, args.bootstrap, args.spark_only, args.write_kafka, args.in_process,
                               args.early, args.pull, args.early_pool)

    import ray

    from raykafka.driver.admin import Admin
    from raykafka.driver.embedded_broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        config = {"bootstrap.servers": broker.bootstrap}
        broker_pid = broker.process.pid
        if args.what == "nodes":
            return run_nodes(args, config, broker_pid)
        if args.what == "demo-write":
            return run_demo_write(args, config)
        if args.what == "reads":
            with Admin(config) as admin:
                run_reads(args, config, admin, broker_pid)
            return 0
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        with Admin(config) as admin:
            {"driver": run_driver, "pipelines": run_pipelines, "sends": run_sends,
             "hops": run_hops}[args.what](args, config, admin, broker_pid)
        from raykafka.spark_bridge.node_writers import POOLS

        POOLS.close_all()
        ray.shutdown()
    return 0


def run_nodes(args: argparse.Namespace, config: dict[str, Any], broker_pid: int) -> int:
    """1, 2 and 3 nodes of one CPU each, all on this machine's 2 cores."""
    import ray
    from ray.cluster_utils import Cluster

    from raykafka.driver.admin import Admin
    from raykafka.spark_bridge.node_writers import POOLS
    from raykafka.spark_bridge.writer import write_dataset

    for n in ([args.nodes] if args.nodes else [1, 2, 3]):
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        for _ in range(n - 1):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        try:
            with Admin(config) as admin:
                # blocks made by tasks spread over the nodes, so each node holds some
                ds = ray.data.range(args.rows, override_num_blocks=max(1, args.rows // BLOCK_ROWS)).map_batches(
                    _values, batch_format="pyarrow", batch_size=None).materialize()
                write_dataset(dataset(BLOCK_ROWS), topic(admin), config)  # untimed start
                runs = []
                for _ in range(args.runs):
                    t = topic(admin)
                    start = time.perf_counter()
                    counts = write_dataset(ds, t, config)
                    wall = time.perf_counter() - start
                    assert counts == {"delivered": args.rows, "failed": 0}, counts
                    runs.append(args.rows / wall)
                    print(json.dumps({"nodes": n, "wall_s": round(wall, 3), "msg_per_s": round(args.rows / wall)}),
                          flush=True)
                print(summary(f"{n} node(s): msg/s", runs))
        finally:
            POOLS.close_all()
            ray.shutdown()
            cluster.shutdown()
    return 0


def _values(batch: Any) -> Any:
    import pyarrow as pa

    return pa.table({"value": pa.array([VALUE] * batch.num_rows, pa.binary())})


if __name__ == "__main__":
    sys.exit(main())
