"""Arrow in Ray's object store into a Spark DataFrame, decoded by Spark's executors.

Ray Data's `Dataset.to_spark` (RayDP's `ray_dataset_to_spark_dataframe`) hands Arrow tables to
Spark through a pandas UDF: every Spark Python worker connects to Ray, turns each table into
pandas, and Spark turns pandas back into rows. RayDP's other path (`RayDatasetRDD`, read by
`ObjectStoreReader.RayDatasetToDataFrame`) has Spark's executors, which are Ray's Java workers,
get Arrow IPC streams held as bytes in Ray's object store and decode them in the JVM: no Python
worker, no pandas. `SCALING.md` ("Reads into Spark") has the two timed side by side.

So the tables become IPC streams, one per CPU at most, in Ray tasks (`tables_to_spark`), or
straight from Kafka in the read tasks (`reader.read_kafka`, with `stream_of`), and Spark is
given the streams' references, a Spark partition per stream.
Python `bytes` go into Ray's object store in its cross-language format, which the JVM reads.

Who calls: `reader.read_kafka`, and the demo's read (`app/demo.py`). Whom it calls: RayDP's
JVM classes, through Spark's py4j gateway.

The streams live as long as the Spark session: Spark reads them again at each action on the
DataFrame (or on one made from it), and nothing tells Python when the last such DataFrame is
gone, so they are held, as RayDP's own `to_spark` holds its tables, by RayDP's app master actor,
which lets them go when Spark stops.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import ray

from ..actors.options import remote_task

# Spark's timestamps are microseconds: a stream holding milliseconds (Kafka's unit, the consumer's
# columns) would be read as a thousandth of the time, so timestamps go in Spark's unit
SPARK_TIMESTAMP_UNIT = "us"


def spark_ready(schema: pa.Schema) -> pa.Schema:
    """`schema` with every timestamp in Spark's unit."""
    return pa.schema([f.with_type(pa.timestamp(SPARK_TIMESTAMP_UNIT, f.type.tz))
                      if pa.types.is_timestamp(f.type) and f.type.unit != SPARK_TIMESTAMP_UNIT else f
                      for f in schema], metadata=schema.metadata)


def stream_of(tables: Iterable[pa.Table], schema: pa.Schema) -> tuple[int, bytes]:
    """The rows of `tables` (each of `schema`) and one Arrow IPC stream of them, in Spark's units."""
    target, rows = spark_ready(schema), 0
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, target) as writer:
        for table in tables:
            rows += table.num_rows
            writer.write_table(table.cast(target) if table.schema != target else table)
    return rows, sink.getvalue().to_pybytes()


def _ipc_stream(*tables: pa.Table) -> tuple[pa.Schema, bytes]:
    return tables[0].schema, stream_of(tables, tables[0].schema)[1]


_IPC_STREAM = remote_task(_ipc_stream, "to_spark")  # no CPU of Ray's: see actors/options.py


def tables_to_spark(spark: Any, tables: Sequence[Any]) -> Any:
    """A Spark DataFrame of the tables `tables` (references to tables of one schema, at least one),
    in order, in one stream (and Spark partition) per CPU of Ray's at most: a task per table
    would start a Ray worker process per table at once, as tasks that take no CPU are not queued."""
    if not tables:
        raise ValueError("tables_to_spark: no table, so no schema for the DataFrame")
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    size = -(-len(tables) // min(len(tables), cpus))  # tables per stream, rounded up
    streams = [_IPC_STREAM.remote(*tables[i:i + size]) for i in range(0, len(tables), size)]
    schemas = ray.get([schema for schema, _ in streams])  # a conversion's error is raised here, by the caller
    if any(schema != schemas[0] for schema in schemas):
        raise ValueError(f"tables_to_spark: the tables' schemas differ: {sorted(set(map(str, schemas)))}")
    return streams_to_spark(spark, [stream for _, stream in streams], schemas[0])


def streams_to_spark(spark: Any, streams: Sequence[Any], schema: pa.Schema) -> Any:
    """A Spark DataFrame of Arrow IPC streams (`streams`: references to `bytes`, each made by
    `stream_of` from tables of `schema`), a Spark partition per stream."""
    from pyspark.sql import DataFrame  # heavy: only when Spark is asked for
    from pyspark.sql.pandas.types import from_arrow_schema
    from raydp.spark.dataset import get_locations
    from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX

    spark_schema = from_arrow_schema(spark_ready(schema))
    if not streams:
        return spark.createDataFrame([], spark_schema)
    try:
        holder = ray.get_actor(spark.sparkContext.appName + RAYDP_SPARK_MASTER_SUFFIX)
    except ValueError as exc:  # Ray's answer for no actor of that name
        raise ValueError(f"the Spark session {spark.sparkContext.appName!r} was not started through RayDP "
                         "(raykafka.spark_bridge.session.init_spark): its executors cannot read Ray's "
                         "object store") from exc
    ray.get(holder.add_objects.remote(uuid.uuid4(), list(streams)))  # see the module's docstring
    jvm = spark.sparkContext._jvm
    rdd = jvm.org.apache.spark.rdd.RayDatasetRDD(spark._jsc, [s.binary() for s in streams], get_locations(streams))
    jdf = jvm.org.apache.spark.sql.raydp.ObjectStoreReader.RayDatasetToDataFrame(spark._jsparkSession, rdd,
                                                                                  spark_schema.json())
    return DataFrame(jdf, spark)
