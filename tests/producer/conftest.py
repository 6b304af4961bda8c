"""Fixtures for the producer tests: Ray once per module (unless already running), helpers to wait
and to find a producer's live actors."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    import ray

    started = False
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        started = True
    yield
    if started:
        ray.shutdown()


def _wait_for(predicate: Callable[[], bool], timeout: float = 30.0, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def _live_actors(prefix: str) -> list[str]:
    """Names of this producer's actors that are still alive, from the GCS actor table.

    (`ray.util.state.list_actors` needs the dashboard, which `ray[data]` does not install; the
    GCS table is what it reads.)"""
    import ray
    import ray._private.state

    named = [n for n in ray.util.list_named_actors() if n.startswith(prefix)]
    table = [a["Name"] for a in ray._private.state.actors().values()
             if a["Name"].startswith(prefix) and a["State"] != "DEAD"]
    return sorted(set(named) | set(table))


@pytest.fixture()
def wait_for() -> Callable[..., None]:
    """wait_for(predicate, timeout=30): poll until true, else fail the test."""
    return _wait_for


@pytest.fixture()
def live_actors() -> Callable[[str], list[str]]:
    """live_actors(prefix): names of the actors with that prefix that are not dead."""
    return _live_actors
