"""BrokerConsumer: at most `broker.consumer.actors` per `Consumer` (by default the CPUs of the
driver's node), each hosting the fetch loops of the brokers placed on it; a `BrokerFetchLoop`, Ray-free
state, per broker that leads an assigned partition: one fetch loop for all that broker's partitions.

Placement needs no registry: broker `node_id` goes to slot `broker_slot(node_id, cap)`
(actors/partition_consumer.py), the actor named for (consumer, slot), found or created by whoever
needs it first. Started by the driver's `Consumer` for the slots of the leaders of the partitions it
assigns, or by a `PartitionConsumer` when leadership moves to a broker whose slot has none; a
broker's fetch loop starts with its first subscription. Called by: the `PartitionConsumer`s hosting
partitions a hosted broker leads (`subscribe`, `unsubscribe`, each naming the broker). Calls: each
broker (one Fetch round, `wire.fetch_round`, for every partition subscribed there), and the hosting partition
consumer's `feed`, naming the partition, with that partition's raw record bytes (under
read_committed, only those of the batches it may hand out: `fetcher.PartitionFetch`), or its
`redispatch` / `offset_out_of_range` / `fail` when the broker says the partition is no longer here.

Per broker, two fetches at most are in flight, each on a connection of its own (a broker answers
one request per connection at a time): the main one, a long poll for every partition ready, and a
catch-up one that does not wait, for partitions that became ready (just subscribed after a new
assignment, a seek or a leader move, or just acked) while the long poll was out. A partition the
catch-up fetch found at its end waits for the next long poll. The brokers of one actor share its
event loop and its `Cluster`, never a fetch: a slow broker holds up none of the others.

Order kept: per partition, fetches follow one another in offset order, and a partition is
fetched again only after its consumer acked the previous data (its `feed` returned). Acks are
awaited for `max.processing.time.ms`; a partition whose consumer has not acked by then is left
out of later fetches until it does: a slow partition pauses itself, not its neighbours
(Sarama's brokerConsumer subscriptionManager/subscriptionConsumer).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..wire.cluster import Cluster
from ..wire.config import parse_config
from ..wire.connection import BrokerConnection
from ..wire.errors import KafkaError, is_fatal
from ..wire.fetch_round import FetchAnswer, fetch_round
from ..wire.fetcher import Data, Failed, PartitionFetch, Refetch, Reset, Retry
from .metrics import ConsumerMetrics

log = logging.getLogger("raykafka.actors.broker_consumer")

# The catch-up fetch's wait: 1 ms rather than 0, as tansu answers a Fetch that may not wait with
# no records at all, even where it has them.
CATCH_UP_WAIT_MS = 1


@dataclass
class Subscription:
    fetch: PartitionFetch  # the position, the request size, what each answer means
    consumer: Any  # the handle of the PartitionConsumer hosting the partition
    sub_id: int
    acking: asyncio.Future | None = None  # the feed not yet acked
    paused: bool = False  # its feed stayed unacked past max.processing.time.ms (for `stats`; `acking` holds its fetching)
    in_flight: bool = False  # part of a Fetch not yet answered
    caught_up: bool = False  # a catch-up fetch found nothing new: it waits for the next long poll
    misses: int = 0  # catch-up fetches in a row that brought nothing
    reported_hw: int = -1


class BrokerConsumer:
    """The fetch loops of the brokers placed on slot `slot`, one `BrokerFetchLoop` each, made at
    a broker's first subscription; every call names its broker."""

    def __init__(self, config: dict[str, Any], slot: int):
        self.config = parse_config(config)
        self.slot = slot
        self.cluster = Cluster(self.config)
        self.metrics = ConsumerMetrics(self.config["client.id"])
        self.loops: dict[int, BrokerFetchLoop] = {}  # node id -> its fetch loop

    async def ping(self) -> list[int]:
        """The brokers this actor fetches from."""
        return sorted(self.loops)

    async def watch(self) -> None:
        """Never answers while this actor lives: a partition consumer holds this call open to
        learn, by its failure, that the actor died (and was restarted empty)."""
        await asyncio.Event().wait()

    async def metrics_snapshot(self) -> dict[str, Any]:
        return self.metrics.snapshot()

    async def subscribe(self, node_id: int, topic: str, partition: int, offset: int, consumer: Any,
                        sub_id: int) -> None:
        loop = self.loops.get(node_id)
        if loop is None:
            loop = self.loops[node_id] = BrokerFetchLoop(self.config, node_id, self.cluster, self.metrics)
        loop.subscribe(topic, partition, offset, consumer, sub_id)

    async def unsubscribe(self, node_id: int, topic: str, partition: int, sub_id: int) -> None:
        loop = self.loops.get(node_id)
        if loop is not None:
            loop.unsubscribe(topic, partition, sub_id)

    async def stats(self, node_id: int) -> dict[str, Any] | None:
        """Broker `node_id`'s subscriptions and pauses; None if it has no fetch loop here."""
        loop = self.loops.get(node_id)
        return None if loop is None else loop.stats()

    async def close(self) -> None:
        for loop in self.loops.values():
            await loop.close()
        await self.cluster.close()


class BrokerFetchLoop:
    """The fetch loop for broker `node_id`, without Ray of its own: it runs on its actor's event
    loop, over its actor's `Cluster`, and calls the partition consumers' handles it is given."""

    def __init__(self, config: Any, node_id: int, cluster: Cluster, metrics: ConsumerMetrics):
        self.config = config
        self.node_id = node_id
        self.cluster = cluster
        self.metrics = metrics
        self.subscriptions: dict[tuple[str, int], Subscription] = {}
        self.max_processing = self.config["max.processing.time.ms"] / 1000
        self.paused_count = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._main_busy = False  # a long poll is out on the main connection
        self._side_busy = False  # a catch-up fetch is out on the side connection
        self._side: BrokerConnection | None = None

    # -- the subscription manager -------------------------------------------

    def subscribe(self, topic: str, partition: int, offset: int, consumer: Any, sub_id: int) -> None:
        """Called inside the actor's event loop, where the fetch loop starts if it is not running."""
        self.subscriptions[(topic, partition)] = Subscription(
            PartitionFetch(self.config, topic, partition, offset), consumer, sub_id)
        log.debug("consumer/broker/%d added subscription to %s/%d at %d", self.node_id, topic, partition, offset)
        self._start()

    def unsubscribe(self, topic: str, partition: int, sub_id: int) -> None:
        sub = self.subscriptions.get((topic, partition))
        if sub is not None and sub.sub_id == sub_id:
            del self.subscriptions[(topic, partition)]

    def stats(self) -> dict[str, Any]:
        return {"subscriptions": {f"{t}/{p}": s.fetch.offset for (t, p), s in self.subscriptions.items()},
                "paused": sorted(f"{t}/{p}" for (t, p), s in self.subscriptions.items() if s.paused),
                "paused_count": self.paused_count}

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._side is not None:
            await self._side.close()

    def _start(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._fetch_loop())

    # -- the subscription consumer: fetch, hand out, await acks ---------------

    async def _fetch_loop(self) -> None:
        """Fetch every partition that is neither in a fetch nor awaiting its ack: by the long poll
        if it is not out, else by the catch-up fetch."""
        assert self._wake is not None
        while True:
            self._wake.clear()
            ready = {tp: s for tp, s in self.subscriptions.items() if not s.in_flight and s.acking is None}
            if ready and not self._main_busy:
                self._launch(ready, side=False)
            elif not self._side_busy:
                catch_up = {tp: s for tp, s in ready.items() if not s.caught_up}
                if catch_up:
                    self._launch(catch_up, side=True)
            await self._wake.wait()

    def _launch(self, asked: dict[tuple[str, int], Subscription], side: bool) -> None:
        for sub in asked.values():
            sub.in_flight, sub.caught_up = True, False
        if side:
            self._side_busy = True
        else:
            self._main_busy = True
        asyncio.get_running_loop().create_task(self._fetch(asked, side))

    async def _side_connection(self) -> BrokerConnection:
        """The catch-up fetch's connection, so that it never queues behind the long poll."""
        if self._side is None or not self._side.connected:
            self._side = await self.cluster.extra_connection(self.node_id)
        return self._side

    async def _fetch(self, asked: dict[tuple[str, int], Subscription], side: bool = False) -> None:
        assert self._wake is not None
        try:
            try:
                conn = await (self._side_connection() if side else self.cluster.connection(self.node_id))
                answer = await fetch_round(conn, self.config, {tp: s.fetch for tp, s in asked.items()},
                                           max_wait_ms=CATCH_UP_WAIT_MS if side else None,
                                           timed=lambda request: self.metrics.fetch_timed(self.node_id, request),
                                           where=f"broker {self.node_id}")
            finally:
                self._connection_free(side)
            acks = self._hand_out(asked, answer)
            for sub in asked.values():
                sub.in_flight = False
                if sub.acking is not None:
                    sub.misses = 0
                elif side:  # nothing came: at its end, or left out of a response cut at the broker's size limit
                    sub.misses += 1
                    sub.caught_up = sub.fetch.offset >= sub.reported_hw or sub.misses > 1
            self._wake.set()
            if acks:
                await self._await_acks(acks)
        except (KafkaError, OSError) as exc:
            self._abandon(exc)
        except Exception as exc:  # never die silently: hand every partition back
            log.exception("consumer/broker/%d fetch failed", self.node_id)
            self._abandon(exc)
        finally:
            for sub in asked.values():
                sub.in_flight = False
            self._wake.set()

    def _connection_free(self, side: bool) -> None:
        """The answer is in: the connection may carry the next fetch while this one's data is acked."""
        assert self._wake is not None
        if side:
            self._side_busy = False
        else:
            self._main_busy = False
        self._wake.set()

    def _hand_out(self, asked: dict[tuple[str, int], Subscription], answer: FetchAnswer) -> list[asyncio.Future]:
        """Each partition's outcome to its partition consumer; the acks of the data fed."""
        acks = []
        for tp, _fetch, outcome in answer.parts:
            sub = asked[tp]
            if self.subscriptions.get(tp) is not sub:
                continue  # unsubscribed or resubscribed while the fetch was in flight
            if isinstance(outcome, Data):
                if (not outcome.records and outcome.high_watermark == sub.reported_hw
                        and outcome.position <= outcome.fetched_at):
                    continue  # nothing new: no records, no end moved, no position decided
                sub.reported_hw = outcome.high_watermark
                # the view as an array: Ray copies it once, into the object store, where the
                # partition consumer reads it (as bytes it would first be copied out of the response)
                data = outcome.records
                fed = np.frombuffer(data, np.uint8) if data else None
                ref = sub.consumer.feed.remote(*tp, sub.sub_id, fed, outcome.fetched_at, outcome.high_watermark,
                                               outcome.position)
                sub.acking = asyncio.wrap_future(ref.future())
                acks.append(sub.acking)
                continue
            if isinstance(outcome, Refetch):  # asked again at once, for the whole batch
                sub.caught_up = False
                continue
            del self.subscriptions[tp]
            if isinstance(outcome, Retry):
                log.info("consumer/broker/%d %s/%d: %s: redispatching", self.node_id, *tp, outcome.error)
                sub.consumer.redispatch.remote(*tp, sub.sub_id, sub.fetch.offset,
                                               f"broker {self.node_id}: {outcome.error}")
            elif isinstance(outcome, Reset):
                sub.consumer.offset_out_of_range.remote(*tp, sub.sub_id, sub.fetch.offset)
            elif isinstance(outcome, Failed):
                sub.consumer.fail.remote(*tp, sub.sub_id, -1, str(outcome.error))
        return acks

    async def _await_acks(self, acks: list[asyncio.Future]) -> None:
        _done, pending = await asyncio.wait(acks, timeout=self.max_processing)
        for tp, sub in list(self.subscriptions.items()):
            if sub.acking is not None and sub.acking.done():
                if sub.acking.exception() is not None:  # its consumer is gone: stop fetching for it
                    log.warning("consumer/broker/%d %s/%d consumer failed: %s", self.node_id, *tp,
                                sub.acking.exception())
                    del self.subscriptions[tp]
                sub.acking, sub.paused = None, False
        for sub in self.subscriptions.values():
            if sub.acking in pending:
                sub.paused = True
        for fut in pending:
            self.paused_count += 1
            fut.add_done_callback(self._acked_late)

    def _acked_late(self, fut: asyncio.Future) -> None:
        fut.exception()  # retrieved; a failed consumer is dropped at its next ack check
        for sub in self.subscriptions.values():
            if sub.acking is fut:
                sub.acking, sub.paused = None, False
        if self._wake is not None:
            self._wake.set()

    def _abandon(self, error: BaseException) -> None:
        """The fetch failed: every partition goes back to its dispatcher to find its leader (and to
        retry, paced by the reconnect backoff), or, for a fatal error, fails with it."""
        subs, self.subscriptions = self.subscriptions, {}
        if is_fatal(error):
            log.error("consumer/broker/%d failed: %s", self.node_id, error)
            for (t, p), sub in subs.items():
                sub.consumer.fail.remote(t, p, sub.sub_id, -1, f"Fetch {t}/{p} from broker {self.node_id}: "
                                                               f"{type(error).__name__}: {error}")
            return
        log.warning("consumer/broker/%d abandoned: %s", self.node_id, error)
        for tp, sub in subs.items():
            sub.consumer.redispatch.remote(*tp, sub.sub_id, sub.fetch.offset, f"broker {self.node_id}: {error}")
