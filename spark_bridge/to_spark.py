"""Arrow in Ray's object store into a Spark DataFrame, decoded by Spark's executors.

Ray Data's `Dataset.to_spark` (RayDP's `ray_dataset_to_spark_dataframe`) hands Arrow tables to
Spark through a pandas UDF: every Spark Python worker connects to Ray, turns each table into
pandas, and Spark turns pandas back into rows. RayDP's other path (`RayDatasetRDD`, read by
`ObjectStoreReader.RayDatasetToDataFrame`) has Spark's executors, which are Ray's Java workers,
get Arrow IPC streams held as bytes in Ray's object store and decode them in the JVM: no Python
worker, no pandas. `SCALING.md` ("Reads into Spark") has the two timed side by side.

So the tables become IPC streams of at most `STREAM_BYTES` each, in Ray tasks (`tables_to_spark`),
or straight from Kafka in the read tasks (`reader.read_kafka`, with `streams_of`), and Spark is
given the streams' references, a Spark partition per stream.
Python `bytes` go into Ray's object store in its cross-language format, which the JVM reads.

Who calls: `reader.read_kafka`, and the demo's read (`app/demo.py`). Whom it calls: RayDP's
JVM classes, through Spark's py4j gateway.

The streams live as long as the Spark session: Spark reads them again at each action on the
DataFrame (or on one made from it), and nothing tells Python when the last such DataFrame is
gone, so they are held, as RayDP's own `to_spark` holds its tables, by RayDP's app master actor,
which lets them go when Spark stops; or sooner, by `release`, for a caller that knows the
DataFrame is done with (`foreach_batch_kafka` after each batch).
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import ray

from ..actors.options import remote_task

# Spark's timestamps are microseconds, and its executors read an Arrow timestamp's numbers as
# such whatever the stream's unit says: Kafka's milliseconds (the consumer's columns) read as a
# thousandth of the time (2026 came out as 1970-01-21), so they go in Spark's unit
SPARK_TIMESTAMP_UNIT = "us"
# Most bytes of one stream: an executor reads a stream whole, into one Java byte array (at most
# 2 GiB), within its memory (1 GiB by default, `session.init_spark`); a task copies each stream
# once more into Python bytes as it makes it
STREAM_BYTES = 64 << 20


def spark_ready(schema: pa.Schema) -> pa.Schema:
    """`schema` with every timestamp in Spark's unit."""
    return pa.schema([f.with_type(pa.timestamp(SPARK_TIMESTAMP_UNIT, f.type.tz))
                      if pa.types.is_timestamp(f.type) and f.type.unit != SPARK_TIMESTAMP_UNIT else f
                      for f in schema], metadata=schema.metadata)


def stream_of(tables: Iterable[pa.Table], schema: pa.Schema) -> tuple[int, bytes]:
    """The rows of `tables` (each of `schema`, exactly) and one Arrow IPC stream of them, in Spark's units."""
    target, rows = spark_ready(schema), 0
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, target) as writer:
        for table in tables:
            if table.schema != schema:
                raise ValueError(f"a table of another schema than the stream's: {table.schema} against {schema}")
            rows += table.num_rows
            writer.write_table(table.cast(target) if target != schema else table)
    return rows, sink.getvalue().to_pybytes()


def streams_of(tables: Iterable[pa.Table], schema: pa.Schema, most: int = STREAM_BYTES) -> Iterator[tuple[int, bytes]]:
    """`stream_of` the rows of `tables`, in order, in streams of about `most` bytes at most each
    (a table is cut by rows, at its average row's size; a single row larger than `most` goes
    alone)."""
    for table in tables:
        per_row = max(1, table.nbytes // max(1, table.num_rows))
        step = max(1, most // per_row)
        for start in range(0, table.num_rows, step):
            yield stream_of([table.slice(start, step)], schema)


def gathered(generators: Iterable[Any]) -> tuple[list[Any], list[Any]]:
    """The streams that streaming generator tasks yielded, and each task's last, small answer,
    got here: a task's error is raised here, by the caller, and a failed task's streams dropped."""
    streams, answers = [], []
    for generator in generators:
        refs = list(generator)
        streams.extend(refs[:-1])
        answers.append(refs[-1])
    return streams, ray.get(answers)


def _ipc_streams(*tables: pa.Table) -> Iterator[Any]:
    """The tables' streams, then their schema."""
    yield from (stream for _, stream in streams_of(tables, tables[0].schema))
    yield tables[0].schema


_IPC_STREAMS = remote_task(_ipc_streams, "to_spark")  # no CPU of Ray's: see actors/options.py


def tables_to_spark(spark: Any, tables: Sequence[Any]) -> Any:
    """A Spark DataFrame of the tables `tables` (references to tables of one schema, at least one),
    in order, made into streams by one task per CPU of Ray's at most: a task per table would
    start a Ray worker process per table at once, as tasks that take no CPU are not queued."""
    if not tables:
        raise ValueError("tables_to_spark: no table, so no schema for the DataFrame")
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    size = -(-len(tables) // min(len(tables), cpus))  # tables per task, rounded up
    streams, schemas = gathered(_IPC_STREAMS.remote(*tables[i:i + size]) for i in range(0, len(tables), size))
    if any(schema != schemas[0] for schema in schemas):
        raise ValueError(f"tables_to_spark: the tables' schemas differ: {sorted(set(map(str, schemas)))}")
    return streams_to_spark(spark, streams, schemas[0])


# the key each DataFrame's streams are held under by RayDP's app master, for `release`
_HELD: weakref.WeakKeyDictionary[Any, uuid.UUID] = weakref.WeakKeyDictionary()


def streams_to_spark(spark: Any, streams: Sequence[Any], schema: pa.Schema) -> Any:
    """A Spark DataFrame of Arrow IPC streams (`streams`: references to `bytes`, each made by
    `stream_of` from tables of `schema`), a Spark partition per stream.

    RayDP 1.6.5's classes do the reading: `RayDatasetRDD`, `ObjectStoreReader`, and its app
    master actor's `add_objects`, which holds the streams (the module's docstring says why).
    Spark's preferred place for each partition is the node of the streams' owner, this process:
    RayDP's RDD names the owner, whose address its executors need to get the bytes."""
    from pyspark.sql import DataFrame  # heavy: only when Spark is asked for
    from pyspark.sql.pandas.types import from_arrow_schema
    from raydp.spark.dataset import get_locations

    holder = _master(spark)
    spark_schema = from_arrow_schema(spark_ready(schema))
    if not streams:
        return spark.createDataFrame([], spark_schema)
    key = uuid.uuid4()
    ray.get(holder.add_objects.remote(key, list(streams)))
    jvm = spark.sparkContext._jvm
    rdd = jvm.org.apache.spark.rdd.RayDatasetRDD(spark._jsc, [s.binary() for s in streams], get_locations(streams))
    jdf = jvm.org.apache.spark.sql.raydp.ObjectStoreReader.RayDatasetToDataFrame(spark._jsparkSession, rdd,
                                                                                  spark_schema.json())
    df = DataFrame(jdf, spark)
    _HELD[df] = key
    return df


def release(spark: Any, df: Any) -> None:
    """Let go of the streams behind `df` (made by `streams_to_spark`) now, not when Spark stops:
    for a caller that knows no action will run on it, or on a DataFrame made from it, again
    (`foreach_batch_kafka`, once the batch's function returned). Nothing for another DataFrame."""
    key = _HELD.pop(df, None)
    if key is not None:
        ray.get(_master(spark).add_objects.remote(key, []))  # RayDP's master has no removal: an empty list


def _master(spark: Any) -> Any:
    """RayDP's app master actor of `spark`, which holds what its executors read from Ray."""
    from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX

    try:
        return ray.get_actor(spark.sparkContext.appName + RAYDP_SPARK_MASTER_SUFFIX)
    except ValueError as exc:  # Ray's answer for no actor of that name
        raise ValueError(f"the Spark session {spark.sparkContext.appName!r} was not started through RayDP "
                         "(raykafka.spark_bridge.session.init_spark): its executors cannot read Ray's "
                         "object store") from exc
