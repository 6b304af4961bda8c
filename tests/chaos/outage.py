"""Broker outages for the chaos suite: a proxy that can cut the broker off, and the two ways a
broker goes away.

`OutageProxy` is the `FaultProxy` (no random faults) with `cut()`: stop listening and abort
every connection, so the broker is unreachable (connections refused), and `restore()`: listen
again on the same port. tansu advertises the proxy's port, so every client connection goes
through it.

`Outage` puts either form behind one interface: `unreachable` (the proxy cut for the outage,
tansu, in memory, running all along) and `restart` (tansu on S3 storage killed, and started
again on the same port after the outage, with its log).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import proxy as _proxy  # tests/chaos/, on the path (conftest.py)


class OutageProxy(_proxy.FaultProxy):
    def __init__(self, target_port: int, port: int):
        super().__init__(target_port, port=port)
        self.cuts = 0

    def cut(self) -> None:
        """Stop accepting and abort every open connection: the broker is unreachable."""
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()
                self._server = None
            for w in list(self._writers):
                w.transport.abort()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.cuts += 1

    def restore(self) -> None:
        """Listen again, on the same port."""
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)


class Outage:
    """One broker, reachable at `bootstrap`, that can be taken away for a while and given back."""

    def __init__(self, mode: str, make_restartable: Any, tmp_path: Path):
        from raykafka.driver.embedded_broker import EmbeddedBroker, free_port

        self.mode = mode
        self.proxy: OutageProxy | None = None
        if mode == "unreachable":
            port = free_port()
            self.broker = EmbeddedBroker(advertised_port=port, log_path=tmp_path / "tansu.log").start()
            self.proxy = OutageProxy(self.broker.port, port).start()
            self.bootstrap = f"127.0.0.1:{port}"
        elif mode == "restart":
            self.broker = make_restartable()
            self.bootstrap = self.broker.bootstrap
        else:
            raise ValueError(f"mode: unreachable or restart, not {mode!r}")

    def cut(self) -> float:
        """Take the broker away; return when it went."""
        if self.proxy is not None:
            self.proxy.cut()
        else:
            self.broker.kill()
        return time.monotonic()

    def restore(self) -> float:
        """Give the broker back (started again and listening, for a restart); return when."""
        if self.proxy is not None:
            self.proxy.restore()
        else:
            self.broker.start()
        return time.monotonic()

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
            self.broker.stop()  # the restartable one is stopped by its fixture


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int = 1, **config: object) -> None:
    """Write `values` round-robin over `partitions` with confluent-kafka; every one must be delivered."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    errors: list = []
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions,
                                 on_delivery=lambda err, _msg: errors.append(err) if err else None)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:3]
