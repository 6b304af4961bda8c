"""Helpers for the consumer tests: test data written by confluent-kafka (Ray per module: tests/conftest.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

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


def mock_produce(cluster: Any, topic: str, partition: int, values: list[bytes], per_batch: int = 0) -> None:
    """Wire-level Produce (acks=1) to a mock cluster's current leader of the partition; one batch
    per `per_batch` values (all in one if 0)."""
    from raykafka.wire import messages
    from raykafka.wire.connection import BrokerConnection
    from raykafka.wire.record_encoding import encode_record_batch

    host, port = cluster.brokers[cluster.leader(topic, partition)].address.rsplit(":", 1)
    chunks = [values[i:i + per_batch] for i in range(0, len(values), per_batch)] if per_batch else [values]

    async def go():
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            for chunk in chunks:
                body = {"acks": 1, "timeout_ms": 5000, "topic_data": [{"name": topic, "partition_data": [
                    {"index": partition, "records": encode_record_batch(chunk)}]}]}
                response = await conn.request(messages.PRODUCE, body)
                assert response.responses[0].partition_responses[0].error_code == 0
        finally:
            await conn.close()

    asyncio.run(go())


@pytest.fixture(scope="session")
def kit():
    """The helpers above, for test modules (importlib mode cannot import conftest by name)."""
    return SimpleNamespace(wait_for=wait_for, create_topic=create_topic, produce=produce, mock_produce=mock_produce)
