"""ProducerResults: one per producer. Collects how every message ended (Sarama's Successes and
Errors channels), for the driver to long-poll.

Called by the Flushers (successes, final errors), the LeaderDispatchers, PartitionDispatchers and
the TopicDispatcher (messages that could not be routed), and the driver (`poll`). An async actor:
a `poll` waits without blocking the reports. Reports are kept in arrival order; the driver needs
no order across them, since every entry names the message ids it settles.

An entry: (ids, topic, partition, first offset or -1, log-append time or -1, error or None); the
i-th id's offset is first offset + i.
"""

from __future__ import annotations

import asyncio
from typing import Any


class ProducerResults:
    def __init__(self, ctx: Any = None):
        self.entries: list[tuple] = []
        self.event: asyncio.Event | None = None
        self.reported = 0

    def _event(self) -> asyncio.Event:
        if self.event is None:
            self.event = asyncio.Event()
        return self.event

    async def ping(self) -> bool:
        return True

    async def report(self, entries: list[tuple]) -> None:
        self.entries.extend(entries)
        self.reported += sum(len(e[0]) for e in entries)
        self._event().set()

    async def poll(self, timeout: float) -> list[tuple]:
        """Every entry reported since the last poll; waits up to `timeout` s for the first one."""
        event = self._event()
        if not self.entries:
            event.clear()
            try:
                await asyncio.wait_for(event.wait(), timeout)
            except TimeoutError:
                pass
        out, self.entries = self.entries, []
        return out
