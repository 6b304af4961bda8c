"""`PartitionConsumerState` without Ray: the states of several partitions sharing one host's
condition, fed by a scripted broker consumer. What is fed comes out of `take` once, in order;
a partition whose buffer is full holds its own acks only; an error is reported once; a stale
subscription's data is dropped."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from raykafka.actors.metrics import ConsumerMetrics
from raykafka.actors.partition_consumer_state import (
    MAX_BUFFERED,
    PartitionConsumerState,
    PartitionContext,
)
from raykafka.wire.config import parse_config
from raykafka.wire.record_encoding import encode_record_batch_parts
from raykafka.wire.serde import Deserializers

LEADER = 7


class Brokers:
    """The host's side: records every subscription."""

    def __init__(self) -> None:
        self.subscribed: list[tuple[int, str, int, int, int]] = []

    async def subscribe(self, node_id: int, topic: str, partition: int, offset: int, sub_id: int) -> None:
        self.subscribed.append((node_id, topic, partition, offset, sub_id))

    async def unsubscribe(self, node_id: int, topic: str, partition: int, sub_id: int) -> None:
        pass


def host(partitions: int) -> tuple[Brokers, list[PartitionConsumerState]]:
    config = parse_config({"bootstrap.servers": "127.0.0.1:9"})

    async def refresh_metadata(topics: object = None) -> None:
        pass

    cluster = SimpleNamespace(refresh_metadata=refresh_metadata,
                              metadata=SimpleNamespace(leader=lambda topic, partition: LEADER))
    brokers = Brokers()
    ctx = PartitionContext(config, cluster, brokers, asyncio.Condition(), Deserializers.from_config(config),
                           ConsumerMetrics("unit"))
    states = [PartitionConsumerState(ctx, "t", p) for p in range(partitions)]
    for state in states:
        state.offset = 0
    return brokers, states


def chunk(base: int, n: int) -> bytes:
    """One record batch of `n` records from offset `base`, as a Fetch answer holds it."""
    return b"".join(bytes(part) for part in encode_record_batch_parts([b"v%d" % i for i in range(base, base + n)],
                                                                      base_offset=base))


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def offsets(poll) -> list[int]:
    return [o for b in poll.batches for o in b.column("offset").to_pylist()]


def test_partitions_of_one_host_subscribe_at_their_leader_and_hand_out_in_order():
    async def go() -> None:
        brokers, (a, b) = host(2)
        await asyncio.gather(a.dispatch(refresh=False), b.dispatch(refresh=False))
        assert brokers.subscribed == [(LEADER, "t", 0, 0, 1), (LEADER, "t", 1, 0, 1)]
        await a.feed(1, chunk(0, 3), 0, 10, 3)
        await a.feed(1, chunk(3, 2), 3, 10, 5)
        await b.feed(1, chunk(0, 1), 0, 10, 1)
        await settle()
        taken_a, taken_b = a.take(), b.take()
        assert (offsets(taken_a), taken_a.position, taken_a.high_watermark) == ([0, 1, 2, 3, 4], 5, 10)
        assert (offsets(taken_b), taken_b.position) == ([0], 1)
        assert offsets(a.take()) == [], "handed out once"
        await a.feed(0, chunk(5, 1), 5, 10, 6)  # an older subscription's data
        await settle()
        assert not a.has_news and a.offset == 5

    asyncio.run(go())


def test_a_full_buffer_holds_only_its_own_partitions_ack():
    async def go() -> None:
        _brokers, (slow, fast) = host(2)
        for state in (slow, fast):
            await state.dispatch(refresh=False)
        for i in range(MAX_BUFFERED):
            await slow.feed(1, chunk(i, 1), i, 100, i + 1)
        await settle()
        held = asyncio.get_running_loop().create_task(slow.feed(1, chunk(MAX_BUFFERED, 1), MAX_BUFFERED, 100,
                                                                  MAX_BUFFERED + 1))
        await settle()
        assert not held.done(), "the slow partition's ack waits for room"
        await asyncio.wait_for(fast.feed(1, chunk(0, 1), 0, 100, 1), 1)  # its neighbour's does not
        async with slow.ctx.changed:
            taken = slow.take()
            slow.ctx.changed.notify_all()
        await asyncio.wait_for(held, 1)
        await settle()
        assert offsets(taken) + offsets(slow.take()) == list(range(MAX_BUFFERED + 1))

    asyncio.run(go())


def test_an_error_is_reported_once():
    async def go() -> None:
        _brokers, (state,) = host(1)
        await state.dispatch(refresh=False)
        await state.fail(1, -1, "bad data")
        assert state.has_news
        assert state.take().error == "bad data"
        assert not state.has_news, "reported: a poll does not wake for it again"

    asyncio.run(go())
