"""Ray with the JVM options Spark needs, and one Spark session (RayDP) for the whole test run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_for_spark() -> Iterator[None]:
    import ray

    from raykafka.spark_bridge.session import init_ray

    if ray.is_initialized():  # started by another folder's fixture without the JVM options
        ray.shutdown()
    init_ray(num_cpus=2)
    yield
    from raykafka.spark_bridge.producer_cache import PRODUCERS

    PRODUCERS.close_all()  # while Ray is up, so the cached pipelines' actors are stopped cleanly
    ray.shutdown()


@pytest.fixture(scope="session")
def spark(ray_for_spark: None) -> Iterator[Any]:
    from raykafka.spark_bridge.session import init_spark, stop_spark

    session = init_spark("raykafka-tests")
    yield session
    stop_spark()
