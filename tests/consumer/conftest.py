"""Helpers for the consumer tests: test data written by confluent-kafka (Ray per module: tests/conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest


def wait_for(predicate: Callable[[], object], timeout: float = 30.0, interval: float = 0.1, what: str = "") -> None:
    """Poll `predicate` until it is truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from raykafka.driver.admin import Admin

    with Admin(bootstrap) as admin:
        admin.create_topics({name: partitions})


def produce(bootstrap: str, topic: str, messages: list[dict], **config) -> list[tuple[int, int]]:
    """Write `messages` (dicts with value, and optionally key, headers, timestamp, partition) with
    confluent-kafka; return each message's (partition, offset) in order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    results: list = [None] * len(messages)

    def make_cb(i: int):
        def cb(err, msg):
            results[i] = err or (msg.partition(), msg.offset())
        return cb

    for i, m in enumerate(messages):
        kwargs = {k: m[k] for k in ("key", "headers", "timestamp", "partition") if k in m}
        while True:
            try:
                producer.produce(topic, m.get("value"), on_delivery=make_cb(i), **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0
    bad = [r for r in results if not isinstance(r, tuple)]
    assert not bad, bad[:3]
    return results


@pytest.fixture(scope="session")
def kit():
    """The helpers above, for test modules (importlib mode cannot import conftest by name)."""
    return SimpleNamespace(wait_for=wait_for, create_topic=create_topic, produce=produce)
