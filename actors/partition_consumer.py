"""PartitionConsumer: a few per `Consumer`, each hosting the state of many assigned partitions.

Called by: the driver's `Consumer` (`start`, `poll`, `pause`, `resume`, `seek`, `unassign`,
`close`) and the `BrokerConsumer` of each hosted partition's leader (`feed`, `redispatch`,
`offset_out_of_range`, `fail`, each naming its partition). Calls: the cluster (metadata,
ListOffsets, one `Cluster` for all its partitions) and the leaders' `BrokerConsumer`s, which it
finds or creates by name, the one of each leader's slot (`broker_slot`: at most
`broker.consumer.actors` per consumer, each hosting several brokers' fetch loops).

A thin shell: each partition's dispatcher and feeder is a `PartitionConsumerState`
(`actors/partition_consumer_state.py`), and this actor routes each call to it. What it owns
itself: the handles of the broker consumers and one `watch` on each (when a broker consumer
dies, every partition whose leader it hosted subscribes again from its own position), and `poll`,
which hands out every hosted partition's buffered batches in one answer. A partition is added
by `start` and dropped by `unassign`: a new partition adds state, never a process. Order within
a partition is its state's; partitions do not wait for one another (each has its own buffer
and acks its own feeds).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, NamedTuple

import ray

from ..wire.cluster import Cluster
from ..wire.config import parse_config
from ..wire.fetch import resolve_offsets
from ..wire.serde import Deserializers
from .broker_consumer import BrokerConsumer
from .metrics import ConsumerMetrics
from .options import remote_class
from .partition_consumer_state import (
    BrokerConsumerGone,
    PartitionConsumerState,
    PartitionContext,
    PartitionPoll,
)

log = logging.getLogger("raykafka.actors.partition_consumer")
MAX_BROKER_CONSUMER_ACTORS = 1024  # the bound of `broker.consumer.actors`, for a node with more CPUs


class PartitionStart(NamedTuple):
    """A partition to host, from `start`: earliest/latest, an offset, or {"timestamp": ms}."""

    topic: str
    partition: int
    start: Any


def broker_consumer_actors(config: Any) -> int:
    """`broker.consumer.actors`, or with 0 the CPUs of this node (at most the key's bound). The
    driver's `Consumer` settles it once in the config it hands its actors, so that every
    partition consumer, on whatever node, places the brokers alike."""
    return config["broker.consumer.actors"] or min(os.cpu_count() or 1, MAX_BROKER_CONSUMER_ACTORS)


def broker_slot(node_id: int, actors: int) -> int:
    """The slot of the `BrokerConsumer` that fetches from broker `node_id`, out of `actors`.

    Every caller computes it alone, with no registry: node id modulo the cap. Brokers numbered in
    a row (0..N-1, 1..N, or 1001.. as Kafka generates them) go round-robin over the slots, so N
    brokers take min(N, actors) processes and the brokers per process differ by one at most; ids
    spaced by a multiple of the cap would share one process, the price of needing no registry."""
    return node_id % actors


def broker_consumer_name(consumer_id: str, slot: int) -> str:
    return f"raykafka-bc-{consumer_id}-{slot}"


def new_broker_consumer(config: dict[str, Any], consumer_id: str, slot: int) -> Any:
    """Find or create the named `BrokerConsumer` of `consumer_id` for slot `slot`."""
    return remote_class(BrokerConsumer, "broker_consumer", name=broker_consumer_name(consumer_id, slot),
                        get_if_exists=True).remote(config, slot)


def new_partition_consumer(config: dict[str, Any], consumer_id: str) -> Any:
    return remote_class(PartitionConsumer, "partition_consumer").remote(config, consumer_id)


class PartitionConsumer:
    """Hosts the partitions the driver's `Consumer` `consumer_id` starts here."""

    def __init__(self, config: dict[str, Any], consumer_id: str):
        self.config = parse_config(config)
        self.consumer_id = consumer_id
        self.cluster = Cluster(self.config)
        self.partitions: dict[tuple[str, int], PartitionConsumerState] = {}
        self.closed = False
        self._ctx: PartitionContext | None = None
        self._broker_actors = broker_consumer_actors(self.config)
        self._brokers: dict[int, Any] = {}  # slot -> its broker consumer
        self._suspect: set[int] = set()  # slots whose broker consumer failed a call: looked up again
        self._watches: dict[int, asyncio.Task] = {}  # slot -> the watch on its broker consumer
        self.metrics = ConsumerMetrics(consumer_id)

    def _context(self) -> PartitionContext:
        """Made on first use, inside the actor's event loop."""
        if self._ctx is None:
            self._ctx = PartitionContext(self.config, self.cluster, self, asyncio.Condition(),
                                         Deserializers.from_config(self.config), self.metrics)
        return self._ctx

    async def ping(self) -> list[str]:
        return [f"{t}/{p}" for t, p in self.partitions]

    async def metrics_snapshot(self) -> dict[str, Any]:
        return self.metrics.snapshot()

    # -- partitions come and go ---------------------------------------------

    async def start(self, starts: list[PartitionStart]) -> dict[tuple[str, int], int]:
        """Host these partitions: resolve each start to an offset (one lookup per topic and
        start), subscribe each at its leader; return the offsets. If one cannot start, none of
        them is kept and its error is raised."""
        ctx = self._context()
        offsets: dict[tuple[str, int], int] = {}
        groups: list[tuple[str, Any, list[int]]] = []
        for topic, partition, start in starts:
            if (topic, partition) in self.partitions:
                raise ValueError(f"{topic}/{partition} is already hosted here")
            group = next((g for g in groups if g[0] == topic and g[1] == start), None)
            if group is None:
                groups.append((topic, start, [partition]))
            else:
                group[2].append(partition)
        for topic, start, partitions in groups:
            for p, offset in (await resolve_offsets(self.cluster, topic, partitions, start)).items():
                offsets[(topic, p)] = offset
        await self.cluster.refresh_metadata(sorted({t for t, _ in offsets}))
        states = {key: PartitionConsumerState(ctx, *key) for key in offsets}
        for key, state in states.items():
            state.offset = offsets[key]
            self.partitions[key] = state
        results = await asyncio.gather(*(s.dispatch(refresh=False) for s in states.values()), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            for key in states:
                await self.unassign(*key)
            raise failed[0]
        return offsets  # not the states' offsets: data may already have been fed while subscribing

    async def unassign(self, topic: str, partition: int) -> None:
        """Stop consuming the partition and forget it (nothing if it is not hosted)."""
        state = self.partitions.pop((topic, partition), None)
        if state is not None:
            await state.close()

    async def close(self) -> None:
        """Called only when the whole consumer closes: every partition unsubscribes, then the
        broker consumers this actor knows end too (those it started would only end once Ray saw
        their owner, this actor, die)."""
        self.closed = True
        for task in self._watches.values():
            task.cancel()
        await asyncio.gather(*(self.unassign(*key) for key in list(self.partitions)))
        async with self._context().changed:
            self._context().changed.notify_all()
        for handle in self._brokers.values():
            ray.kill(handle)
        await self.cluster.close()

    # -- the driver's calls ----------------------------------------------------

    async def poll(self, max_wait: float = 0.5) -> list[PartitionPoll]:
        """Every hosted partition's buffered batches, position and end (waiting up to `max_wait`
        s for any of them to have batches or an error to report)."""
        cond = self._context().changed

        def news() -> bool:
            return self.closed or any(s.has_news for s in self.partitions.values())

        async with cond:
            if not news():
                try:
                    await asyncio.wait_for(cond.wait_for(news), max_wait)
                except TimeoutError:
                    pass
            answer = [state.take() for state in self.partitions.values()]
            cond.notify_all()  # feeds waiting for room go on
        return answer

    def _state(self, topic: str, partition: int) -> PartitionConsumerState:
        try:
            return self.partitions[(topic, partition)]
        except KeyError:
            raise ValueError(f"{topic}/{partition} is not hosted here") from None

    async def pause(self, topic: str, partition: int) -> None:
        await self._state(topic, partition).pause()

    async def resume(self, topic: str, partition: int) -> None:
        await self._state(topic, partition).resume()

    async def seek(self, topic: str, partition: int, offset: Any) -> tuple[int, int]:
        return await self._state(topic, partition).seek(offset)

    # -- the broker consumers' calls, routed to their partition ----------------

    async def feed(self, topic: str, partition: int, sub_id: int, data: Any, fetch_offset: int, high_watermark: int,
                   position: int) -> None:
        state = self.partitions.get((topic, partition))
        if state is not None:
            await state.feed(sub_id, data, fetch_offset, high_watermark, position)

    async def redispatch(self, topic: str, partition: int, sub_id: int, offset: int, reason: str) -> None:
        state = self.partitions.get((topic, partition))
        if state is not None:
            await state.redispatch(sub_id, offset, reason)

    async def offset_out_of_range(self, topic: str, partition: int, sub_id: int, offset: int) -> None:
        state = self.partitions.get((topic, partition))
        if state is not None:
            await state.offset_out_of_range(sub_id, offset)

    async def fail(self, topic: str, partition: int, sub_id: int, code: int, context: str) -> None:
        state = self.partitions.get((topic, partition))
        if state is not None:
            await state.fail(sub_id, code, context)

    # -- the broker consumers (`BrokerConsumers`, for the partitions' states) ----

    async def subscribe(self, node_id: int, topic: str, partition: int, offset: int, sub_id: int) -> None:
        """Subscribe at the broker consumer of `node_id`. One that Ray is restarting is asked
        again, `retry.backoff.ms` apart, for up to `request.timeout.ms` (a subscription is taken
        again as it stands: the same id, the same offset)."""
        slot = broker_slot(node_id, self._broker_actors)
        broker_consumer = self._broker_consumer(slot)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config["request.timeout.ms"] / 1000
        while True:
            try:
                await broker_consumer.subscribe.remote(node_id, topic, partition, offset,
                                                       ray.get_runtime_context().current_actor, sub_id)
                break
            except ray.exceptions.ActorUnavailableError as exc:  # restarting: it answers again soon
                if loop.time() > deadline:
                    raise BrokerConsumerGone(f"broker consumer of broker {node_id}: {death_cause(exc)}") from exc
                await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)
            except ray.exceptions.RayActorError as exc:
                self._forget(slot, broker_consumer)
                raise BrokerConsumerGone(f"broker consumer of broker {node_id}: {death_cause(exc)}") from exc
        self._watch(slot, broker_consumer)

    async def unsubscribe(self, node_id: int, topic: str, partition: int, sub_id: int) -> None:
        slot = broker_slot(node_id, self._broker_actors)
        broker_consumer = self._broker_consumer(slot)
        try:
            await broker_consumer.unsubscribe.remote(node_id, topic, partition, sub_id)
        except ray.exceptions.RayActorError as exc:
            self._forget(slot, broker_consumer)
            raise BrokerConsumerGone(f"broker consumer of broker {node_id}: {death_cause(exc)}") from exc

    def _broker_consumer(self, slot: int) -> Any:
        """The broker consumer the driver made for `slot`; one made here if leadership moved to a
        broker whose slot had none (its handle is kept: a named actor lives as long as a handle
        to it does). After a call to it failed (`_forget`), looked up by name again."""
        handle = self._brokers.get(slot)
        if handle is None or slot in self._suspect:
            self._suspect.discard(slot)
            found = new_broker_consumer(self.config, self.consumer_id, slot)  # the live one, or a new one
            if handle is None or found._actor_id != handle._actor_id:
                handle = self._brokers[slot] = found
        return handle

    def _forget(self, slot: int, broker_consumer: Any) -> None:
        """`broker_consumer` failed a call: the next call for `slot` looks the actor up by name
        again. Ray restarts a broker consumer that crashed, under the same name (the look-up finds
        it, and the handle held stays); but one that another partition consumer made dies for good
        with its creator, and then the look-up makes a new one (kept in place of the dead one)."""
        if self._brokers.get(slot) is broker_consumer:
            self._suspect.add(slot)

    def _watch(self, slot: int, broker_consumer: Any) -> None:
        """Keep a `watch` call open on the broker consumer of `slot`: it fails only when that
        actor dies (Ray then restarts it, empty); then every partition whose leader it hosted
        subscribes again from its own position."""
        task = self._watches.get(slot)
        if task is not None and not task.done():
            return

        async def watch() -> None:
            try:
                await broker_consumer.watch.remote()
            except ray.exceptions.RayActorError as exc:
                self._watches.pop(slot, None)  # the next subscription there watches anew
                self._forget(slot, broker_consumer)
                if self.closed:
                    return
                reason = f"broker consumer {slot} died: {death_cause(exc)}"
                await asyncio.gather(*(s.redispatch(s.sub_id, s.offset, reason) for s in list(self.partitions.values())
                                       if s.leader >= 0 and broker_slot(s.leader, self._broker_actors) == slot
                                       and not (s.closed or s.paused)))

        self._watches[slot] = asyncio.get_running_loop().create_task(watch())


def death_cause(exc: BaseException, limit: int = 300) -> str:
    """The last line of an actor's death (Ray's message ends with the cause), at most `limit` characters."""
    text = str(exc).strip()
    return text.splitlines()[-1][:limit] if text else type(exc).__name__
