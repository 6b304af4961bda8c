"""The Flusher's connections reopen under the cluster's `ReconnectBackoff`, without Ray.

A Flusher (a BrokerWorker's part that owns the connection) points at a port nobody listens on;
sets are handed to it for a while, each one trying the connection again. The attempts are
spaced as `reconnect.backoff.ms` doubling up to `reconnect.backoff.max.ms` says, so only a few
fit in the window, and every batch goes to the RetryHandler, none lost.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from raykafka.actors.batch import MessageBatch, ProduceSet
from raykafka.actors.flusher import Flusher
from raykafka.actors.producer_results import Mailbox
from raykafka.driver.embedded_broker import free_port
from raykafka.wire.config import parse_config

from ..reference import Calls, measured

pytestmark = pytest.mark.timeout(60)

BACKOFF_MS = 100
BACKOFF_MAX_MS = 400
WINDOW_S = 1.5
JITTER_LOW = 0.75  # ReconnectBackoff's jitter: a wait is at least this share of the backoff
# attempts at 0, then no sooner than 0.075, 0.15, 0.3, 0.3, ... apart: at most 7 in the window
MOST_ATTEMPTS = 7
FEWEST_ATTEMPTS = 3  # at most 0.15, 0.3, 0.6 apart even with full jitter; loose for a busy machine


def test_a_flusher_reconnecting_to_a_dead_broker_waits_the_configured_backoff():
    config = parse_config({"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": False,
                           "reconnect.backoff.ms": BACKOFF_MS, "reconnect.backoff.max.ms": BACKOFF_MAX_MS})
    retry_handler = Calls()
    ctx = SimpleNamespace(config=config, retry_handler=retry_handler, prefix="p/", transactions=None)
    attempts: list[float] = []

    async def scenario() -> tuple[Flusher, int]:
        flusher = Flusher(ctx, 1, "127.0.0.1", free_port(), mailbox=Mailbox())
        connect = flusher.conn.connect

        async def counted_connect():
            attempts.append(time.monotonic())
            return await connect()

        flusher.conn.connect = counted_connect
        sets = 0
        try:
            deadline = time.monotonic() + WINDOW_S
            while time.monotonic() < deadline:
                batch = measured(MessageBatch(topic="t", partition=sets % 2, ids=[sets], values=[b"v"]))
                await flusher.submit([ProduceSet([batch])])
                sets += 1
            await until(lambda: len(retry_handler.batches("retry")) == sets)
        finally:
            for task in flusher.tasks:
                task.cancel()
            await flusher.conn.close()
        return flusher, sets

    flusher, sets = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert sets == len(attempts), "every set tried the connection once"
    assert FEWEST_ATTEMPTS <= len(attempts) <= MOST_ATTEMPTS, attempts
    for i, (before, after) in enumerate(zip(attempts, attempts[1:], strict=False)):
        base = min(BACKOFF_MS * 2 ** i, BACKOFF_MAX_MS) / 1000
        assert after - before >= JITTER_LOW * base, (i, after - before, base)
    backoff = flusher.backoffs[flusher.conn]
    assert backoff.attempts == len(attempts) and backoff.backoff == BACKOFF_MAX_MS / 1000


async def until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)
