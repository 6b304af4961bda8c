"""DataFrames and Datasets into Kafka through the producer actors.

A Spark DataFrame with Spark's Kafka sink columns (`value` required; `key`, `topic`,
`partition`, `headers` optional; string or binary) becomes a Ray Dataset through RayDP; its
blocks go whole, as Arrow tables, to one producer pipeline (`Producer.send_batch`), so no
Python call is made per row. The pipeline is kept for the next write with the same config
(`producer_cache`), as Spark keeps its Kafka sink's producers. The write fails loudly, naming
the first cause, if any row failed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

log = logging.getLogger("raykafka.spark_bridge")

SINK_COLUMNS = ("key", "value", "topic", "partition", "headers")


class KafkaWriteError(RuntimeError):
    """Some rows were not delivered; `result` holds the counts and the first causes."""

    def __init__(self, result: WriteResult):
        self.result = result
        causes = "; ".join(f"{n} × {cause}" for cause, n in list(result.causes.items())[:3])
        super().__init__(f"{result.failed} of {result.delivered + result.failed} rows were not delivered: {causes}")


@dataclass
class WriteResult:
    delivered: int = 0
    failed: int = 0
    causes: dict[str, int] = field(default_factory=dict)

    def add(self, batch_result: Any) -> None:
        self.delivered += batch_result.delivered
        self.failed += batch_result.failed
        if batch_result.failed:
            for error in batch_result.errors:
                if error is not None:
                    cause = f"{type(error).__name__}: {error}"
                    self.causes[cause] = self.causes.get(cause, 0) + 1


def _sink_table(block: Any) -> pa.Table:
    """A block as an Arrow table holding only Spark's Kafka sink columns."""
    table = block if isinstance(block, pa.Table) else pa.Table.from_pandas(block, preserve_index=False)
    if "value" not in table.column_names:
        raise ValueError(f"a Kafka sink needs a 'value' column; got {table.column_names}")
    unknown = [c for c in table.column_names if c not in SINK_COLUMNS]
    if unknown:
        raise ValueError(f"columns {unknown} are not Kafka sink columns {list(SINK_COLUMNS)}")
    return table


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
    from .producer_cache import PRODUCERS

    _check_target(config, producer)
    cached = producer is None
    if cached:
        producer = PRODUCERS.acquire(config)
    result = WriteResult()
    try:
        futures = []
        for block in blocks:  # a block larger than buffer.memory allows goes in slices (send_batch)
            futures.append(producer.send_batch(topic, _sink_table(block)))
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
    return {"delivered": result.delivered, "failed": result.failed}


def write_dataset(ds: Any, topic: str | None, config: Mapping[str, Any] | None = None, on_progress: Any = None,
                  producer: Any = None) -> dict[str, int]:
    """A Ray Dataset with Kafka sink columns into Kafka (through `producer`, if given)."""
    blocks = ds.iter_batches(batch_format="pyarrow", batch_size=None, prefetch_batches=2)
    return write_blocks(blocks, topic, config, on_progress, producer)


def write_kafka(df: Any, topic: str | None = None, config: Mapping[str, Any] | None = None,
                on_progress: Any = None, producer: Any = None) -> dict[str, int]:
    """A Spark DataFrame with Kafka sink columns into Kafka; returns {"delivered", "failed"}.

    `producer`: a `raykafka.driver.Producer` to write through and leave open (else the one
    cached for `config` is used, started if needed)."""

    _check_target(config, producer)
    columns = [f.name for f in df.schema.fields]
    if "value" not in columns:
        raise ValueError(f"a Kafka sink needs a 'value' column; the DataFrame has {columns}")
    if topic is None and "topic" not in columns:
        raise ValueError("topic: give a topic, or a 'topic' column")
    counts = write_dataset(_from_spark(df), topic, config, on_progress, producer)
    log.info("wrote %d rows to Kafka", counts["delivered"])
    return counts


def _from_spark(df: Any) -> Any:
    """`ray.data.from_spark(df)`, one block per Spark partition, without the warning that Ray
    2.60's `from_spark` gives on every call (it passes its `parallelism=None` default on as a
    deprecated argument): the same RayDP conversion, called directly."""
    import warnings

    import raydp

    with warnings.catch_warnings():  # RayDP 1.6.5 reads df.sql_ctx, which pyspark 3.5 deprecates
        warnings.filterwarnings("ignore", message="DataFrame.sql_ctx is an internal property", category=UserWarning)
        return raydp.spark.spark_dataframe_to_ray_dataset(df)
