"""`raykafka demo`: the main job on embedded defaults.

It starts tansu, local Ray and Spark through RayDP; generates a DataFrame of synthetic
purchase events; writes it to Kafka through the producer actors; reads it back through a
consumer group of Ray actors into Spark; aggregates; checks every count against what was
generated; and stops everything it started.

Its own lines go to stdout, its progress bars (tqdm, on a terminal only) to stderr; Ray's and
Spark's output goes to a log file (`quiet_stderr`) unless `-v`. After its summary it says where
the time of each side went (`demo_phases.DemoPhases`, from the write's `WriteMarks` and the
collector's first and last batch); `plot_rates` draws the write and read rates over time, and
those phases under them (`--plot`, with matplotlib from the bench extra), from the same figures.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from ..actors.options import remote_class
from .args import counted
from .demo_phases import READ_STEPS, WRITE_STEPS, DemoPhases, Side

KINDS = ("view", "cart", "purchase", "refund")
GROUP_SESSION_MS = 6000
"""The read's group session: tansu completes a JoinGroup only after half the member's session
timeout (22.5 s at Kafka's default of 45 s), so the group forms in about 3 s more than its
members take to start. 6 s is the least a Kafka broker takes (`group.min.session.timeout.ms`)."""
GROUP_HEARTBEAT_MS = 2000  # a third of the session, as Kafka advises


class Timeline:
    """Rows done over time, per side (write, read), for the rates plot (`plot_rates`); seconds
    since it began, on the monotonic clock (`now`), or from a time.time() that another process
    noted (`at`: the writers' and the collector's marks)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.points: dict[str, list[tuple[float, int]]] = {}

    def now(self) -> float:
        return time.monotonic() - self.started

    def at(self, wall: float | None) -> float | None:
        return None if wall is None else wall - self.started_wall

    def mark(self, side: str, done: int) -> None:
        self.points.setdefault(side, []).append((self.now(), done))


class Progress:
    """A tqdm bar on a terminal (off when the stream is not one: CI logs stay readable); every
    step also marked on the timeline."""

    def __init__(self, label: str, total: int, timeline: Timeline, stream: Any = sys.stderr):
        from tqdm import tqdm

        self.label, self.done, self.timeline = label, 0, timeline
        self.bar = tqdm(total=total, desc=f"{label:<6}", unit=" rows", unit_scale=True, file=stream,
                        disable=not stream.isatty(), leave=False, dynamic_ncols=True)
        timeline.mark(label, 0)

    def add(self, n: int) -> None:
        self.done += n
        self.bar.update(n)
        self.timeline.mark(self.label, self.done)

    def close(self) -> None:
        self.bar.close()


@contextmanager
def quiet_stderr(verbose: bool) -> Iterator[tuple[Any, Path | None]]:
    """Unless `verbose`: what goes to file descriptor 2 (Ray's and Spark's start-up notes, the
    JVMs' logs, Python's logging) goes to a log file instead, for the whole run, so that the
    demo's own lines stand alone. Yields a stream on the real stderr (for progress bars) and
    the log's path (None when verbose)."""
    if verbose:
        yield sys.stderr, None
        return
    path = Path(tempfile.mkdtemp(prefix="raykafka-demo-")) / "demo.log"
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab", buffering=0) as log_file:
        os.dup2(log_file.fileno(), 2)
    real = os.fdopen(os.dup(saved), "w", buffering=1)
    try:
        yield real, path
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        real.close()


def draw_rates(timeline: Timeline, phases: DemoPhases) -> Any:
    """A figure: above, the write and read rates (rows/s) over the demo's time line, each side's
    legend its overall rate; below, each side's phases as spans of that line, labelled with
    their seconds and share. Every figure in it is read from `phases`, as the text's are."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (rates_ax, spans_ax) = plt.subplots(2, 1, figsize=(9, 6), sharex=True,
                                             gridspec_kw={"height_ratios": [3, 2]})
    sides = {side.name: side for side in phases.sides}
    for name, points in timeline.points.items():
        t, done = (np.asarray(v, dtype=float) for v in zip(*points, strict=True))
        if len(t) < 2 or t[-1] <= t[0] or name not in sides:
            continue
        step = max((t[-1] - t[0]) / 40, 0.25)  # about 40 points a side, at least 0.25 s apart
        edges = np.arange(t[0], t[-1] + step, step)
        rates = np.diff(np.interp(edges, t, done)) / step
        rates_ax.step(edges[1:], rates, where="pre", label=sides[name].legend())
    rates_ax.set_ylabel("rows/s")
    rates_ax.set_title("raykafka demo: Spark → Kafka (write), Kafka → consumer group (read)")
    rates_ax.legend()
    rates_ax.grid(alpha=0.3)

    colours = plt.get_cmap("tab10").colors
    lanes = {side.name: len(phases.sides) - 1 - i for i, side in enumerate(phases.sides)}  # the write on top
    colour = 0  # one per phase, across the sides
    for side in phases.sides:
        for phase in side.phases:
            spans_ax.broken_barh([(phase.start, phase.seconds)], (lanes[side.name] - 0.35, 0.7),
                                 facecolors=colours[colour % len(colours)], edgecolor="white", label=side.label(phase))
            colour += 1
    spans_ax.set_yticks([lanes[side.name] for side in phases.sides],
                        [f"{side.name} {side.seconds:.2f}s" for side in phases.sides])
    spans_ax.set_xlabel("seconds since the write began")
    spans_ax.grid(axis="x", alpha=0.3)
    spans_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    fig.tight_layout()
    return fig


def plot_rates(timeline: Timeline, phases: DemoPhases, path: Path) -> Path:
    """`draw_rates` as a PNG at `path`."""
    import matplotlib.pyplot as plt

    fig = draw_rates(timeline, phases)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


class BatchCollector:
    """Receives the group members' batches; keeps one copy per (partition, offset).

    Members call `add` and wait for it before their batch counts as processed, so a batch is
    marked (and its offset committed) only once it is safe here: at-least-once delivery, with
    duplicates after a rebalance dropped by offset. It notes when (time.time()) the first batch
    of new rows came and when the last new rows were kept: the read's phases.
    """

    def __init__(self) -> None:
        import numpy  # noqa: F401 - loaded now, while the group forms, not when the first batch comes
        import pyarrow  # noqa: F401 - (a second and more on a busy node: it was read as the group's time)

        self.refs: list[Any] = []
        self.seen: dict[int, set[int]] = {}
        self.rows = 0
        self.duplicates = 0
        self.first_at: float | None = None
        self.last_at: float | None = None

    def add(self, batch: Any) -> int:
        import numpy as np
        import pyarrow as pa

        came = time.time()
        partition = batch.column("partition")[0].as_py()
        offsets = batch.column("offset").to_numpy()
        seen = self.seen.setdefault(partition, set())
        fresh = np.fromiter((o not in seen for o in offsets.tolist()), bool, len(offsets))
        self.duplicates += int((~fresh).sum())
        if fresh.any():
            kept = batch.filter(pa.array(fresh)) if not fresh.all() else batch
            seen.update(offsets[fresh].tolist())
            self.refs.append(ray.put(pa.Table.from_batches([kept])))
            self.rows += kept.num_rows
            self.last_at = time.time()
            if self.first_at is None:
                self.first_at = came
        return self.rows

    def count(self) -> tuple[int, int]:
        return self.rows, self.duplicates

    def times(self) -> tuple[float | None, float | None]:
        """When the first batch of new rows came, and when the last new rows were kept
        (time.time()); None before any came."""
        return self.first_at, self.last_at

    def tables(self) -> list[Any]:
        return self.refs


@dataclass
class DemoReport:
    rows: int
    delivered: int
    consumed: int
    duplicates_dropped: int
    aggregates: list[tuple[str, int, int]]
    timeline: Timeline
    phases: DemoPhases  # each side's total, rate and phases: what the text and the plot show


def expected_aggregates(rows: int) -> dict[str, tuple[int, int]]:
    """What the aggregation must find, computed from the generator's formula alone."""
    import numpy as np

    ids = np.arange(rows, dtype=np.int64)
    kinds = ids % len(KINDS)
    amounts = ids % 97
    return {KINDS[k]: (int((kinds == k).sum()), int(amounts[kinds == k].sum())) for k in range(len(KINDS))}


def write_line(write: Side, failed: int) -> str:
    """The demo's line for the write: rows delivered and failed, time and rate (`write`, the
    figures the plot shows too)."""
    return (f"write    {write.rows:,} delivered, {failed} failed through the producer actors in "
            f"{write.seconds:.1f}s ({write.rate_figure})")


def read_line(read: Side, members: int, duplicates: int) -> str:
    """The demo's line for the group's read: rows, members, time, rate (`read`, the figures the
    plot shows too), and the rows a member was handed again (after a rebalance), which the
    collector counted once."""
    again = ("no row redelivered" if duplicates == 0
             else f"{counted(duplicates, 'row')} redelivered after a rebalance, dropped as duplicates")
    return (f"read     {read.rows:,} rows through a consumer group of {members} Ray actors in "
            f"{read.seconds:.1f}s ({read.rate_figure}; {again})")


def demo_events(spark: Any, rows: int) -> Any:
    """The demo's events, made by Spark: a key of 1,000 users, a JSON value, one header."""
    return spark.range(0, rows).selectExpr(
        "cast(id % 1000 as string) as key",
        f"to_json(named_struct('id', id, 'user', id % 1000, 'amount', id % 97, "
        f"'kind', element_at(array({', '.join(repr(k) for k in KINDS)}), cast(id % {len(KINDS)} as int) + 1)))"
        " as value",
        "array(named_struct('key', 'source', 'value', cast('demo' as binary))) as headers")


def aggregate(spark: Any, df: Any) -> list[tuple[str, int, int]]:
    """The demo's Spark SQL over what the group read: (kind, count, sum of amounts) by kind."""
    view = f"demo_events_{uuid.uuid4().hex[:8]}"  # one per job: a session may run several
    df.createOrReplaceTempView(view)
    try:
        rows = spark.sql(f"""
            SELECT get_json_object(CAST(value AS STRING), '$.kind') AS kind,
                   COUNT(*) AS n,
                   SUM(CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT)) AS amount
            FROM {view} GROUP BY kind ORDER BY kind""").collect()
    finally:
        spark.catalog.dropTempView(view)
    return [(r["kind"], int(r["n"]), int(r["amount"])) for r in rows]


def run_demo(rows: int = 1_000_000, partitions: int = 6, members: int = 2, out: Any = sys.stdout,
             progress_stream: Any = sys.stderr) -> DemoReport:
    """The demo as `raykafka demo` runs it: its own tansu, local Ray and Spark session, the job
    (`demo_job`) on them, then everything it started stopped."""
    from ..driver.embedded_broker import EmbeddedBroker
    from ..spark_bridge.producer_cache import PRODUCERS
    from ..spark_bridge.session import init_ray, init_spark, stop_spark

    with EmbeddedBroker() as broker:
        print(f"broker   tansu on {broker.bootstrap}", file=out, flush=True)
        init_ray(num_cpus=2)
        spark = init_spark("raykafka-demo")
        try:
            return demo_job(spark, {"bootstrap.servers": broker.bootstrap}, rows, partitions, members,
                            out=out, progress_stream=progress_stream)
        finally:
            PRODUCERS.close_all()  # the write's cached producer, while Ray is still up
            stop_spark()
            ray.shutdown()


def demo_job(spark: Any, config: dict[str, Any], rows: int, partitions: int = 6, members: int = 2,
             topic: str = "demo-events", group_id: str = "raykafka-demo", out: Any = sys.stdout,
             progress_stream: Any = sys.stderr) -> DemoReport:
    """The demo's job on a running broker (`config`), Ray and Spark session, which it leaves
    running: creates `topic`, writes the events to it, reads them back through a group
    `group_id` of `members` Ray actors into Spark, aggregates, and checks every count
    (AssertionError when one is wrong). Its collector actor is gone when it returns."""
    from ..driver.admin import Admin
    from ..driver.consumer_group import ConsumerGroup
    from ..spark_bridge import write_kafka
    from ..spark_bridge.sink import WriteMarks
    from ..spark_bridge.to_spark import tables_to_spark

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    with Admin(config) as admin:
        admin.create_topics({topic: partitions})
    say(f"spark    RayDP session up; generating {rows:,} events")
    events = demo_events(spark, rows)

    timeline = Timeline()
    bar = Progress("write", rows, timeline, progress_stream)
    marks = WriteMarks()
    started = timeline.now()
    counts = write_kafka(events, topic, config, on_progress=bar.add, marks=marks)
    write = Side.of("write", counts["delivered"], started, timeline.now(), WRITE_STEPS,
                    [timeline.at(m) for m in (marks.spark_done, marks.handed_over, marks.writers_up,
                                              marks.first_acked, marks.written)])
    bar.close()
    say(write_line(write, counts["failed"]))

    collector = remote_class(BatchCollector, "demo_collector").remote()

    def handle(batch: Any) -> None:
        ray.get(collector.add.remote(batch))

    try:
        bar = Progress("read", rows, timeline, progress_stream)
        started = timeline.now()
        group_config = {**config, "group.id": group_id, "auto.offset.reset": "earliest",
                        "session.timeout.ms": GROUP_SESSION_MS, "heartbeat.interval.ms": GROUP_HEARTBEAT_MS}
        with ConsumerGroup(group_config, [topic], handle, members=members):
            seen = 0
            while seen < rows:
                now, _ = ray.get(collector.count.remote())
                bar.add(now - seen)
                seen = now
                if seen < rows:
                    time.sleep(0.2)  # polling a counter for the bar; no event to await
                    if timeline.now() - started > 600:
                        raise TimeoutError(f"the group consumed {seen:,} of {rows:,} rows in 600 s")
        ended = timeline.now()
        bar.close()
        consumed, duplicates = ray.get(collector.count.remote())
        first, last = ray.get(collector.times.remote())
        read = Side.of("read", consumed, started, ended, READ_STEPS, [timeline.at(first), timeline.at(last)])
        say(read_line(read, members, duplicates))
        aggregates = aggregate(spark, tables_to_spark(spark, ray.get(collector.tables.remote())))
    finally:
        ray.kill(collector)  # after Spark read its tables: the collector owns them
    say("spark    SELECT kind, COUNT(*), SUM(amount) FROM events GROUP BY kind")
    for kind, n, amount in aggregates:
        say(f"           {kind:<9} {n:>10,} {amount:>14,}")
    expected = expected_aggregates(rows)
    got = {kind: (n, amount) for kind, n, amount in aggregates}
    if got != expected or consumed != rows or counts["delivered"] != rows:
        raise AssertionError(f"demo counts are wrong: got {got}, expected {expected}")
    say("check    every count matches what was generated")
    return DemoReport(rows, counts["delivered"], consumed, duplicates, aggregates, timeline, DemoPhases(write, read))
