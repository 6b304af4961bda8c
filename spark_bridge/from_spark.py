"""A Spark DataFrame's partitions into Ray's object store, for `write_kafka`: RayDP's recoverable
hand-over, taken step by step: Spark's job ends where the fetches begin (the write's marks see
both), and no Ray Dataset is built (RayDP's `from_arrow_refs` runs a metadata task per block).

1. Spark's job (`cache`): RayDP's JVM side (`ObjectStoreWriter.prepareRecoverableRDD`) makes the
   DataFrame's Arrow batches and caches them in Spark (memory, then disk), one cached partition
   per Spark partition, held until `release`.
2. The fetches (`fetch`): one Ray task per partition reads its bytes from the executor that holds
   them (a cross-language call to RayDP's executor actor) and returns them as an Arrow table,
   with its row count as a second, small return. Ray retries a fetch that failed, and runs it
   again if its table is lost with its node: the bytes are still cached in Spark. That is RayDP's
   own design (`raydp.spark.dataset.from_spark_recoverable`), whose JVM side this reuses.
3. `fetched` waits for every fetch, so that a DataFrame Spark could not hand over fails the
   write before any row goes, and reads the row counts: they live in the driver (a small return
   is held by its owner), so a table later lost beyond rebuilding still counts its rows failed.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import pyarrow as pa
import ray

from ..actors.options import remote_task, spark_fetch_options
from .node_writers import BlockRef
from .sink import WriteMarks

# RayDP's Spark conf for the fetch tasks' resources, read as its own conversion reads them
FETCH_CPU_CONF = "spark.ray.raydp_recoverable_fetch.task.resource.CPU"
FETCH_MEMORY_CONF = "spark.ray.raydp_recoverable_fetch.task.resource.memory"


class CachedPartitions(NamedTuple):
    """What Spark's job left in Spark's cache, for the fetches to read."""

    rdd_id: int
    schema_json: str
    agent_url: str
    executors: list[str]  # the executor that caches each partition


def cache(df: Any) -> CachedPartitions:
    """Spark's job: `df`'s Arrow batches made and cached in Spark (until `release`)."""
    from pyspark.storagelevel import StorageLevel

    sc = df.sparkSession.sparkContext
    writer = sc._jvm.org.apache.spark.sql.raydp.ObjectStoreWriter
    info = writer.prepareRecoverableRDD(df._jdf, sc._getJavaStorageLevel(StorageLevel.MEMORY_AND_DISK))
    return CachedPartitions(info.rddId(), info.schemaJson(), info.driverAgentUrl(), list(info.locations()))


def release(df: Any, cached: CachedPartitions) -> None:
    """Let Spark drop the cached batches (else they stay until the SparkContext stops)."""
    df.sparkSession.sparkContext._jvm.org.apache.spark.sql.raydp.ObjectStoreWriter.releaseRecoverableRDD(
        cached.rdd_id)


def fetch_partition(executor: str, rdd_id: int, partition: int, schema_json: str,
                    agent_url: str) -> tuple[pa.Table, int]:
    """(In a Ray task, `fetch`'s.) One cached partition, from the executor actor that holds it,
    and its rows; its arguments are the partition's `sources` entry."""
    from raydp.spark.dataset import _enable_load_code_from_local

    _enable_load_code_from_local()  # this worker may call the JVM executor actor
    ipc = ray.get(ray.get_actor(executor).getRDDPartition.remote(rdd_id, partition, schema_json, agent_url))
    table = pa.ipc.open_stream(pa.BufferReader(ipc)).read_all().replace_schema_metadata()
    return table, table.num_rows


_FETCH = remote_task(fetch_partition, "spark_fetch")


def sources(cached: CachedPartitions) -> list[tuple[str, int, int, str, str]]:
    """Each cached partition's `fetch_partition` arguments, in partition order."""
    return [(f"raydp-executor-{executor}", cached.rdd_id, i, cached.schema_json, cached.agent_url)
            for i, executor in enumerate(cached.executors)]


def fetch(df: Any, cached: CachedPartitions) -> list[tuple[Any, Any]]:
    """Start a fetch per partition: (table ref, row count ref) each."""
    from raydp.utils import parse_memory_size

    conf = df.sparkSession.sparkContext.getConf()
    options = spark_fetch_options(float(conf.get(FETCH_CPU_CONF, "0") or 0),
                                  float(parse_memory_size(conf.get(FETCH_MEMORY_CONF, "0") or "0")))
    return [tuple(_FETCH.options(**options).remote(*source)) for source in sources(cached)]


def fetched(fetches: list[tuple[Any, Any]], marks: WriteMarks | None = None) -> list[BlockRef]:
    """The fetched tables, once every fetch has ended (a fetch that failed is raised, before any
    row is written); `marks.handed_over` then."""
    blocks = [BlockRef(table, None, rows) for table, rows in zip([t for t, _ in fetches],
                                                                 ray.get([r for _, r in fetches]), strict=True)]
    if marks is not None:
        marks.handed_over = time.time()
    return blocks
