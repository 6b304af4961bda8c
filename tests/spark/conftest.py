"""The run's one Ray (it has the JVM options Spark needs), one Spark session (RayDP) for the whole
test run, and a read_committed read back."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_for_spark(ray_runtime: Callable[..., None]) -> Iterator[None]:
    """The run's one Ray (tests/conftest.py), which has the JVM options Spark needs; a Ray
    started otherwise (by a bare `Producer`, with Ray's defaults) is replaced by it."""
    ray_runtime(replace_foreign=True)
    yield


@pytest.fixture(scope="session")
def spark(ray_for_spark: None) -> Iterator[Any]:
    from raykafka.spark_bridge.session import init_spark, stop_spark

    session = init_spark("raykafka-tests")
    yield session
    stop_spark()


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
