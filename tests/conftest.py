"""Shared fixtures: one real tansu broker per test session, on a free loopback port."""

from __future__ import annotations

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
