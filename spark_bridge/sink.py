"""What every Kafka write of the bridge shares: a block as a table of the columns a Kafka write
takes (`sink_table`, by the rule `send_batch` keeps too: `driver.producer_input.check_write_columns`),
a write's counts (`WriteResult`), the error a write raises when rows failed (`KafkaWriteError`),
and when a write passed its steps, for a caller that asks (`WriteMarks`).

Imported by writer.py (the driver's writes), node_writers.py (the pipelines on each node) and
ray_data.py (the datasink).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..driver.producer_input import check_write_columns
from ..wire.errors import ConfigError

# What a read gives beside the columns a write takes, and a write cannot set (the broker assigns
# them): dropped, so a read's rows can be written back as they are. A read's `timestamp` is one
# a write takes (`check_write_columns`): a copy keeps each record's time.
READ_ONLY_COLUMNS = ("offset", "timestampType")


def check_exactly_once(exactly_once: Any, config: Any, producer: Any = None) -> None:
    """Refuse, before anything starts, an `exactly_once` that is not a bool; exactly once with a
    `producer` of the caller's own (it goes through the node writers, started from `config`);
    and a `transactional.id` in `config` without exactly once (it is the prefix of the writers'
    transactional ids, of no use to other writes)."""
    if type(exactly_once) is not bool:
        raise ConfigError(f"exactly_once: expected True or False, got {exactly_once!r}")
    if exactly_once and producer is not None:
        raise ConfigError("exactly_once: writes through the node writers, which start from `config`; "
                          "give config, not producer (or use the producer's own transactions)")
    if not exactly_once and config is not None and config.get("transactional.id") is not None:
        raise ConfigError("transactional.id: a write takes it as the prefix of its writers' transactional ids, "
                          "with exactly_once=True only")


class KafkaWriteError(RuntimeError):
    """Some rows were not delivered; `result` holds the counts and the first causes."""

    def __init__(self, result: WriteResult):
        self.result = result
        causes = "; ".join(f"{n} × {cause}" for cause, n in list(result.causes.items())[:3])
        super().__init__(f"{result.failed} of {result.delivered + result.failed} rows were not delivered: {causes}")


@dataclass
class WriteMarks:
    """When (time.time()) a write of a DataFrame passed its steps, filled in by the write for a
    caller that gives one (`write_kafka(..., marks=)`; the demo prints where its time went);
    None where the write did not see the step. Costs a clock read per step (a node writer notes
    its first acknowledgement after each block in any case: a lock and a clock read a block).

    In order: Spark's job ended (it made the rows and RayDP's Arrow batches of them, cached in
    Spark; seen as RayDP turns to Ray); the blocks are in Ray's object store (the hand-over);
    the writers answer, their producers' actors up; the broker acknowledged the write's first
    message (as the writers' producers heard it, on their nodes' clocks); the last block's
    outcome is in."""

    spark_done: float | None = None
    handed_over: float | None = None
    writers_up: float | None = None
    first_acked: float | None = None
    written: float | None = None


@dataclass
class WriteResult:
    """A write's counts: rows delivered and failed, the failures by cause, rows by writer node,
    and when its first message was acknowledged (if its writers said)."""

    delivered: int = 0
    failed: int = 0
    causes: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)  # node id -> rows its pipelines took
    first_acked: float | None = None  # time.time(), the earliest of its blocks'

    def add(self, batch_result: Any) -> None:
        """A `BatchResult` of the driver's own producer."""
        self.delivered += batch_result.delivered
        self.failed += batch_result.failed
        if batch_result.failed:
            self._add_causes(count_causes(batch_result.errors))

    def add_outcome(self, outcome: Any) -> None:
        """A `BlockOutcome` from a node's writer, or another `WriteResult`."""
        self.delivered += outcome.delivered
        self.failed += outcome.failed
        self._add_causes(outcome.causes)
        if isinstance(outcome, WriteResult):
            nodes = outcome.nodes
        else:
            nodes = {outcome.node_id: outcome.delivered + outcome.failed}
        for node, rows in nodes.items():
            self.nodes[node] = self.nodes.get(node, 0) + rows
        acked = outcome.first_acked
        if acked is not None and (self.first_acked is None or acked < self.first_acked):
            self.first_acked = acked

    def _add_causes(self, causes: dict[str, int]) -> None:
        for cause, n in causes.items():
            self.causes[cause] = self.causes.get(cause, 0) + n

    def counts(self) -> dict[str, int]:
        return {"delivered": self.delivered, "failed": self.failed}


def sink_table(block: Any, topic: str | None = None) -> pa.Table:
    """A block (Arrow or pandas) as an Arrow table holding only columns a Kafka write takes: a
    read's `READ_ONLY_COLUMNS` dropped, and with a `topic` given its `topic` column too (the
    topic given overrides the column, as Spark's `topic` option does); any other column no write
    takes is refused, by name (`check_write_columns`)."""
    table = block if isinstance(block, pa.Table) else pa.Table.from_pandas(block, preserve_index=False)
    check_sink_columns(table.column_names)
    dropped = [c for c in table.column_names if c in READ_ONLY_COLUMNS or (c == "topic" and topic is not None)]
    return table.drop_columns(dropped) if dropped else table


def check_sink_columns(names: list[str]) -> None:
    """A sink's columns by the write rule (`check_write_columns`), a read's `READ_ONLY_COLUMNS`
    aside (dropped): refused at once, naming what no write takes."""
    check_write_columns([name for name in names if name not in READ_ONLY_COLUMNS])


def count_causes(errors: list) -> dict[str, int]:
    """How many rows failed of each cause, by the cause's name and message."""
    causes: dict[str, int] = {}
    for error in errors:
        if error is not None:
            cause = f"{type(error).__name__}: {error}"
            causes[cause] = causes.get(cause, 0) + 1
    return causes
