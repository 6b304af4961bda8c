"""The fetch engine (`wire.fetch_round`) against the mock cluster over TCP, no Ray: one round for
several partitions, each partition's outcome, decoding within the answer, and the backoff."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from raykafka.mock import MockCluster
from raykafka.wire import messages
from raykafka.wire.config import parse_config
from raykafka.wire.connection import BrokerConnection
from raykafka.wire.fetch_round import back_off, fetch_round
from raykafka.wire.fetcher import Data, PartitionFetch, Retry
from raykafka.wire.record_encoding import encode_record_batch

pytestmark = pytest.mark.timeout(60)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_one_round_gives_each_asked_partition_its_outcome_and_decodes_within_the_answer():
    """Broker 1 leads partitions 0 and 3 of "t", not 1: one round asks all three; 0 and 3 come
    back as data (3 from offset 1 on), 1 as a retry (the leader is elsewhere)."""
    with MockCluster(n_brokers=3, topics={"t": 4}) as mock:
        config = parse_config({"bootstrap.servers": mock.bootstrap, "fetch.max.wait.ms": 10})

        async def scenario():
            conn = await BrokerConnection("127.0.0.1", mock.brokers[1].port, node_id=1).connect()
            try:
                for p in (0, 3):
                    body = {"acks": 1, "timeout_ms": 1000, "topic_data": [{"name": "t", "partition_data": [
                        {"index": p, "records": encode_record_batch([b"p%d-0" % p, b"p%d-1" % p])}]}]}
                    await conn.request(messages.PRODUCE, body)
                asked = {("t", 0): PartitionFetch(config, "t", 0, 0), ("t", 3): PartitionFetch(config, "t", 3, 1),
                         ("t", 1): PartitionFetch(config, "t", 1, 0)}
                timed = []

                async def timing(request):
                    timed.append(True)
                    return await request

                answer = await fetch_round(conn, config, asked, timed=timing, where="broker 1")
                outcomes = {key: type(outcome) for key, _fetch, outcome in answer.parts}
                assert outcomes == {("t", 0): Data, ("t", 3): Data, ("t", 1): Retry}
                assert timed == [True], "the request went through the caller's wrapper"
                values = {}
                for key, fetch, outcome in answer.parts:
                    if isinstance(outcome, Data):
                        batch, after, bad = answer.decode(fetch, outcome)
                        assert (after, bad) == (2, None)
                        values[key] = batch.column("value").to_pylist()
                assert values == {("t", 0): [b"p0-0", b"p0-1"], ("t", 3): [b"p3-1"]}
                assert asked[("t", 0)].offset == asked[("t", 3)].offset == 2, "the positions moved on"
                assert answer.outcome_of(("t", 2)) is None, "a partition nobody asked has no outcome"
            finally:
                await conn.close()

        run(scenario())


def test_back_off_waits_retry_backoff_ms_or_until_its_event():
    config = parse_config({"bootstrap.servers": "h:1", "retry.backoff.ms": 200})

    async def scenario():
        started = time.monotonic()
        await back_off(config)
        waited = time.monotonic() - started
        event = asyncio.Event()
        event.set()
        started = time.monotonic()
        await back_off(config, event)
        return waited, time.monotonic() - started

    waited, cut = run(scenario())
    assert waited >= 0.2
    assert cut < 0.1
