"""Ray Data without Spark: a Kafka datasource (a block per partition range) and a datasink.

    source = KafkaDatasource(["events"], {"bootstrap.servers": ...})
    ds = ray.data.read_datasource(source, override_num_blocks=source.task_count())
    ds.write_datasink(KafkaDatasink("events", {"bootstrap.servers": ...}))

Ranges are fixed on the driver when the read is planned (`offsets.resolve_ranges`); each
read task runs `wire.range_reader.read_ranges`: it fetches its ranges from their leaders, all at once over one connection to each
broker, each asking for the whole range and for the next piece while it decodes one, and yields
a table per range with Spark's Kafka source schema. The datasink's write tasks hand their blocks, whole, to a producer pipeline on
their own node (`node_writers`); the driver only starts the pipelines and sums the counts.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import ray
from ray.data import Datasource, ReadTask
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasink

from ..wire.arrow_batches import SCHEMA
from ..wire.config import parse_config
from ..wire.range_reader import read_range, read_ranges
from ..wire.serde import require_raw
from .node_writers import POOLS, PoolKind, write_here
from .offsets import PartitionRange, resolve_ranges
from .sink import KafkaWriteError, WriteResult, check_exactly_once, check_sink_columns

__all__ = ["KafkaDatasink", "KafkaDatasource", "read_range", "read_ranges"]

RECORD_BYTES_ESTIMATE = 150  # in-memory bytes per record Ray Data is told to expect


class KafkaDatasource(Datasource):
    """A bounded read of topics: a block per partition range, the ranges shared among at most one
    read task per CPU, each reading its ranges at once."""

    def __init__(self, topics: Iterable[str] | str, config: Mapping[str, Any],
                 starting_offsets: Any = "earliest", ending_offsets: Any = "latest"):
        self.config = dict(config)
        parse_config(self.config, role="read")  # a bad key fails here, at the point of the mistake; an unread one warns
        require_raw(self.config, "KafkaDatasource", "deserialize the columns with Dataset.map_batches")
        self.ranges = resolve_ranges(self.config, topics, starting_offsets, ending_offsets)

    def estimate_inmemory_data_size(self) -> int | None:
        return sum(r.count for r in self.ranges) * RECORD_BYTES_ESTIMATE

    def task_count(self, parallelism: int | None = None) -> int:
        """How many read tasks `get_read_tasks` makes: one per CPU, at most one per range with
        records, and at most `parallelism`.

        Ray Data asks for more than that (200 by default) and, if the source makes fewer, cuts
        each task's blocks into pieces to make up the number (600 blocks for 4,000,000 records in
        six ranges, which doubled the read's time); pass this as `override_num_blocks` to keep
        the blocks the tasks yield (`reader.read_dataset` does)."""
        ranges = sum(1 for r in self.ranges if r.count)
        return max(1, min(ranges, parallelism or ranges, _cpus()))  # 1 for an empty read, which makes none

    def shares(self, parallelism: int | None = None) -> list[list[PartitionRange]]:
        """The ranges with records, dealt among `task_count(parallelism)` tasks by size."""
        ranges = sorted((r for r in self.ranges if r.count), key=lambda r: -r.count)
        if not ranges:
            return []
        shares: list[list[PartitionRange]] = [[] for _ in range(self.task_count(parallelism))]
        loads = [0] * len(shares)
        for part in ranges:  # the largest range to the least loaded task
            i = loads.index(min(loads))
            shares[i].append(part)
            loads[i] += part.count
        return shares

    def get_read_tasks(self, parallelism: int, **_: Any) -> list[ReadTask]:
        """`task_count(parallelism)` tasks, each reading its share of the ranges at once; a block
        per range either way."""
        config = self.config
        # rows unknown until read: a range's offsets also number transaction markers (and, at
        # read_committed, aborted records), which no reader hands out; a count must read
        return [ReadTask(lambda share=share: read_ranges(config, share),
                         BlockMetadata(num_rows=None, size_bytes=None, input_files=None, exec_stats=None),
                         schema=SCHEMA)
                for share in self.shares(parallelism)]


def _cpus() -> int:
    try:
        return max(1, int(ray.cluster_resources().get("CPU", 1)))
    except Exception:  # Ray not started yet: Ray Data starts it when the read runs
        return 1


class KafkaDatasink(Datasink):
    """Writes blocks where they are: each write task hands its blocks to a pipeline on its own
    node (`pipelines_per_node` per node, kept for the next write with this config); the write
    fails with `KafkaWriteError`, naming the causes, if any row failed. Order: within a block,
    per partition; none across blocks (see `node_writers`).

    Blocks hold Spark's Kafka sink columns (`value`; `key`, `topic`, `partition`, `headers`)
    and may hold a `timestamp`. A read's rows go as they are: its `offset` and `timestampType`
    columns are dropped (the broker sets them), its `timestamp` is each record's time, and
    `topic`, when given, overrides a `topic` column, as Spark's `topic` option does. Any other
    column is refused, named, when the write starts.

    After the write, `result` holds the counts, the failures by cause and the rows each node's
    pipelines took.

    `exactly_once=True`: each block is written in a transaction of its own by a transactional
    writer, keyed by (write, task index, block index), so that a writer killed mid-block is
    restarted, fences the attempt and writes the block again, and a retried write task's block
    already committed is not written again (see `node_writers`)."""

    def __init__(self, topic: str | None, config: Mapping[str, Any], pipelines_per_node: int = 1,
                 exactly_once: bool = False):
        check_exactly_once(exactly_once, config)
        if type(pipelines_per_node) is not int or pipelines_per_node < 1:
            raise ValueError(f"pipelines_per_node must be an int of at least 1, not {pipelines_per_node!r}")
        self.topic = topic
        self.config = dict(config)
        parse_config(self.config, role="write")  # a bad key fails here; an unread one warns
        self.pipelines_per_node = pipelines_per_node
        self.exactly_once = exactly_once
        self.write_id = ""  # set on the driver when the write starts: the blocks' keys begin with it
        self.routes: Any = None  # set on the driver when the write starts; read by the write tasks
        self._pool: Any = None  # the driver's, held for the write
        self.result: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pool": None}  # the tasks need only the routes

    def on_write_start(self, schema: Any = None) -> None:
        if schema is not None:
            check_sink_columns(list(schema.names))
        self.write_id = uuid.uuid4().hex
        kind = PoolKind(self.pipelines_per_node, True) if self.exactly_once else self.pipelines_per_node
        self._pool = POOLS.acquire(self.config, kind)
        self._pool.cover_nodes()  # nodes that joined since the pool was built
        self.routes = self._pool.routes()

    def write(self, blocks: Iterable[Any], ctx: Any) -> Any:
        """In a write task, beside its blocks: each block to a writer of this node."""
        result = WriteResult()
        for i, block in enumerate(blocks):
            key = (self.write_id, ctx.task_idx, i) if self.exactly_once else None
            result.add_outcome(write_here(self.routes, self.topic, block, ctx.task_idx, key))
        return result

    def on_write_complete(self, write_result: Any) -> None:
        self._release()
        self.result = WriteResult()
        for part in getattr(write_result, "write_returns", write_result) or []:
            self.result.add_outcome(part)
        if self.result.failed:
            raise KafkaWriteError(self.result)

    def on_write_failed(self, error: Exception) -> None:
        self._release()

    @property
    def delivered(self) -> int:
        return self.result.delivered if self.result else 0

    @property
    def failed(self) -> int:
        return self.result.failed if self.result else 0

    def _release(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            POOLS.release(pool)
