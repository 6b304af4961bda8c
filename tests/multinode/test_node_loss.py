"""A worker node removed mid-write and mid-read, on a three-node Ray cluster on this machine.

What holds, and is asserted:
- mid-write: every row is delivered at least once and none fails. The removed node's writer is
  restarted on a live node; the blocks it held are sent again (so rows it had delivered before
  the loss are delivered twice: counted and printed, not bounded), and blocks that lived on the
  node are rebuilt by Ray from their lineage and written from where they are rebuilt.
- mid-read: the read task on the removed node is run again by Ray on a live node, and the read
  returns every record exactly once (the lost task's output never reached the caller).
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
import ray

from raykafka.driver.admin import Admin
from raykafka.spark_bridge.node_writers import POOLS, where, write_bundles
from raykafka.spark_bridge.ray_data import KafkaDatasource

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.slow]

BLOCKS = 24
BLOCK_ROWS = 10_000


def sink_rows(batch: pa.Table) -> pa.Table:
    ids = batch.column("id").to_pylist()
    return pa.table({"key": [b"k%d" % (i % 13) for i in ids], "value": [b"%08d" % i for i in ids]})


def test_a_worker_node_removed_mid_write_costs_no_row(three_nodes, bootstrap, topic_name):
    topic = topic_name("loss-write")
    config = {"bootstrap.servers": bootstrap}
    with Admin(config) as admin:
        admin.create_topics({topic: 6})
    doomed = three_nodes.workers[1]
    ds = ray.data.range(BLOCKS * BLOCK_ROWS, override_num_blocks=BLOCKS).map_batches(
        sink_rows, batch_format="pyarrow", batch_size=None).materialize()  # its blocks spread over the nodes
    seen: list[str] = []

    def on_outcome(outcome) -> None:  # on the driver, as each block ends: the first from the doomed node removes it
        seen.append(outcome.node_id)
        if outcome.node_id == doomed.node_id and doomed in three_nodes.workers:
            three_nodes.workers.remove(doomed)
            three_nodes.cluster.remove_node(doomed, allow_graceful=False)

    yielded = []

    def bundles():  # what Ray Data hands the write, counted
        for bundle in ds.iter_internal_ref_bundles():
            yielded.append(sum(e.metadata.num_rows for e in bundle.blocks))
            yield bundle

    pool = POOLS.acquire(config, 1)
    try:
        pool.cover_nodes()
        result = write_bundles(pool.routes(), topic, bundles(), on_outcome)
    finally:
        POOLS.release(pool)
    print(f"mid-write: {len(yielded)} bundles of {sum(yielded)} rows yielded, {len(seen)} block outcomes")

    assert doomed.node_id in seen and doomed not in three_nodes.workers  # it was removed mid-write
    after = seen[seen.index(doomed.node_id) + 1:]
    assert [n for n in after if n != doomed.node_id]  # blocks went on, from the live nodes
    assert (result.delivered, result.failed) == (BLOCKS * BLOCK_ROWS, 0)
    moved_to, _ = where(pool.writers[doomed.node_id][0], timeout=120)
    assert moved_to != doomed.node_id  # its writer was restarted on a live node

    values = [r["value"] for r in ray.data.read_datasource(KafkaDatasource(topic, config)).take_all()]
    assert set(values) == {b"%08d" % i for i in range(BLOCKS * BLOCK_ROWS)}  # every row at least once
    duplicates = len(values) - len(set(values))
    print(f"node removed mid-write: {len(values)} records read for {BLOCKS * BLOCK_ROWS} rows, "
          f"{duplicates} duplicates, 0 failed")


def test_a_read_task_on_a_removed_node_is_run_again_elsewhere(three_nodes, bootstrap, filled_topic, signal):
    head_id = three_nodes.head_id

    def hold_on_doomed(batch: pa.Table) -> pa.Table:
        """Fused into the read task: on the first worker node a read task reaches (the node to be
        removed), it says so and waits to be killed; elsewhere it reads on."""
        node_id = ray.get_runtime_context().get_node_id()
        if node_id != head_id and ray.get(signal.claim.remote(node_id)):
            threading.Event().wait(600)
        return batch

    # the read tasks spread over the nodes, so that a worker node runs some (Ray's default may
    # place them all on one node: the head, which cannot be removed)
    spread = {"scheduling_strategy": "SPREAD"}
    ds = ray.data.read_datasource(KafkaDatasource(filled_topic, {"bootstrap.servers": bootstrap}), ray_remote_args=spread)
    ds = ds.map_batches(hold_on_doomed, batch_format="pyarrow", **spread)
    out: dict[str, object] = {}
    reader = threading.Thread(target=lambda: out.update(rows=ds.take_all()), daemon=True)
    reader.start()
    chosen = ray.get(signal.wait.remote(180), timeout=200)
    assert chosen is not None, "no read task ran on a worker node"
    (doomed,) = [w for w in three_nodes.workers if w.node_id == chosen]
    three_nodes.workers.remove(doomed)
    three_nodes.cluster.remove_node(doomed, allow_graceful=False)
    reader.join(300)
    assert not reader.is_alive(), "the read did not end after the node was removed"
    rows = out["rows"]
    assert sorted((r["partition"], r["offset"]) for r in rows) == [(p, o) for p in range(6) for o in range(5000)]
    assert all(r["value"] == b"r%d-%d" % (r["partition"], r["offset"]) for r in rows)
