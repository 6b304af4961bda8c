"""A node writer whose producer's stages run in its own process: the experiment behind a
proposal to DESIGN.md's process budget, for the Spark write (issue: the Spark path).

`write_kafka` hands each block to a `NodeWriter` (spark_bridge/node_writers.py), an actor that
owns a `Producer`, whose stages are five more actors: six processes a node to start before the
first row goes. `InProcessWriter` takes the same calls (`write`, `where`, `close`, so that
`node_writers.write_refs` drives it unchanged) and hosts the same stages' Ray-free states in its
own process instead, through `driver/local_pipeline.py`: one process a node.

Called by `benchmarks/scaling.py` (`demo-write`), which times it beside `write_kafka`, each in a
fresh process, on the demo's events: `write_in_process` after RayDP's hand-over, as
`write_kafka` takes its pool; `pull_in_process`, each writer fetching its Spark partitions from
the executors itself.

It is not a public path, and is not built for a bad day: the in-process pipeline has no
transactions and heals nothing; a writer is not restarted when it dies (with one writer a node,
`write_refs` then has no other to send the block to, and the write fails after its attempts),
and the pull variant sends nothing again; a topic's look-up fails its rows at once instead of
holding them up to `delivery.timeout.ms`. It runs one block at a time (`WRITER_CONCURRENCY`),
where a `NodeWriter` runs two: if anything, it is the slower shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..driver.local_pipeline import LocalPipeline
from ..spark_bridge.from_spark import fetch_partition
from ..spark_bridge.node_writers import BlockOutcome, Routes, block_table, write_nodes, write_refs
from ..spark_bridge.sink import WriteResult, count_causes

WRITER_CONCURRENCY = 1  # blocks a writer takes at once: all its pipeline's outcomes are then that block's
OUTCOME_POLL = 0.5  # s, the longest one wait for the pipeline's outcomes
END_GRACE = 30.0  # s past delivery.timeout.ms for a block's last outcome, before the write says it never came
CLOSE_WAIT = 60.0  # s for the writers to close before they are killed anyway


class InProcessWriter:
    """A node's writer and its producer's stages, in one process (see the module's docstring)."""

    def __init__(self, config: Mapping[str, Any]):
        self.node_id = ray.get_runtime_context().get_node_id()
        self.pipeline = LocalPipeline(config)
        self.end_wait = self.pipeline.config["delivery.timeout.ms"] / 1000 + END_GRACE

    def write(self, topic: str | None, block: Any, rows: tuple[int, int] | None = None,
              key: Any = None) -> BlockOutcome:
        """`block`'s rows (those of `rows`, if given) through the pipeline, once all have ended."""
        outcomes = self.pipeline.send_batch(topic, block_table(block, topic, rows))
        deadline = time.monotonic() + self.end_wait
        while self.pipeline.pending():  # one block at a time: every outcome is this block's
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.pipeline.pending()} rows of a block had no outcome in {self.end_wait:.0f} s")
            outcomes += self.pipeline.wait_outcomes(OUTCOME_POLL)
        errors = [o.error for o in outcomes for _ in o.ids if o.error is not None]
        delivered = sum(len(o.ids) for o in outcomes if o.error is None)
        return BlockOutcome(delivered, len(errors), count_causes(errors), self.node_id)

    def write_partition(self, topic: str, source: tuple) -> BlockOutcome:
        """A Spark partition fetched by this writer itself from the executor that caches it
        (`source`: its `from_spark.sources` entry), then written: no fetch task, and no second
        copy of its table in Ray's object store."""
        table, _ = fetch_partition(*source)
        return self.write(topic, table)

    def where(self) -> tuple[str, str]:
        return self.node_id, "in-process"

    def close(self) -> None:
        self.pipeline.close()


Writers = Mapping[str, tuple[Any, ...]]  # node id -> its writers, as `node_writers.Routes` takes them


def start_writers(config: Mapping[str, Any]) -> Writers:
    """One `InProcessWriter` per node with CPUs, asked to start (Ray starts its process in the
    background: this returns at once)."""
    actor = ray.remote(num_cpus=0, max_concurrency=WRITER_CONCURRENCY)(InProcessWriter)
    return {node: (actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True)).remote(
        dict(config)),) for node in write_nodes()}


def write_in_process(writers: Writers, blocks: Any, topic: str) -> WriteResult:
    """`blocks` (`BlockRef`s) through `writers` (`start_writers`), which are stopped after."""
    return _stopped_after(writers, lambda handles: write_refs(Routes(writers), topic, blocks))


def pull_in_process(writers: Writers, sources: list[tuple], topic: str) -> WriteResult:
    """Each Spark partition (its `from_spark.sources` entry) fetched and written by one of
    `writers`, in turn; the writers are stopped after. (The experiment runs on one node: where
    the executor is does not choose the writer.)"""
    def write(handles: list[Any]) -> WriteResult:
        result = WriteResult()
        outcomes = [handles[i % len(handles)].write_partition.remote(topic, source)
                    for i, source in enumerate(sources)]
        for outcome in ray.get(outcomes):
            result.add_outcome(outcome)
        return result

    return _stopped_after(writers, write)


def _stopped_after(writers: Writers, write: Callable[[list[Any]], WriteResult]) -> WriteResult:
    """`write(handles)` once every writer answers; then every writer closed (for up to
    `CLOSE_WAIT` s) and killed, whatever happened."""
    handles = [w for ws in writers.values() for w in ws]
    try:
        ray.get([w.where.remote() for w in handles])
        return write(handles)
    finally:
        ray.wait([w.close.remote() for w in handles], num_returns=len(handles), timeout=CLOSE_WAIT)
        for writer in handles:
            ray.kill(writer)
