"""aiokafka's rows: `send` (keyed and not) and `getmany`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .rows import Settings
from .workload import KEYS, PARTITIONS, new_topic, value_of


def produce_aiokafka_keyed(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    return produce_aiokafka(bootstrap, admin, s, size, codec, keyed=True)


def produce_aiokafka(bootstrap: str, admin: Any, s: Settings, size: int, codec: str,
                     keyed: bool = False) -> list[float]:
    from aiokafka import AIOKafkaProducer

    value = value_of(size)
    keys = KEYS if keyed else [None]

    async def run(t: str) -> float:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5,
                                    compression_type=None if codec == "none" else codec)
        await producer.start()
        try:
            await producer.send_and_wait(t, b"warm")
            start = time.perf_counter()
            futures = [await producer.send(t, value, key=keys[i % len(keys)]) for i in range(s.messages)]
            await asyncio.gather(*futures)
            return time.perf_counter() - start
        finally:
            await producer.stop()

    return [asyncio.run(run(new_topic(admin, "aiokafka"))) for _ in range(s.runs)]


def consume_aiokafka(bootstrap: str, t: str, s: Settings) -> list[float]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go() -> float:
        start = time.perf_counter()
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await c.start()
        tps = [TopicPartition(t, p) for p in range(PARTITIONS)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        got = 0
        while got < s.messages:
            batches = await c.getmany(timeout_ms=1000, max_records=10000)
            got += sum(len(v) for v in batches.values())
        elapsed = time.perf_counter() - start
        await c.stop()
        return elapsed

    return [asyncio.run(go()) for _ in range(s.runs)]
