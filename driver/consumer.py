"""`Consumer`: partitions assigned by hand, read as Arrow batches from a driver program.

    consumer = Consumer({"bootstrap.servers": "127.0.0.1:9092"})
    consumer.assign("events", 0, "earliest")        # or consume_partition(...)
    for batch in consumer.batches(timeout=5):        # pyarrow.RecordBatch, Spark's Kafka schema
        ...
    consumer.close()

`partition.consumer.actors` (1) `PartitionConsumer` actors, however many partitions are
assigned, each hosting the state of the partitions spread over it (the least loaded first); at
most `broker.consumer.actors` (the CPUs of this node) `BrokerConsumer` actors, each hosting the
fetch loops of the brokers placed on its slot (`broker_slot`), one loop per broker that leads an
assigned partition (the actors are started here for the leaders at assignment, by a partition
consumer when leadership moves to a broker whose slot has none). This
object polls the partition consumers, each for all its partitions at once, and hands their
batches out in the order each partition produced them.

Broker outages are ridden out: the actors reconnect (`reconnect.backoff.ms` growing to
`reconnect.backoff.max.ms`) for as long as the consumer runs, and resume where they were.
Dead actors are healed: Ray restarts a broker consumer, and its partitions subscribe again; a
partition consumer that died is replaced here, each partition it hosted started at the offset
after the last record `batches` handed out of it (what it had fetched beyond is fetched again),
so nothing is skipped or repeated (`heals_per_partition` counts the replacements). A
partition that cannot go on (its data is corrupt, its offset is out of range with
`auto.offset.reset` none, authentication failed, its actor died `MAX_HEALS` times in a row
without handing out a record, or its replacement could not start) is raised once from `batches`
as a `ConsumerError` naming it and the cause, and left out from then on (`failed` keeps why);
the other partitions go on at the next `batches` call. `close()` stops every actor, dead or
alive, within `CLOSE_TIMEOUT` s.

`assign_topic("^orders-.*")` subscribes to a pattern (a name that starts with `^`, librdkafka's
rule, wire/subscription.py): every topic whose whole name matches is assigned, at `start`; while
`batches` runs the topics are looked up again every `metadata.max.age.ms`, a topic that comes to
match is assigned from its earliest offset (nothing written to it is missed), and one that no
longer exists is unassigned.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import pyarrow as pa
import ray

from ..actors.metrics import Reports, snapshots_of
from ..actors.partition_consumer import (
    PartitionStart,
    broker_consumer_actors,
    broker_slot,
    death_cause,
    new_broker_consumer,
    new_partition_consumer,
)
from ..actors.partition_consumer_state import PartitionPoll
from ..wire.cluster import Cluster
from ..wire.config import parse_config
from ..wire.errors import ConsumerError, KafkaError
from ..wire.fetch import high_watermarks
from ..wire.fetch_round import back_off
from ..wire.loop import LoopThread
from ..wire.serde import Deserializers, concat_batches
from ..wire.subscription import TopicSubscription, external_topics, is_pattern
from .ray_runtime import ensure_ray

log = logging.getLogger("raykafka.driver.consumer")

POLL_WAIT = 0.2  # seconds a poll waits on one partition consumer
CLOSE_TIMEOUT = 30.0  # seconds the partition consumers get to close
MAX_HEALS = 3  # replacements of a partition's consumer in a row with no record of it handed out between them
NEW_TOPIC_START = "earliest"  # where a topic that comes to match a pattern is read from
RUN_MARGIN = 1.0  # s a retried look-up gives up before `_run_bound`, so that its own last error is raised

__all__ = ["Consumer", "ConsumerError"]

Key = tuple[str, int]


class PartitionEnds(NamedTuple):
    """In the queue of what `batches` hands out: the partition cannot go on, for `cause`."""

    cause: str


class Consumer:
    """Hand-assigned partitions, consumed by Ray actors."""

    def __init__(self, config: Mapping[str, Any], *, stats_cb: Callable[[dict], Any] | None = None):
        self.config = parse_config(config, role="consumer")  # its repr hides the passwords; the actors get it
        # settled here, so that every actor places the brokers on the same slots
        self.config["broker.consumer.actors"] = broker_consumer_actors(self.config)
        ensure_ray()
        self.id = uuid.uuid4().hex[:12]
        self.reports = Reports(self.id, "consumer", self.config, stats_cb, lambda: snapshots_of(
            [*self._live_hosts(), *self._brokers.values()], f"consumer {self.id}"))
        self._loop: LoopThread | None = None
        self._cluster: Cluster | None = None
        # the partition consumers, by slot; a slot whose actor died is given its replacement (None
        # while it has none); at most `partition.consumer.actors` slots
        self._hosts: list[Any] = []
        self._slots: dict[Key, int] = {}  # the slot hosting each assigned partition
        self._ended: set[Key] = set()  # partitions that failed or whose actor could not be replaced
        self.failed: dict[Key, str] = {}  # why each of those ended
        self._failures: deque[ConsumerError] = deque()  # partitions ended and not yet raised from `batches`
        self.positions: dict[Key, int] = {}
        self.ends: dict[Key, int] = {}
        self._polls: dict[Any, tuple[int, Any]] = {}  # poll ref -> (slot, the actor asked)
        self._heals_in_a_row: dict[Key, int] = {}
        self.heals_per_partition: dict[Key, int] = {}  # times each partition's consumer was replaced after it died
        self._seeks: dict[Key, int] = {}
        self._ready: deque[tuple[Key, pa.RecordBatch | PartitionEnds, int]] = deque()
        self._closed = False
        self._brokers: dict[int, Any] = {}  # slot -> the broker consumer made here for it
        self._patterns: dict[str, TopicSubscription] = {}  # by the pattern as given
        self._matched: set[str] = set()  # the topics assigned because a pattern matched them
        self._next_look = 0.0  # when `batches` looks up the topics the patterns match again
        self.reports.start()

    # -- metadata from the driver ---------------------------------------------

    @property
    def _run_bound(self) -> float:
        """Seconds a look-up from the driver may take (`_run`): 2 x request.timeout.ms, 60 s by
        default, as Java's default.api.timeout.ms."""
        return self.config["request.timeout.ms"] / 1000 * 2

    def _run(self, coro: Any) -> Any:
        if self._loop is None:
            self._loop = LoopThread("raykafka-consumer")
            self._cluster = Cluster(self.config)
        return self._loop.run(coro, self._run_bound)

    def partitions_for(self, topic: str) -> list[int]:
        return sorted(self._leaders(topic))

    def _leaders(self, topic: str) -> dict[int, int]:
        """Each partition of `topic` and its leader now (-1: none)."""
        async def go() -> dict[int, int]:
            assert self._cluster is not None
            partitions = (await self._cluster.topic(topic, refresh=True)).partitions
            return {p: self._cluster.metadata.leader(topic, p) for p in partitions}
        return self._run(go())

    def high_watermarks(self, topic: str, partitions: list[int] | None = None) -> dict[int, int]:
        """Where each partition ends now (from a Fetch response's high watermark). A retriable
        error (a leader election, a broker away) is retried `retry.backoff.ms` apart, as Java's
        `endOffsets` retries until its timeout; all of it within `_run_bound`, after which the
        last error is raised. Another error is raised at once."""
        async def go() -> dict[int, int]:
            assert self._cluster is not None
            last: KafkaError | None = None
            try:
                async with asyncio.timeout(self._run_bound - RUN_MARGIN):
                    while True:
                        try:
                            return await high_watermarks(self._cluster, topic, partitions)
                        except KafkaError as exc:
                            if not exc.retriable:
                                raise
                            last = exc
                            log.info("consumer %s: end offsets of %s failed, retrying: %s", self.id, topic, exc)
                        await back_off(self.config)
            except TimeoutError:
                if last is None:
                    raise
                raise last from None
        return self._run(go())

    end_offsets = high_watermarks

    # -- assignment ----------------------------------------------------------

    def assign(self, topic: str, partition: int, start: Any = "earliest") -> int:
        """Consume `topic`/`partition` from `start` (earliest/oldest, latest/newest, an offset, or
        {"timestamp": ms}); return the offset it starts at."""
        self._check_open()
        if (topic, partition) in self._slots:
            raise ValueError(f"{topic}/{partition} is already assigned")
        leaders = self._leaders(topic)
        self._ensure_broker_consumers([leaders.get(partition, -1)])
        return self._start(topic, [partition], start)[partition]

    consume_partition = assign

    def assign_topic(self, topic: str, start: Any = "earliest") -> dict[Any, int]:
        """Every partition of `topic`, spread over the partition consumers; starts in parallel.
        Returns each partition's start offset; for a pattern (`^...`), by (topic, partition), of
        every topic it matches now."""
        self._check_open()
        if is_pattern(topic):
            return self._subscribe_pattern(topic, start)
        leaders = self._leaders(topic)
        assigned = [p for p in sorted(leaders) if (topic, p) in self._slots]
        if assigned:
            raise ValueError(f"{topic}/{assigned[0]} is already assigned")
        self._ensure_broker_consumers(list(leaders.values()))
        return self._start(topic, sorted(leaders), start)

    def _subscribe_pattern(self, pattern: str, start: Any) -> dict[Any, int]:
        if pattern in self._patterns:
            raise ValueError(f"{pattern} is already subscribed")
        self._patterns[pattern] = TopicSubscription.of(pattern)
        return self._look_up_patterns(start)

    def _look_up_patterns(self, start: Any) -> dict[Any, int]:
        """Assign, at `start`, the topics the patterns match now and were not assigned; unassign
        those they matched that no longer exist. A topic that cannot be assigned now (it went
        away meanwhile) is tried again at the next look."""
        self._next_look = time.monotonic() + self.config["metadata.max.age.ms"] / 1000

        async def existing() -> list[str]:
            assert self._cluster is not None
            return external_topics((await self._cluster.refresh_metadata(None)).topics)

        names = self._run(existing())
        matched = set().union(*(s.topics(names) for s in self._patterns.values()))
        assigned_by_name = {t for t, _ in self._slots} - self._matched
        started: dict[Any, int] = {}
        for topic in sorted(matched - self._matched - assigned_by_name):
            try:
                offsets = self.assign_topic(topic, start)
            except KafkaError as exc:
                log.warning("consumer %s: %s matched, not assigned yet: %s", self.id, topic, exc)
                continue
            self._matched.add(topic)
            started.update({(topic, p): offset for p, offset in offsets.items()})
            log.info("consumer %s: %s matched: assigned %d partition(s)", self.id, topic, len(offsets))
        for topic in sorted(self._matched - matched):
            self._matched.discard(topic)
            for key in [k for k in [*self._slots, *self._ended] if k[0] == topic]:
                self.unassign(*key)
            log.info("consumer %s: %s no longer matches or exists: unassigned", self.id, topic)
        return started

    def _start(self, topic: str, partitions: list[int], start: Any) -> dict[int, int]:
        """Start the partitions on their slots (one `start` call per slot); if any fails, the
        others are unassigned again and its error is raised."""
        by_slot: dict[int, list[PartitionStart]] = {}
        for p in partitions:
            by_slot.setdefault(self._place((topic, p), by_slot), []).append(PartitionStart(topic, p, start))
        refs = {slot: self._hosts[slot].start.remote(starts) for slot, starts in by_slot.items()}
        started: dict[Key, int] = {}
        error: Exception | None = None
        for slot, ref in refs.items():
            try:
                offsets = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - the first is raised once the rest are undone
                error = error or exc
                continue
            for key, offset in offsets.items():
                self._slots[key] = slot
                started[key] = offset
        if error is not None:
            for key in started:
                self.unassign(*key)
            raise error
        self.positions.update(started)
        return {p: started[(topic, p)] for p in partitions}

    def _place(self, key: Key, placing: dict[int, list[PartitionStart]]) -> int:
        """The slot for `key`: a new partition consumer while there are fewer than
        `partition.consumer.actors`, else the one hosting the fewest partitions."""
        load = [0] * len(self._hosts)
        for slot in self._slots.values():
            load[slot] += 1
        for slot, starts in placing.items():
            load[slot] += len(starts)
        free = [slot for slot, host in enumerate(self._hosts) if host is None]
        if free:
            slot = free[0]
        elif len(self._hosts) < self.config["partition.consumer.actors"]:
            slot = len(self._hosts)
            self._hosts.append(None)
        else:
            return min(range(len(load)), key=load.__getitem__)
        self._hosts[slot] = new_partition_consumer(self.config, self.id)
        return slot

    def assignment(self) -> list[Key]:
        return sorted(self._slots)

    # -- consuming -----------------------------------------------------------

    def batches(self, timeout: float | None = None, *, until_end: bool = False) -> Iterator[pa.RecordBatch]:
        """Arrow batches as they arrive. Stops after `timeout` s without data (None: never), or,
        with `until_end`, once every partition has reached the end it had when this call began
        (a topic a pattern comes to match meanwhile had none: it is not waited for)."""
        self._check_open()
        last_data = time.monotonic()
        if until_end:
            for topic in {t for t, _ in self._slots}:
                ps = [p for t, p in self._slots if t == topic]
                for p, end in self.high_watermarks(topic, ps).items():
                    self.ends[(topic, p)] = end
        while self._slots or self._ready or self._failures or self._patterns:
            if self._patterns and time.monotonic() >= self._next_look:
                try:
                    started = self._look_up_patterns(NEW_TOPIC_START)
                    if until_end:  # a topic that came to match had nothing when this call began
                        for key, offset in started.items():
                            self.ends.setdefault(key, offset)
                except KafkaError as exc:  # the cluster cannot be asked now: looked up again later
                    log.warning("consumer %s: looking up %s failed: %s", self.id, ", ".join(self._patterns), exc)
            if self._failures:
                raise self._failures.popleft()
            while self._ready:
                key, batch, position = self._ready.popleft()
                if key not in self._slots:
                    continue
                if isinstance(batch, PartitionEnds):  # after the records before its cause, handed out above
                    raise self._end(key, batch.cause)
                self.positions[key] = position
                yield batch
            if not self._slots and not self._patterns:
                return
            if until_end and self.at_end():
                return
            polling = {slot for slot, _ in self._polls.values()}
            for slot in set(self._slots.values()) - polling:
                host = self._hosts[slot]
                self._polls[host.poll.remote(POLL_WAIT)] = (slot, host)
            if not self._polls:  # patterns that match nothing yet
                time.sleep(POLL_WAIT)
            ready, _ = ray.wait(list(self._polls), num_returns=1, timeout=POLL_WAIT * 2) if self._polls else ([], [])
            for ref in ready:
                slot, asked = self._polls.pop(ref)
                if self._hosts[slot] is not asked:
                    continue  # replaced since
                try:
                    answers: list[PartitionPoll] = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    self._heal(slot, exc)
                    continue
                for answer in answers:
                    self._take(slot, answer, until_end)
            if self._ready:
                last_data = time.monotonic()
            elif timeout is not None and time.monotonic() - last_data > timeout and not self._failures:
                return

    def _take(self, slot: int, answer: PartitionPoll, until_end: bool) -> None:
        """One partition's part of a poll: its batches to hand out, its position and end; its
        error ends it (raised from `batches` next)."""
        key = (answer.topic, answer.partition)
        if self._slots.get(key) != slot:
            return  # unassigned since
        if answer.seeks < self._seeks.get(key, 0):
            return  # answered before a seek: its batches are from the old position
        if not until_end:
            self.ends[key] = max(self.ends.get(key, -1), answer.high_watermark)
        batches = answer.batches
        if batches:
            self._heals_in_a_row.pop(key, None)
        for i, batch in enumerate(batches):
            after = answer.position if i == len(batches) - 1 else batch.column("offset")[-1].as_py() + 1
            self._ready.append((key, batch, after))
        if not batches:
            self.positions[key] = answer.position
        if answer.error:  # raised once the records before it are handed out
            self._ready.append((key, PartitionEnds(answer.error), answer.position))

    def _heal(self, slot: int, died: BaseException) -> None:
        """The partition consumer of `slot` died: a new one starts each partition it hosted at the
        offset after the last record of it handed out; what was polled from the dead one but not
        yet handed out is dropped (the new one fetches it again). A partition that cannot go on
        is ended (raised from `batches` next)."""
        cause = death_cause(died)
        dead = self._hosts[slot]
        keys = sorted(k for k, s in self._slots.items() if s == slot)
        self._ready = deque(item for item in self._ready if item[0] not in keys)
        self._polls = {ref: asked for ref, asked in self._polls.items() if asked[0] != slot}
        kept = []
        for key in keys:
            self._seeks.pop(key, None)
            in_a_row = self._heals_in_a_row[key] = self._heals_in_a_row.get(key, 0) + 1
            if in_a_row > MAX_HEALS:
                self._failures.append(self._end(key, f"partition consumer died {in_a_row} times in a row without "
                                                     f"handing out a record (MAX_HEALS={MAX_HEALS}): {cause}"))
            else:
                kept.append(key)
        log.warning("consumer %s: partition consumer %d died (%s): replacing it for %s", self.id, slot, cause,
                    ", ".join(f"{t}/{p} at {self.positions[(t, p)]}" for t, p in kept) or "no partition")
        ray.kill(dead)
        self._hosts[slot] = new_partition_consumer(self.config, self.id) if kept else None
        if not kept:
            return
        starts = [PartitionStart(t, p, self.positions[(t, p)]) for t, p in kept]
        try:
            ray.get(self._hosts[slot].start.remote(starts), timeout=CLOSE_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - its partitions end, naming both causes
            ray.kill(self._hosts[slot])
            self._hosts[slot] = None
            for key in kept:
                self._failures.append(self._end(key, f"partition consumer died ({cause}) and its replacement did "
                                                     f"not start: {type(exc).__name__}: {exc}"))
            return
        for key in kept:
            self.heals_per_partition[key] = self.heals_per_partition.get(key, 0) + 1

    def _end(self, key: Key, cause: str) -> ConsumerError:
        """The partition cannot go on: dropped from its partition consumer and left out from now
        on (the next call goes on with the rest)."""
        host = self._hosts[self._slots.pop(key)]
        self._seeks.pop(key, None)
        if host is not None:
            host.unassign.remote(*key)  # a dead host has nothing to drop
        self._ended.add(key)
        self.failed[key] = cause
        return ConsumerError(f"{key[0]}/{key[1]}: {cause}")

    def at_end(self) -> bool:
        """Every partition has reached the end last seen (by a poll, or when `batches` began)."""
        return all(self.ends.get(k, -1) >= 0 and self.positions[k] >= self.ends[k] for k in self._slots)

    def read_all(self, timeout: float = 30.0) -> pa.Table:
        """Everything up to the current end of every assigned partition, as one table."""
        schema = Deserializers.from_config(self.config).schema
        return concat_batches(list(self.batches(timeout=timeout, until_end=True)), schema)

    # -- control -------------------------------------------------------------

    def _host_of(self, topic: str, partition: int) -> Any:
        """The partition consumer hosting `topic`/`partition`."""
        try:
            return self._hosts[self._slots[(topic, partition)]]
        except KeyError:
            raise ValueError(f"{topic}/{partition} is not assigned") from None

    def pause(self, topic: str, partition: int) -> None:
        ray.get(self._host_of(topic, partition).pause.remote(topic, partition))

    def resume(self, topic: str, partition: int) -> None:
        ray.get(self._host_of(topic, partition).resume.remote(topic, partition))

    def seek(self, topic: str, partition: int, offset: Any) -> int:
        host = self._host_of(topic, partition)
        self._ready = deque(item for item in self._ready if item[0] != (topic, partition))
        offset, seeks = ray.get(host.seek.remote(topic, partition, offset))
        self._seeks[(topic, partition)] = seeks  # a poll answered before the seek is dropped when it lands
        self.positions[(topic, partition)] = offset
        return offset

    def unassign(self, topic: str, partition: int) -> None:
        """Stop consuming `topic`/`partition` (also one that failed): its partition consumer drops
        it and goes on with the others (and ends at `close`). What was polled for it and not yet
        handed out is dropped, as Java's consumer drops what it fetched for a partition it no
        longer has: an assignment again starts where it is told to."""
        key = (topic, partition)
        self._seeks.pop(key, None)  # an assignment again counts its seeks afresh
        self._ready = deque(item for item in self._ready if item[0] != key)
        if key in self._ended:
            self._ended.discard(key)
            return
        host = self._hosts[self._slots.pop(key)]
        try:
            ray.get(host.unassign.remote(topic, partition), timeout=CLOSE_TIMEOUT)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
            log.warning("consumer %s: %s/%d did not close: %s", self.id, topic, partition, death_cause(exc))

    def _ensure_broker_consumers(self, leaders: list[int]) -> None:
        """The broker consumer of each of these leaders' slots, owned by this driver so that it
        outlives any partition consumer (a partition whose leader is unknown finds it when it
        starts). A broker's fetch loop starts there with its first subscription."""
        for node in leaders:
            slot = broker_slot(node, self.config["broker.consumer.actors"]) if node >= 0 else -1
            if slot >= 0 and slot not in self._brokers:
                self._brokers[slot] = new_broker_consumer(self.config, self.id, slot)

    def broker_consumer_stats(self) -> dict[int, Any]:
        """Each broker fetched from by the broker consumers made here: its subscriptions and pauses."""
        stats = {}
        for handle in self._brokers.values():
            for node in ray.get(handle.ping.remote()):
                stats[node] = ray.get(handle.stats.remote(node))
        return stats

    def _live_hosts(self) -> list[Any]:
        return [host for host in self._hosts if host is not None]

    def close(self) -> dict[str, str]:
        """Stop every partition consumer and broker consumer of this consumer, dead or alive,
        within `CLOSE_TIMEOUT` s; return the partitions that could not close cleanly, with why
        (a dead actor, a close that did not answer in time)."""
        if self._closed:
            return {}
        self._closed = True
        self.reports.close()  # the last report, while the actors can still be asked
        hosted = {slot: [f"{t}/{p}" for (t, p), s in sorted(self._slots.items()) if s == slot]
                  for slot in range(len(self._hosts))}
        hosts = dict(enumerate(self._hosts))
        self._hosts, self._slots, self._ended = [], {}, set()
        self._polls.clear()
        unclean: dict[str, str] = {}
        refs = {host.close.remote(): slot for slot, host in hosts.items() if host is not None}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=CLOSE_TIMEOUT) if refs else ([], [])
        for ref, slot in refs.items():
            why = None
            if ref not in ready:
                why = f"close did not answer within {CLOSE_TIMEOUT:.0f}s"
            else:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    why = f"partition consumer died: {death_cause(exc)}"
                except Exception as exc:  # noqa: BLE001 - reported: close goes on with the rest
                    why = f"close failed: {type(exc).__name__}: {exc}"
            if why is not None:
                for name in hosted[slot] or [f"partition consumer {slot}"]:
                    unclean[name] = why
        for host in hosts.values():
            if host is not None:
                ray.kill(host)
        brokers, self._brokers = self._brokers, {}
        for handle in brokers.values():
            ray.kill(handle)
        if self._loop is not None:
            assert self._cluster is not None
            try:
                self._loop.run(self._cluster.close(), 10)
            finally:
                self._loop.stop()
                self._loop = None
        for name, why in unclean.items():
            log.warning("consumer %s: %s: %s", self.id, name, why)
        return unclean

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerError("the consumer is closed")

    def __reduce__(self) -> Any:
        """Refused: a Consumer owns its actors, and its config holds the passwords (a `Producer`
        and a `ConsumerGroup` hold locks, which refuse it as well); build one where it is needed."""
        raise TypeError("a Consumer cannot be pickled: it owns its actors and its config's passwords; "
                        "build one from the config where it is needed")

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
