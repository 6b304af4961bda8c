"""benchmarks/in_process_writer.py, the experiment `scaling demo-write` times: a writer of one
process a node, its producer's stages run in it, driven by `node_writers.write_refs` as
`write_kafka`'s writers are. Every row is written once with its key, value, header and partition,
and the writer is gone after; a topic the broker does not have fails the block's rows, naming
the cause."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.data")

import ray  # noqa: E402

from raykafka.benchmarks.in_process_writer import start_writers, write_in_process  # noqa: E402
from raykafka.driver.admin import Admin  # noqa: E402
from raykafka.spark_bridge.node_writers import blocks_of  # noqa: E402
from raykafka.spark_bridge.ray_data import KafkaDatasource  # noqa: E402

pytestmark = [pytest.mark.broker, pytest.mark.ray]

ROWS = 4000


def _dataset():
    return ray.data.from_items([{"key": b"k%d" % (i % 10), "value": b"v%d" % i, "partition": i % 2,
                                 "headers": [{"key": "n", "value": b"%d" % i}]} for i in range(ROWS)],
                               override_num_blocks=4)


def test_every_row_is_written_once_through_a_writer_of_one_process(ray_session, bootstrap, topic_name):
    topic = topic_name("in-process")
    config = {"bootstrap.servers": bootstrap}
    with Admin(config) as admin:
        admin.create_topics({topic: 2})
    writers = start_writers(config)
    assert len(writers) == 1 and all(len(ws) == 1 for ws in writers.values())  # one process a node
    result = write_in_process(writers, blocks_of(_dataset().iter_internal_ref_bundles()), topic)
    assert result.counts() == {"delivered": ROWS, "failed": 0}
    back = ray.data.read_datasource(KafkaDatasource(topic, config)).take_all()
    assert sorted((r["key"], r["value"], r["partition"], r["headers"][0]["value"]) for r in back) == sorted(
        (b"k%d" % (i % 10), b"v%d" % i, i % 2, b"%d" % i) for i in range(ROWS))
    writer = next(iter(writers.values()))[0]
    with pytest.raises(ray.exceptions.RayActorError):  # stopped after the write
        ray.get(writer.where.remote(), timeout=30)


def test_a_topic_the_broker_lacks_fails_every_row_naming_it(ray_session, bootstrap, topic_name):
    topic = topic_name("in-process-missing")
    result = write_in_process(start_writers({"bootstrap.servers": bootstrap}),
                              blocks_of(_dataset().iter_internal_ref_bundles()), topic)
    assert (result.delivered, result.failed) == (0, ROWS)
    assert all(topic in cause for cause in result.causes), result.causes
