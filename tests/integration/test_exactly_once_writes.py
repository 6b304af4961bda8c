"""Exactly-once writes of a Ray Dataset through the node writers (`exactly_once=True`), on tansu
with real Ray actors. A writer is killed (`ray.kill`, restarted by Ray) at two moments, each in
its own test:
- mid-block, with the broker held so that the block cannot finish: the restarted writer fences
  the attempt, whose rows end aborted in the log (a read_uncommitted count holds them too), and
  writes the block again;
- as the block's commit goes through: the attempt is aborted, or its commit went through and the
  restarted writer finds the block's marker and writes nothing again.
Either way a read_committed read back holds every row exactly once. A wrong-typed option is
refused with `ConfigError` before any actor starts.

Read back with the helpers of test_transactions_wire.py (tansu serves aborted records to
every reader: only the markers tell them apart).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import psutil
import pyarrow as pa
import pytest

from raykafka.driver.admin import Admin
from raykafka.spark_bridge import write_dataset
from raykafka.spark_bridge.node_writers import POOLS, PoolKind
from raykafka.spark_bridge.reader import read_dataset
from raykafka.wire.cluster import Cluster
from raykafka.wire.config import parse_config
from raykafka.wire.errors import ConfigError

from .test_transactions_wire import PARTITIONS, read_committed_ours

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(600)]

BLOCKS, BLOCK_ROWS = 8, 25_000


def process_gone(pid: int) -> bool:
    """The process has exited (or is a zombie): asked once, so that it cannot end between two looks."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


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
    async def read() -> list[bytes]:
        cluster = Cluster(parse_config({"bootstrap.servers": bootstrap}))
        try:
            return (await read_committed_ours(cluster, topic))[0]
        finally:
            await cluster.close()

    in_log = read_dataset(topic, {"bootstrap.servers": bootstrap, "isolation.level": "read_uncommitted"}).count()
    return asyncio.run(read()), in_log


def killed_write(bootstrap: str, topic: str, kill: Callable[[Any, Callable[[], None]], None]) -> tuple[int, int]:
    """Write BLOCKS blocks exactly once through one node writer; `kill(writer, alive)` kills it
    mid-write (`alive()` fails the test if the write has already ended). Checks that every row
    was read_committed exactly once; returns (rows, read_uncommitted count)."""
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: PARTITIONS})
    # small batches: a block takes several Produce requests, so it is acknowledged a part at a time
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384}
    pool = POOLS.acquire(config, PoolKind(1, True))  # the pool the write takes: its writer is the one killed
    POOLS.release(pool)
    (writer,) = pool.handles()
    ds = blocks_dataset(topic)
    outcome: dict = {}

    def write() -> None:
        try:
            outcome["counts"] = write_dataset(ds, topic, config, exactly_once=True)
        except BaseException as exc:  # raised again in the test's thread
            outcome["error"] = exc

    def alive() -> None:
        if not thread.is_alive():  # the write ended first: there is nothing left to kill mid-block
            raise AssertionError(f"the write ended before its writer was killed mid-block: {outcome}")

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        kill(writer, alive)
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
    # and so does the consumers' own read_committed (a Ray Data read), fetch cuts and all
    ours = Counter(read_dataset(topic, {"bootstrap.servers": bootstrap, "isolation.level": "read_committed"})
                   .to_pandas()["value"])
    assert ours == Counter(expected)
    return rows, in_log


def writer_pid(writer: Any) -> int:
    import ray

    return ray.get(writer.__ray_call__.remote(lambda _self: os.getpid()))


def test_a_writer_killed_mid_block_is_fenced_and_its_rows_aborted(ray_session, broker, topic_name, wait_for):
    """The kill lands while the block is part acknowledged and the broker is held (SIGSTOP): the
    writer's send cannot end, so its commit cannot have been sent. The restarted writer fences
    the attempt, whose rows end aborted in the log, and writes the block again."""
    import ray

    held: list[int] = []

    def kill(writer: Any, alive: Callable[[], None]) -> None:
        pid = writer_pid(writer)
        for _ in range(BLOCKS):  # a block whose last answers outran the hold: try the next one
            def part_acknowledged() -> bool:
                alive()
                return 0 < ray.get(writer.acknowledged.remote()) < BLOCK_ROWS

            wait_for(part_acknowledged, timeout=300, interval=0.002)
            os.kill(broker.process.pid, signal.SIGSTOP)
            try:
                seen = settled(lambda: ray.get(writer.acknowledged.remote()))  # answers already sent are in
                if 0 < seen < BLOCK_ROWS:
                    held.append(seen)
                    ray.kill(writer, no_restart=False)  # Ray restarts it; its init_transactions fences the attempt
                    wait_for(lambda: process_gone(pid), timeout=30)
                    return
            finally:
                os.kill(broker.process.pid, signal.SIGCONT)
        raise AssertionError("no block was seen part acknowledged with the broker held")

    rows, in_log = killed_write(broker.bootstrap, topic_name("eos-kill"), kill)
    assert len(held) == 1
    assert in_log > rows  # the killed attempt's rows were written, then aborted


def settled(read: Callable[[], int], quiet: float = 0.2, timeout: float = 10.0) -> int:
    """`read()` once it gives the same value twice, `quiet` s apart (answers the broker sent
    before it was held reach the writer): what it settled at."""
    deadline = time.monotonic() + timeout
    last = read()
    while time.monotonic() < deadline:
        time.sleep(quiet)  # no event says "nothing more is coming": the value stays put for a while
        now = read()
        if now == last:
            return now
        last = now
    raise AssertionError(f"the writer's acknowledged count did not settle with the broker held: {last}")


@pytest.mark.slow  # 12 s; the default tier keeps a writer killed mid-block
def test_a_writer_killed_as_its_commit_goes_through_writes_its_block_once(ray_session, bootstrap, topic_name,
                                                                          wait_for):
    """The kill lands while the block's commit is under way: it may land before the commit (the
    attempt is aborted) or after it (the restarted writer finds the block's marker and does not
    write it again); either way, exactly once."""
    import ray

    def kill(writer: Any, alive: Callable[[], None]) -> None:
        def committing() -> bool:
            alive()
            return ray.get(writer.acknowledged.remote()) == BLOCK_ROWS

        wait_for(committing, timeout=300, interval=0.002)
        ray.kill(writer, no_restart=False)

    rows, in_log = killed_write(bootstrap, topic_name("eos-commit-kill"), kill)
    assert in_log in (rows, rows + BLOCK_ROWS)  # the marker path, or the whole block aborted


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
