"""The engine: sends one Fetch round (`fetch`) and reads each partition's part (`fetcher`), without Ray.

Who calls: the three fetch loops, each keeping only its own policy: `actors.broker_consumer`
(a `Consumer`'s per-broker loop: who gets the raw bytes, acks, pauses), `actors.group_member_state`
(a `ConsumerGroup` member: its claims' queues and handlers) and `wire.range_reader` (bounded
reads: Ray Data's read tasks and `raykafka consume -e`). Whom it calls: the connection it is
given (one Fetch request, built by `wire.fetch.fetch_body`), each asked partition's
`wire.fetcher.PartitionFetch` (what its part of the answer means) and the fetcher's decoder.

A round, `fetch_round`: one Fetch for every `PartitionFetch` asked, sent, its answer read. An
error of the whole response (its top-level `error_code`) raises a `BrokerError`; a broken
connection raises what the connection raised. Otherwise each asked partition the answer holds
gets one outcome (`Data`, `Refetch`, `Retry`, `Reset`, `Failed`), in the answer's order, and a
partition the answer names but nobody asked is passed over. `FetchAnswer.decode` turns a
partition's `Data` into Arrow within what the whole answer may inflate to (for a one-partition
answer that is the partition's own bound), keeping the batches before a bad one.
`back_off` is the one wait after a `Retry` or a failed round: `retry.backoff.ms`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

from . import messages
from .config import Config
from .errors import BrokerError, DecodeError
from .fetch import fetch_body, fetch_version
from .fetcher import Data, FetchOutcome, PartitionFetch, answer_budget, decode_until_bad
from .record_batch_reader import InflationBudget

Key = tuple[str, int]  # (topic, partition)
Timed = Callable[[Awaitable[Any]], Awaitable[Any]]  # wraps the request, e.g. to observe its latency


class PartitionAnswer(NamedTuple):
    """One asked partition's part of a round: its fetch state and what the answer meant."""

    key: Key
    fetch: PartitionFetch
    outcome: FetchOutcome


class FetchAnswer:
    """The outcomes of one round, in the answer's order, and the answer's inflation budget."""

    def __init__(self, config: Config, response: Any, parts: list[PartitionAnswer]):
        self.config = config
        self.response = response
        self.parts = parts
        self._budget: InflationBudget | None = None

    def outcome_of(self, key: Key) -> FetchOutcome | None:
        """`key`'s outcome, or None if the answer left it out."""
        return next((part.outcome for part in self.parts if part.key == key), None)

    def decode(self, fetch: PartitionFetch, data: Data) -> tuple[Any, int, DecodeError | None]:
        """`data` of `fetch`'s partition as one Arrow batch, the offset after it, and the error of
        the first batch that could not be read (None if all could): `fetcher.decode_until_bad`,
        drawing on the whole answer's budget, which every partition decoded from it shares."""
        if self._budget is None:
            self._budget = answer_budget(self.response, self.config)
        return decode_until_bad(data.records, fetch.topic, fetch.partition, data.fetched_at, self.config,
                                self._budget)


async def fetch_round(conn: Any, config: Config, asked: Mapping[Key, PartitionFetch], *,
                      max_wait_ms: int | None = None, timed: Timed | None = None,
                      where: str = "") -> FetchAnswer:
    """One Fetch on `conn` for every partition of `asked` (at each one's position and request
    size), waiting up to `max_wait_ms` (None: `fetch.max.wait.ms`); each partition's outcome.
    `where` names the broker in the error of a response that failed as a whole."""
    body = fetch_body(config, [fetch.request() for fetch in asked.values()], max_wait_ms=max_wait_ms)
    request = conn.request(messages.FETCH, body, fetch_version(conn))
    response = await (timed(request) if timed is not None else request)
    if response.get("error_code", 0):
        raise BrokerError(response.error_code, f"Fetch from {where or 'the broker'}")
    parts = []
    for t in response.responses:
        for p in t.partitions:
            key = (t.topic, p.partition_index)
            fetch = asked.get(key)
            if fetch is not None:
                parts.append(PartitionAnswer(key, fetch, fetch.take(p)))
    return FetchAnswer(config, response, parts)


async def back_off(config: Config, until: asyncio.Event | None = None) -> None:
    """Wait `retry.backoff.ms`, the one pause after a `Retry` outcome or a failed round; less
    if `until` is set meanwhile."""
    seconds = config["retry.backoff.ms"] / 1000
    if until is None:
        await asyncio.sleep(seconds)
        return
    try:
        await asyncio.wait_for(until.wait(), seconds)
    except TimeoutError:
        pass
