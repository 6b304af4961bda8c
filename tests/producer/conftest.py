"""Fixtures for the producer tests: Ray once per module (unless already running). `wait_for` and
`live_actors` come from the shared conftest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    import ray

    started = False
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        started = True
    yield
    if started:
        ray.shutdown()
