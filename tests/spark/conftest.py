"""The run's one Ray (it has the JVM options Spark needs) and its one Spark session (RayDP),
for each module, and a read_committed read back."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def ray_for_spark(ray_runtime: Callable[..., None]) -> Iterator[None]:
    """The run's one Ray (tests/conftest.py), which has the JVM options Spark needs; a Ray
    started otherwise (by a bare `Producer`, with Ray's defaults) is replaced by it. Asked again
    by each module: a module before it may have stopped Ray for a Ray of its own."""
    ray_runtime(replace_foreign=True)
    yield


@pytest.fixture(scope="module")
def spark(ray_for_spark: None, spark_runtime: Callable[[], Any]) -> Any:
    """The run's one Spark session (tests/conftest.py's `shared_spark`), started again if a module
    before this one stopped it with its Ray."""
    return spark_runtime()


def _read_committed(bootstrap: str, topic: str) -> tuple[list[bytes], int]:
    """The values a read_committed read of `topic` hands out (raykafka's reader, to each
    partition's last stable offset), and how many records a read_uncommitted read finds (the
    aborted ones too: tansu lists no aborted transactions in Fetch, so only a reader deciding by
    the commit and abort markers hides them)."""
    from raykafka.spark_bridge.reader import read_dataset

    config = {"bootstrap.servers": bootstrap}
    committed = read_dataset(topic, {**config, "isolation.level": "read_committed"}).select_columns(["value"])
    in_log = read_dataset(topic, {**config, "isolation.level": "read_uncommitted"}).count()
    return [row["value"] for row in committed.take_all()], in_log


@pytest.fixture()
def read_committed() -> Callable[..., tuple[list[bytes], int]]:
    """read_committed(bootstrap, topic): (values read_committed, records read_uncommitted)."""
    return _read_committed
