"""Kafka into Spark: a bounded range of topics as a DataFrame with Spark's Kafka source schema.

The range is fixed on the driver (`offsets.resolve_ranges`, Spark's `startingOffsets` /
`endingOffsets` rules, and its `startingOffsetsByTimestamp`, `endingOffsetsByTimestamp`,
`subscribePattern` and `failOnDataLoss` options). `read_dataset`: Ray Data reads it, a block
per partition range. `read_kafka`: Ray tasks read it, the ranges dealt among them as Ray Data's
read tasks have them, each task's tables in Arrow IPC streams, which Spark's executors read from
Ray's object store (`to_spark`): no pandas and no Python worker of Spark's on the way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import ray

from ..actors.options import remote_task
from ..wire.arrow_batches import SCHEMA
from ..wire.errors import ConfigError
from ..wire.range_reader import read_ranges
from ..wire.serde import require_raw
from .offsets import PartitionRange, offsets_json, resolve_ranges
from .to_spark import gathered, streams_of, streams_to_spark

OPTIONS = ("subscribe_pattern", "starting_offsets_by_timestamp", "ending_offsets_by_timestamp",
           "starting_offsets_by_timestamp_strategy", "fail_on_data_loss")
"""Spark's source options beyond the offsets, by their snake_case names."""


def read_dataset(topics: Iterable[str] | str | None, config: Mapping[str, Any], starting_offsets: Any = "earliest",
                 ending_offsets: Any = "latest", **options: Any) -> Any:
    """A Ray Dataset of the range, one block per partition range.

    `options`: `subscribe_pattern` (instead of `topics`), `starting_offsets_by_timestamp`,
    `ending_offsets_by_timestamp` (per-partition JSON of ms), `starting_offsets_by_timestamp_strategy`
    ("error" or "latest"), `fail_on_data_loss` (True).

    Its read tasks all run at once, one per CPU: Ray Data's per-operator resource reservation,
    which on a small node lets one read task run at a time (measured on 2 CPUs: six 0.5 s tasks
    took 2.4 s with it, 1.6 s without), is off in this Dataset's own context (`ds.context`)."""
    source = _source(topics, config, starting_offsets, ending_offsets, **options)
    ds = ray.data.read_datasource(source, override_num_blocks=source.task_count())
    ds.context.op_resource_reservation_enabled = False
    return ds


def _source(topics: Iterable[str] | str | None, config: Mapping[str, Any], starting_offsets: Any,
            ending_offsets: Any, **options: Any) -> Any:
    """The read's `KafkaDatasource`, its ranges fixed."""
    from .ray_data import KafkaDatasource  # defers ray.data, heavy, until a Dataset is read

    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise ConfigError(f"read options: unknown {sorted(unknown)}; known: {', '.join(OPTIONS)}")
    if options or topics is None:  # fixed here, then read as explicit per-partition ranges
        ranges = resolve_ranges(config, topics, starting_offsets, ending_offsets, **options)
        topics = sorted({r.topic for r in ranges})
        starting_offsets = offsets_json({(r.topic, r.partition): r.start for r in ranges})
        ending_offsets = offsets_json({(r.topic, r.partition): r.end for r in ranges})
    return KafkaDatasource(topics, config, starting_offsets, ending_offsets)


def _read_streams(config: Mapping[str, Any], share: list[PartitionRange]) -> Iterator[Any]:
    """One read task's ranges as Arrow IPC streams for Spark, then its row count."""
    rows = 0
    for count, stream in streams_of(read_ranges(config, share), SCHEMA):
        rows += count
        yield stream
    yield rows


_READ_STREAMS = remote_task(_read_streams, "spark_read")


def read_kafka(spark: Any, topics: Iterable[str] | str | None, starting_offsets: Any = "earliest",
               ending_offsets: Any = "latest", config: Mapping[str, Any] | None = None, **options: Any) -> Any:
    """A Spark DataFrame: key, value, topic, partition, offset, timestamp, timestampType, headers.
    `options`: as `read_dataset`'s (Spark's source options in snake_case)."""
    if config is None:
        raise ValueError("config: needs at least bootstrap.servers")
    require_raw(config, "read_kafka", "deserialize with DataFrame operations (CAST(value AS STRING), from_json)")
    source = _source(topics, config, starting_offsets, ending_offsets, **options)
    # a read's error is raised here, as Ray Data's read raised it
    streams, _ = gathered(_READ_STREAMS.remote(source.config, share) for share in source.shares())
    return streams_to_spark(spark, streams, SCHEMA)
