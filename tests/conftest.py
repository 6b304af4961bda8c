"""Shared fixtures: one real tansu broker per test session, on a free loopback port; Ray per test
module; waiting on a condition; a producer's live actors."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from raykafka.driver.embedded_broker import EmbeddedBroker


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with EmbeddedBroker(log_path=log) as running:
        yield running


@pytest.fixture(scope="session")
def bootstrap(broker: EmbeddedBroker) -> str:
    return broker.bootstrap


@pytest.fixture()
def topic_name() -> Callable[[str], str]:
    """Unique topic names, so tests sharing the session's broker never see each other's data."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    return make


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    """Ray for one test module (started here unless it already runs), shut down after it."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
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
