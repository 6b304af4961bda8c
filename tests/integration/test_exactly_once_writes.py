"""Exactly-once writes of a Ray Dataset through the node writers (`exactly_once=True`), on tansu
with real Ray actors: a writer killed mid-block (`ray.kill`, restarted by Ray) fences its own
attempt when it comes back, the block is written again under the same transactional id, and a
read_committed read back holds every row exactly once, while a read_uncommitted count holds
the aborted attempt's rows too (so the kill really landed mid-block). A wrong-typed option is
refused with `ConfigError` before any actor starts.

Read back with the helpers of test_transactions_wire.py (tansu serves aborted records to
every reader: only the markers tell them apart).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import pyarrow as pa
import pytest

from raykafka.driver.admin import Admin
from raykafka.spark_bridge import write_dataset
from raykafka.spark_bridge.node_writers import POOLS, PoolKind
from raykafka.wire.cluster import Cluster
from raykafka.wire.config import parse_config
from raykafka.wire.errors import ConfigError

from .test_transactions_wire import PARTITIONS, read_committed_ours

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(600)]

BLOCKS, BLOCK_ROWS = 8, 25_000


def blocks_dataset(tag: str):
    import ray

    tables = [pa.table({"key": [f"k{i % 100}".encode() for i in range(b * BLOCK_ROWS, (b + 1) * BLOCK_ROWS)],
                        "value": [f"{tag}-{i}".encode() for i in range(b * BLOCK_ROWS, (b + 1) * BLOCK_ROWS)]})
              for b in range(BLOCKS)]
    return ray.data.from_arrow(tables)


def read_back(bootstrap: str, topic: str) -> tuple[list[bytes], int]:
    """The read_committed values (by markers, read by the wire-level helper), and how many
    records a read_uncommitted read finds (raykafka's Ray Data read: tansu serves it every data
    record, committed, aborted or open)."""
    from raykafka.spark_bridge.reader import read_dataset

    async def read() -> list[bytes]:
        cluster = Cluster(parse_config({"bootstrap.servers": bootstrap}))
        try:
            return (await read_committed_ours(cluster, topic))[0]
        finally:
            await cluster.close()

    in_log = read_dataset(topic, {"bootstrap.servers": bootstrap, "isolation.level": "read_uncommitted"}).count()
    return asyncio.run(read()), in_log


def test_a_writer_killed_mid_block_leaves_every_row_committed_exactly_once(ray_session, bootstrap, topic_name,
                                                                           wait_for):
    import ray

    topic = topic_name("eos-kill")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: PARTITIONS})
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    pool = POOLS.acquire(config, PoolKind(1, True))  # the pool the write takes: its writer is the one killed
    POOLS.release(pool)
    (writer,) = pool.handles()
    ds = blocks_dataset(topic)
    done = [0]
    outcome: dict = {}

    def write() -> None:
        try:
            outcome["counts"] = write_dataset(ds, topic, config, on_progress=lambda n: done.__setitem__(0, done[0] + n),
                                              exactly_once=True)
        except BaseException as exc:  # raised again in the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        def mid_block() -> bool:
            """A block has ended, and the next one's transaction is open with rows in the log (all
            of them once its commit is under way)."""
            if not thread.is_alive():  # the write ended first: there is nothing left to kill mid-block
                raise AssertionError(f"the write ended before its writer was seen mid-block: {outcome}")
            return done[0] >= BLOCK_ROWS and ray.get(writer.acknowledged.remote()) > 0

        wait_for(mid_block, timeout=300, interval=0.005)
        ray.kill(writer, no_restart=False)  # Ray restarts it; its init_transactions fences the attempt
    finally:
        thread.join(timeout=400)
        POOLS.close_all()
    assert not thread.is_alive(), "the write did not end"
    assert "error" not in outcome, outcome.get("error")
    rows = BLOCKS * BLOCK_ROWS
    assert outcome["counts"] == {"delivered": rows, "failed": 0}
    committed, in_log = read_back(bootstrap, topic)
    counts = Counter(committed)
    expected = {f"{topic}-{i}".encode() for i in range(rows)}
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    missing = len(expected - counts.keys())
    print(f"exactly-once kill run: {rows} rows, {len(committed)} read_committed, {duplicates} duplicates, "
          f"{missing} missing, {in_log} read_uncommitted ({in_log - rows} aborted)")
    assert (duplicates, missing, set(counts) - expected) == (0, 0, set())
    # the killed attempt's rows were written, then aborted (in_log > rows); or, when the kill landed
    # as its commit went through, the restarted writer found the block's marker and wrote nothing again
    assert in_log >= rows


@pytest.mark.parametrize("given", ["yes", 1, None])
def test_a_wrong_typed_exactly_once_is_refused_before_anything_starts(bootstrap, given):
    from raykafka.spark_bridge.ray_data import KafkaDatasink

    config = {"bootstrap.servers": bootstrap}
    with pytest.raises(ConfigError, match="^exactly_once: expected True or False"):
        write_dataset(object(), "t", config, exactly_once=given)
    with pytest.raises(ConfigError, match="^exactly_once: expected True or False"):
        KafkaDatasink("t", config, exactly_once=given)
    assert len(POOLS) == 0  # no writer pool started


def test_a_transactional_id_without_exactly_once_is_refused(bootstrap):
    with pytest.raises(ConfigError, match="^transactional.id: a write takes it as the prefix"):
        write_dataset(object(), "t", {"bootstrap.servers": bootstrap, "transactional.id": "w"})
