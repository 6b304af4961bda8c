"""DataFrames and Datasets into Kafka through the producer actors.

A Spark DataFrame with Spark's Kafka sink columns (`value` required; `key`, `topic`,
`partition`, `headers` optional; string or binary; a `timestamp` too, as `send_batch` takes;
any other column refused: `producer_input.check_write_columns`) is cached in Spark as Arrow
batches by RayDP's JVM side and fetched into Ray's object store, a block per Spark partition
(`from_spark`). Blocks go whole, by reference, to a producer pipeline on the node that holds each
(`node_writers`): `write_dataset` hands each block to a writer of its node itself, and
`ray_data.KafkaDatasink` does it from Ray Data's write tasks. No row passes through the driver
and no Python call is made per row: the driver only starts the pipelines (kept for the next
write with the same config, as Spark keeps its Kafka sink's producers), hands on references and
sums the counts. The write fails loudly, naming the first causes, if any row failed.

Given a `producer` of its own, a write goes through that one pipeline instead, from the driver
(`write_blocks`): every block then passes through the driver process.

Order: within a block, rows keep their order per partition (per key); there is none across
blocks, as Spark's Kafka sink promises none across tasks.

`marks` (a `WriteMarks`, optional): the write notes when it passed its steps (Spark's job done,
the hand-over done, the writers up, the first message acknowledged, the last block's outcome in), for a caller
that shows where the time went (`raykafka demo`). A clock read per step and per block; nothing
else about the write changes.

`exactly_once=True` (off by default): every block is written in a transaction of its own by a
transactional writer (see `node_writers`), so a read_committed reader sees each row once, even
when a writer died mid-block and the block was sent again. `transactional.id` in the config, if
given, is the prefix of the writers' transactional ids.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import ray

from ..wire.config import parse_config
from . import from_spark
from .node_writers import POOLS, BlockRef, PoolKind, blocks_of, write_refs
from .producer_cache import PRODUCERS
from .quiet_executions import quietly
from .sink import KafkaWriteError, WriteMarks, WriteResult, check_exactly_once, check_sink_columns, sink_table

log = logging.getLogger("raykafka.spark_bridge")

# Ray Data's write tasks: Ray's default scheduling puts a task where most of its input is (Ray
# Data would SPREAD them), so a block is written by the pipeline of the node that holds it
WRITE_TASKS = {"scheduling_strategy": "DEFAULT"}


def _check_target(config: Mapping[str, Any] | None, producer: Any) -> None:
    """Exactly one of: a config (the producer cached for it is used), or an open producer."""
    if config is None and producer is None:
        raise ValueError("config: needs at least bootstrap.servers")
    if config is not None and producer is not None:
        raise ValueError("give config (the producer cached for it is used) or producer (an open one), not both")


def write_blocks(blocks: Iterable[Any], topic: str | None, config: Mapping[str, Any] | None,
                 on_progress: Any = None, producer: Any = None) -> dict[str, int]:
    """Send every block through one producer; return the delivered/failed counts.

    With `config`, the write uses the producer cached for that config (`producer_cache`),
    started by the first write that needs it and kept for the next. A `producer` given is used
    and left open as it is."""
    _check_target(config, producer)
    check_exactly_once(False, config, producer)
    cached = producer is None
    if cached:
        producer = PRODUCERS.acquire(config)
    result = WriteResult()
    try:
        futures = []
        for block in blocks:  # a block larger than buffer.memory allows goes in slices (send_batch)
            futures.append(producer.send_batch(topic, sink_table(block, topic)))
        for future in futures:
            batch_result = future.result()
            result.add(batch_result)
            if on_progress is not None:
                on_progress(batch_result.delivered + batch_result.failed)
    except (TypeError, ValueError):  # the input's mistake: the pipeline is as good as before
        if cached:
            PRODUCERS.release(producer)
        raise
    except BaseException:  # the pipeline failed: the next write gets a new one
        if cached:
            PRODUCERS.discard(producer)
        raise
    if cached:
        PRODUCERS.release(producer)
    if result.failed:
        raise KafkaWriteError(result)
    return result.counts()


def write_dataset(ds: Any, topic: str | None, config: Mapping[str, Any] | None = None, on_progress: Any = None,
                  producer: Any = None, pipelines_per_node: int = 1, exactly_once: bool = False,
                  marks: WriteMarks | None = None) -> dict[str, int]:
    """A Ray Dataset with Kafka sink columns into Kafka; returns {"delivered", "failed"}.

    With `config`: each block is handed, by reference, to a pipeline on the node that holds it
    (`pipelines_per_node` on each node, kept for the next write with this config); the driver
    touches no row. With `producer`: through that one pipeline, from the driver, which it leaves
    open. `on_progress(rows)` is called as blocks end. `exactly_once`: each block in a
    transaction of its own (see the module's docstring). `marks`: when the writers were up, the
    first acknowledgement and the last outcome noted there (through the node writers only)."""
    _check_target(config, producer)
    check_exactly_once(exactly_once, config, producer)
    if producer is not None:
        blocks = quietly(ds).iter_batches(batch_format="pyarrow", batch_size=None, prefetch_batches=2)
        return write_blocks(blocks, topic, None, on_progress, producer)
    kind = _pool_kind(pipelines_per_node, exactly_once)
    blocks = blocks_of(quietly(ds).iter_internal_ref_bundles())
    return _write_through(POOLS.acquire(config, kind), blocks, topic, on_progress, exactly_once, marks)


def _pool_kind(pipelines_per_node: int, exactly_once: bool) -> Any:
    """The writer pool a write with these options takes from `POOLS` (its variant there)."""
    if type(pipelines_per_node) is not int or pipelines_per_node < 1:
        raise ValueError(f"pipelines_per_node must be an int of at least 1, not {pipelines_per_node!r}")
    return PoolKind(pipelines_per_node, True) if exactly_once else pipelines_per_node


def _write_through(pool: Any, blocks: Iterable[BlockRef], topic: str | None, on_progress: Any, exactly_once: bool,
                   marks: WriteMarks | None) -> dict[str, int]:
    """`blocks` through the node writers of `pool` (acquired from `POOLS`, handed back here)."""
    try:
        pool.cover_nodes()  # nodes that joined since the pool was built
        if marks is not None:
            marks.writers_up = time.time()
        progress = None if on_progress is None else (lambda o: on_progress(o.delivered + o.failed))
        result = write_refs(pool.routes(), topic, blocks, progress, exactly_once)
        if marks is not None:
            marks.first_acked, marks.written = result.first_acked, time.time()
    except (TypeError, ValueError):  # the input's mistake: the pipelines are as good as before
        POOLS.release(pool)
        raise
    except BaseException:  # the pipelines failed: the next write gets new ones
        POOLS.discard(pool)
        raise
    POOLS.release(pool)
    if result.failed:
        raise KafkaWriteError(result)
    return result.counts()


def write_kafka(df: Any, topic: str | None = None, config: Mapping[str, Any] | None = None,
                on_progress: Any = None, producer: Any = None, pipelines_per_node: int = 1,
                exactly_once: bool = False, marks: WriteMarks | None = None) -> dict[str, int]:
    """A Spark DataFrame with Kafka sink columns into Kafka; returns {"delivered", "failed"}.

    The DataFrame's blocks are written where they are, each node's by a pipeline on that node
    (`pipelines_per_node` of them; see `write_dataset`). `producer`: a `raykafka.driver.Producer`
    to write through from the driver instead, and leave open. `exactly_once`: each block in a
    transaction of its own, read once by read_committed readers (see the module's docstring).
    `marks`: a `WriteMarks` the write fills in as it passes its steps."""

    _check_target(config, producer)
    check_exactly_once(exactly_once, config, producer)
    columns = [f.name for f in df.schema.fields]
    if "value" not in columns:
        raise ValueError(f"a Kafka sink needs a 'value' column; the DataFrame has {columns}")
    if topic is None and "topic" not in columns:
        raise ValueError("topic: give a topic, or a 'topic' column")
    check_sink_columns(columns)
    if producer is None:
        parse_config(config, role="write")  # a bad key fails here, before Spark's job; an unread one warns
        kind = _pool_kind(pipelines_per_node, exactly_once)
    cached = None
    try:
        cached = from_spark.cache(df)  # Spark's job
        if marks is not None:
            marks.spark_done = time.time()
        blocks = from_spark.fetched(from_spark.fetch(df, cached), marks)
        if producer is not None:
            counts = write_blocks((ray.get(b.ref) for b in blocks), topic, None, on_progress, producer)
        else:
            counts = _write_through(POOLS.acquire(config, kind), blocks, topic, on_progress, exactly_once, marks)
    finally:
        if cached is not None:
            _release_spark(df, cached)
    log.info("wrote %d rows to Kafka", counts["delivered"])
    return counts


def _release_spark(df: Any, cached: from_spark.CachedPartitions) -> None:
    """Let Spark drop what Spark's job cached for the hand-over: the DataFrame's Arrow bytes are
    kept in Spark's block manager (memory, then disk), for Ray to fetch again should a node be
    lost while the blocks are read, until the SparkContext stops; once the write has ended,
    whatever its outcome, nothing will read them again. Best effort: a Spark gone under the
    write (its JVM dead, say) must not hide the write's own outcome behind this one."""
    try:
        from_spark.release(df, cached)
    except Exception as exc:  # py4j's errors, Spark stopped: what the write itself did stands
        log.warning("releasing the DataFrame's cached Arrow bytes in Spark failed: %s", exc)
