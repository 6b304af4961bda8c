"""The Ray Data datasource reads exactly the requested ranges, with Spark's Kafka source schema."""

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

import ray  # noqa: E402

from raykafka.driver.admin import Admin  # noqa: E402
from raykafka.spark_bridge.offsets import resolve_ranges  # noqa: E402
from raykafka.spark_bridge.ray_data import KafkaDatasource  # noqa: E402
from raykafka.wire.arrow_batches import SCHEMA  # noqa: E402

pytestmark = [pytest.mark.broker, pytest.mark.ray]


@pytest.fixture(scope="module")
def producer(ray_for_spark, bootstrap):
    """One producer of the default config for the writes given a producer: each test writes to a
    fresh topic of its own and reads back only that topic, none closes it, and the one that
    watches its actors compares them before and after its own writes, so sharing it (one start
    of its actors for the module, not one a test) leaves every assertion as it was."""
    from raykafka.driver.producer import Producer

    with Producer({"bootstrap.servers": bootstrap}) as shared:
        yield shared


@pytest.fixture(scope="module")
def filled_topic(bootstrap):
    """3 partitions; message i goes to partition i % 3 with key k<i>, value v<i>, header n=<i>."""
    topic = "rds-" + bootstrap.replace(":", "-").replace(".", "")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 3}, exist_ok=True)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(3000):
        producer.produce(topic, value=b"v%d" % i, key=b"k%d" % i, partition=i % 3,
                         headers=[("n", str(i).encode())], timestamp=1_700_000_000_000 + i)
    assert producer.flush(30) == 0
    return topic


def test_reads_every_record_once_with_the_spark_schema(ray_for_spark, bootstrap, filled_topic):
    ds = ray.data.read_datasource(KafkaDatasource(filled_topic, {"bootstrap.servers": bootstrap}))
    table = ds.to_arrow_refs()
    import pyarrow as pa

    table = pa.concat_tables(ray.get(table))
    assert table.schema == SCHEMA
    assert table.num_rows == 3000
    rows = table.to_pylist()
    by_value = {r["value"]: r for r in rows}
    assert len(by_value) == 3000
    for i in (0, 1, 2, 1499, 2999):
        row = by_value[b"v%d" % i]
        assert row["key"] == b"k%d" % i
        assert row["partition"] == i % 3
        assert row["offset"] == i // 3
        assert row["headers"] == [{"key": "n", "value": str(i).encode()}]
        assert int(row["timestamp"].timestamp() * 1000) == 1_700_000_000_000 + i


def test_a_read_task_reads_its_ranges_at_once_and_yields_a_block_for_each(ray_for_spark, bootstrap, filled_topic):
    source = KafkaDatasource(filled_topic, {"bootstrap.servers": bootstrap})
    tasks = source.get_read_tasks(2)  # 3 ranges, at most 2 tasks
    assert len(tasks) == 2
    assert all(t.metadata.num_rows is None for t in tasks)  # known once read (markers take offsets)
    shares = sorted([len(block) for block in task()] for task in tasks)
    assert shares == [[1000], [1000, 1000]]  # the ranges shared 1 and 2, a block for each
    blocks = [block for task in tasks for block in task()]
    for block in blocks:
        offsets = block.column("offset").to_pylist()
        assert offsets == list(range(1000))  # each block is one whole partition, in order
        assert len(set(block.column("partition").to_pylist())) == 1


def test_per_partition_json_reads_exactly_that_range(ray_for_spark, bootstrap, filled_topic):
    start = f'{{"{filled_topic}": {{"0": 5, "1": -2, "2": -1}}}}'
    end = f'{{"{filled_topic}": {{"0": 10, "1": 3, "2": -1}}}}'
    ds = ray.data.read_datasource(KafkaDatasource(filled_topic, {"bootstrap.servers": bootstrap}, start, end))
    got = sorted((r["partition"], r["offset"]) for r in ds.take_all())
    assert got == [(0, o) for o in range(5, 10)] + [(1, o) for o in range(3)]


def test_bad_ranges_fail_at_the_point_of_the_mistake(bootstrap, filled_topic):
    config = {"bootstrap.servers": bootstrap}
    with pytest.raises(ValueError, match="endingOffsets: earliest"):
        resolve_ranges(config, filled_topic, "earliest", "earliest")
    with pytest.raises(ValueError, match="do not name partition 2"):
        resolve_ranges(config, filled_topic, f'{{"{filled_topic}": {{"0": 0, "1": 0}}}}')
    with pytest.raises(ValueError, match="outside the partition"):
        resolve_ranges(config, filled_topic, "earliest", f'{{"{filled_topic}": {{"0": 99999, "1": -1, "2": -1}}}}')
    with pytest.raises(ValueError, match="linger.msec"):
        KafkaDatasource(filled_topic, {"bootstrap.servers": bootstrap, "linger.msec": 1})


def test_datasink_then_datasource_round_trip_a_dataset_exactly(ray_for_spark, bootstrap, topic_name):
    from raykafka.spark_bridge.ray_data import KafkaDatasink

    topic = topic_name("sink")
    config = {"bootstrap.servers": bootstrap}
    with Admin(config) as admin:
        admin.create_topics({topic: 2})
    rows = [{"key": b"k%d" % (i % 10), "value": b"v%d" % i, "partition": i % 2} for i in range(5000)]
    sink = KafkaDatasink(topic, config)
    ray.data.from_items(rows, override_num_blocks=4).write_datasink(sink)
    assert (sink.delivered, sink.failed) == (5000, 0)
    back = ray.data.read_datasource(KafkaDatasource(topic, config)).take_all()
    assert sorted((r["key"], r["value"], r["partition"]) for r in back) == sorted(
        (r["key"], r["value"], r["partition"]) for r in rows)
    per_partition = {}
    for r in back:
        per_partition.setdefault(r["partition"], []).append(r["offset"])
    assert {p: sorted(o) for p, o in per_partition.items()} == {0: list(range(2500)), 1: list(range(2500))}


def test_a_read_written_back_as_it_is_goes_to_the_sink_topic_without_its_read_only_columns(
        ray_for_spark, bootstrap, filled_topic, topic_name):
    """The README's "Ray Data without Spark": a read's rows (with `offset`, `timestamp`,
    `timestampType` and a `topic` column naming the source) into another topic. The read-only
    columns are dropped and the sink's topic overrides the column, as in Spark's Kafka sink."""
    from raykafka.spark_bridge.ray_data import KafkaDatasink

    copy = topic_name("copy")
    config = {"bootstrap.servers": bootstrap}
    with Admin(config) as admin:
        admin.create_topics({copy: 3})
        source_before = sum(o.end for o in admin.group_offsets("none", filled_topic))
    source = KafkaDatasource([filled_topic], config)
    ds = ray.data.read_datasource(source, override_num_blocks=source.task_count())
    sink = KafkaDatasink(copy, config)
    ds.write_datasink(sink)
    assert (sink.delivered, sink.failed) == (3000, 0)
    back = ray.data.read_datasource(KafkaDatasource(copy, config)).take_all()
    assert sorted((r["partition"], r["key"], r["value"]) for r in back) == sorted(
        (i % 3, b"k%d" % i, b"v%d" % i) for i in range(3000))
    with Admin(config) as admin:  # nothing went back into the topic the rows came from
        assert sum(o.end for o in admin.group_offsets("none", filled_topic)) == source_before


def test_a_column_neither_a_sink_column_nor_a_read_column_is_refused_naming_it(ray_for_spark, bootstrap, topic_name):
    from raykafka.spark_bridge.ray_data import KafkaDatasink

    rows = [{"value": b"v", "offset": 1, "colour": "red"}]
    with pytest.raises(ValueError, match=r"columns \['colour'\] are not Kafka sink columns"):
        ray.data.from_items(rows).write_datasink(KafkaDatasink(topic_name("refused"), {"bootstrap.servers": bootstrap}))


def test_a_block_larger_than_buffer_memory_is_written_in_slices(ray_for_spark, bootstrap, topic_name):
    import pyarrow as pa

    from raykafka.spark_bridge.writer import write_blocks

    topic = topic_name("bigblock")
    config = {"bootstrap.servers": bootstrap, "buffer.memory": 400_000}
    with Admin(config) as admin:
        admin.create_topics({topic: 2})
    block = pa.table({"value": [b"x" * 100 + b"%d" % i for i in range(20_000)]})
    assert block.nbytes > 4 * 400_000
    assert write_blocks([block], topic, config) == {"delivered": 20_000, "failed": 0}
    back = ray.data.read_datasource(KafkaDatasource(topic, {"bootstrap.servers": bootstrap})).count()
    assert back == 20_000


def test_writes_one_after_another_share_a_producer_given_to_them(ray_for_spark, bootstrap, topic_name,
                                                                 live_actors, producer):
    """`write_dataset(..., producer=p)` writes through `p` and leaves it open for the next write;
    its actors stay the same ones, and every row of both writes is read back once."""
    from raykafka.spark_bridge.writer import write_dataset

    topic = topic_name("shared")
    config = {"bootstrap.servers": bootstrap}
    with Admin(config) as admin:
        admin.create_topics({topic: 2})
    first = ray.data.from_items([{"value": b"a%d" % i} for i in range(3000)])
    with pytest.raises(ValueError, match="not both"):  # which one would apply is unclear: refused
        write_dataset(first, topic, config, producer=producer)
    assert write_dataset(first, topic, producer=producer) == {"delivered": 3000, "failed": 0}
    actors = live_actors(producer.name + "/")
    second = ray.data.from_items([{"value": b"b%d" % i} for i in range(2000)])
    assert write_dataset(second, topic, producer=producer) == {"delivered": 2000, "failed": 0}
    assert producer.send(topic, b"still open").result(30).offset >= 0
    assert live_actors(producer.name + "/") == actors
    values = [r["value"] for r in ray.data.read_datasource(KafkaDatasource(topic, config)).take_all()]
    assert sorted(values) == sorted([b"a%d" % i for i in range(3000)] + [b"b%d" % i for i in range(2000)]
                                    + [b"still open"])


def test_writes_with_one_config_share_the_cached_pipelines(ray_for_spark, bootstrap, topic_name, live_actors,
                                                           wait_for):
    """The first write with a config starts its node writers and their pipelines; the next with
    the same config uses them (the same actors), a bad block does not cost them, and closing the
    cache stops every one of their actors."""
    from raykafka.spark_bridge.node_writers import POOLS
    from raykafka.spark_bridge.writer import write_dataset

    POOLS.close_all()
    topic = topic_name("cached")
    config = {"bootstrap.servers": bootstrap, "client.id": "cache-test"}
    with Admin(config) as admin:
        admin.create_topics({topic: 2})
    first = ray.data.from_items([{"value": b"a%d" % i} for i in range(1000)], override_num_blocks=2)
    assert write_dataset(first, topic, config) == {"delivered": 1000, "failed": 0}
    assert len(POOLS) == 1
    pool = POOLS.acquire(config, 1)
    POOLS.release(pool)
    names = [ray.get(w.where.remote())[1] for w in pool.handles()]

    def pipeline_actors() -> list[str]:
        return sorted(a for name in names for a in live_actors(name + "/"))

    actors = pipeline_actors()
    assert actors
    with pytest.raises(ValueError, match="not Kafka sink columns"):
        write_dataset(ray.data.from_items([{"value": b"x", "colour": "red"}]), topic, config)
    second = ray.data.from_items([{"value": b"b%d" % i} for i in range(500)], override_num_blocks=2)
    assert write_dataset(second, topic, dict(config)) == {"delivered": 500, "failed": 0}
    assert len(POOLS) == 1 and pipeline_actors() == actors
    POOLS.close_all()
    assert len(POOLS) == 0
    wait_for(lambda: pipeline_actors() == [])  # an actor's end reaches the GCS a moment later
    values = [r["value"] for r in ray.data.read_datasource(KafkaDatasource(topic, config)).take_all()]
    assert sorted(values) == sorted([b"a%d" % i for i in range(1000)] + [b"b%d" % i for i in range(500)])


def test_a_cached_producer_idle_past_its_timeout_is_closed(ray_for_spark, bootstrap, live_actors, wait_for):
    import threading

    from raykafka.spark_bridge.producer_cache import ProducerCache

    cache = ProducerCache(idle_timeout=3.0)
    producer = cache.acquire({"bootstrap.servers": bootstrap})
    cache.release(producer)  # idle: its timer starts
    for _ in range(5):  # writes one after another: one idle timer at a time, not one per write
        assert cache.acquire({"bootstrap.servers": bootstrap}) is producer
        cache.release(producer)
    timers = [t for t in threading.enumerate() if isinstance(t, threading.Timer)
              and t.function == cache._close_if_idle and not t.finished.is_set()]
    assert len(timers) == 1
    assert cache.closed_idle.wait(60)
    assert len(cache) == 0 and producer._closed
    wait_for(lambda: live_actors(producer.name + "/") == [])


def test_read_dataset_runs_its_tasks_at_once_without_touching_the_global_context(ray_for_spark, bootstrap,
                                                                                   filled_topic):
    from ray.data import DataContext

    from raykafka.spark_bridge.reader import read_dataset

    before = DataContext.get_current().op_resource_reservation_enabled
    ds = read_dataset(filled_topic, {"bootstrap.servers": bootstrap})
    assert ds.context.op_resource_reservation_enabled is False
    assert DataContext.get_current().op_resource_reservation_enabled == before
    assert ds.count() == 3000


def test_a_count_is_of_records_not_offsets_on_a_transactional_topic(ray_for_spark, bootstrap, topic_name):
    """Each committed transaction leaves a marker at an offset of its own, which no reader hands
    out: a count (at either isolation level) counts the records, as reading them all does."""
    from raykafka.driver.producer import Producer
    from raykafka.spark_bridge.reader import read_dataset

    topic = topic_name("txcount")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 1})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    try:
        producer.init_transactions()
        for i in range(3):
            producer.begin_transaction()
            producer.send_batch(topic, [b"a%d" % i, b"b%d" % i])
            producer.commit_transaction()
    finally:
        producer.close(30)
    with Admin(bootstrap) as admin:
        assert admin.list_offsets(topic, "latest") == {0: 9}  # 6 records and 3 markers
    for level in ("read_uncommitted", "read_committed"):
        ds = read_dataset(topic, {"bootstrap.servers": bootstrap, "isolation.level": level})
        assert ds.count() == len(ds.take_all()) == 6, level


def test_read_dataset_keeps_the_blocks_its_tasks_yield(ray_for_spark, bootstrap, topic_name):
    """Ray Data asks a source for 200 blocks, or one per MiB it expects, and cuts the blocks of
    a source that makes fewer tasks into pieces to make them up (here 8 blocks from 2 tasks,
    `SplitBlocks(4)`, before `read_dataset` asked for as many blocks as it has tasks)."""
    from raykafka.spark_bridge.reader import read_dataset

    topic = topic_name("rdsblocks")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 3})
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(60_000):
        producer.produce(topic, value=b"%0100d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    ds = read_dataset(topic, {"bootstrap.servers": bootstrap}).materialize()
    assert ds.num_blocks() <= 3  # a table per range at most (Ray Data may join a task's tables)
    values = [v for t in ray.get(ds.to_arrow_refs()) for v in t.column("value").to_pylist()]
    assert sorted(int(v) for v in values) == list(range(60_000))


def test_a_read_task_reads_all_its_ranges_over_one_connection_to_the_broker(bootstrap, filled_topic,
                                                                           monkeypatch):
    from raykafka.spark_bridge import ray_data
    from raykafka.wire import range_reader

    clusters = []

    class Counted(range_reader.Cluster):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            clusters.append(self)

    monkeypatch.setattr(range_reader, "Cluster", Counted)
    config = {"bootstrap.servers": bootstrap}
    tables = list(ray_data.read_ranges(config, resolve_ranges(config, filled_topic, "earliest", "latest")))
    assert len(clusters) == 1
    assert sorted(t.column("partition")[0].as_py() for t in tables) == [0, 1, 2]
    assert all(t.column("offset").to_pylist() == list(range(1000)) for t in tables)


def test_a_range_that_cannot_be_read_ends_its_task_naming_it(bootstrap, filled_topic):
    """One range of a task ends past its partition's end: the read fails with an error naming
    that partition, and the ranges read beside it stop with it (no task is left behind)."""
    import asyncio

    from raykafka.spark_bridge.offsets import PartitionRange
    from raykafka.spark_bridge.ray_data import read_ranges
    from raykafka.wire.errors import KafkaError

    config = {"bootstrap.servers": bootstrap}
    ranges = resolve_ranges(config, filled_topic, "earliest", "latest")
    with pytest.raises(KafkaError, match=f"{filled_topic}/1 ends at 1000, before the requested end 5000"):
        list(read_ranges(config, [*ranges, PartitionRange(filled_topic, 1, 900, 5000)]))
    with pytest.raises(RuntimeError):  # asyncio.run ended its loop: nothing of the read runs on
        asyncio.get_running_loop()


@pytest.fixture()
def ray_data_terminal():
    """What a terminal handler of the `ray.data` logger would print (a handler of the test's own, at
    INFO as Ray Data's console handler: pytest's capture does not reliably see Ray Data's)."""
    import io
    import logging

    terminal = io.StringIO()
    handler = logging.StreamHandler(terminal)
    handler.setLevel(logging.INFO)
    ray_data_log = logging.getLogger("ray.data")
    ray_data_log.addHandler(handler)
    try:
        yield terminal
    finally:
        ray_data_log.removeHandler(handler)


def _finished_in_ray_data_files() -> int:
    """Executions Ray Data's log files of this session say finished."""
    from pathlib import Path

    from ray.data._internal.logging import get_log_directory

    return sum(f.read_text().count("execution finished") for f in Path(get_log_directory()).glob("ray-data*.log"))


def test_a_write_keeps_ray_datas_lines_of_its_own_executions_off_the_terminal(ray_for_spark, bootstrap, topic_name,
                                                                             ray_data_terminal, producer):
    """`write_dataset` iterates the caller's Dataset: Ray Data's lines about that execution (its
    plan, progress and time) go to Ray Data's log files, not to the terminal, through either
    route; an execution the caller starts (`ds.count()`) still prints them there."""
    from raykafka.spark_bridge.writer import write_dataset

    topic = topic_name("quiet")
    config = {"bootstrap.servers": bootstrap}
    with Admin(config) as admin:
        admin.create_topics({topic: 2})
    ds = ray.data.range(500).filter(lambda row: row["id"] >= 0).map(lambda row: {"value": b"q%d" % row["id"]})
    finished_before = _finished_in_ray_data_files()
    assert write_dataset(ds, topic, producer=producer) == {"delivered": 500, "failed": 0}
    with pytest.raises(TypeError, match="expected a ray.data.Dataset, not list"):
        write_dataset([{"value": b"x"}], topic, producer=producer)
    assert write_dataset(ds, topic, config) == {"delivered": 500, "failed": 0}
    assert "Dataset" not in ray_data_terminal.getvalue(), ray_data_terminal.getvalue()
    assert _finished_in_ray_data_files() >= finished_before + 2  # both writes' executions, in Ray Data's files
    assert ray.data.range(300).filter(lambda row: row["id"] >= 0).count() == 300
    assert "execution finished" in ray_data_terminal.getvalue()  # the caller's own execution prints as Ray Data does


@pytest.mark.slow  # the default tier keeps the write's, through the same quiet copy
def test_read_kafka_keeps_ray_datas_lines_of_its_execution_off_the_terminal(spark, bootstrap, filled_topic,
                                                                          ray_data_terminal):
    """`read_kafka` runs a Ray Data execution of its own to hand Spark the records: its lines
    stay off the terminal, and the DataFrame holds every record."""
    from raykafka.spark_bridge.reader import read_kafka

    assert read_kafka(spark, filled_topic, config={"bootstrap.servers": bootstrap}).count() == 3000
    assert "Dataset" not in ray_data_terminal.getvalue(), ray_data_terminal.getvalue()
