"""`Consumer`: partitions assigned by hand, read as Arrow batches from a driver program.

    consumer = Consumer({"bootstrap.servers": "127.0.0.1:9092"})
    consumer.assign("events", 0, "earliest")        # or consume_partition(...)
    for batch in consumer.batches(timeout=5):        # pyarrow.RecordBatch, Spark's Kafka schema
        ...
    consumer.close()

One `PartitionConsumer` actor per assigned partition, one `BrokerConsumer` actor per broker
(created by the partition consumers, by name); this object polls the partition consumers
and hands their batches out in the order each partition produced them.

Broker outages are ridden out: the actors reconnect (`reconnect.backoff.ms` growing to
`reconnect.backoff.max.ms`) for as long as the consumer runs, and resume where they were.
Dead actors are healed: Ray restarts a broker consumer, and its partition consumers subscribe
again; a partition consumer that died is replaced here, at the offset after the last record
`batches` handed out (what it had fetched beyond is fetched again), so nothing is skipped or
repeated (`heals` counts the replacements). A
partition that cannot go on (its data is corrupt, its offset is out of range with
`auto.offset.reset` none, authentication failed, its actor died `MAX_HEALS` times in a row
without handing out a record, or its replacement could not start) is raised once from `batches`
as a `ConsumerError` naming it and the cause, and left out from then on (`failed` keeps why);
the other partitions go on at the next `batches` call. `close()` stops every actor, dead or
alive, within `CLOSE_TIMEOUT` s.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
import ray

from ..actors.metrics import Reports, snapshots_of
from ..actors.partition_consumer import PARTITION_CONSUMER_OPTIONS, PartitionConsumer, new_broker_consumer
from ..wire.cluster import Cluster
from ..wire.config import parse_config
from ..wire.errors import ConsumerError
from ..wire.fetch import high_watermarks
from ..wire.loop import LoopThread
from .ray_runtime import ensure_ray

log = logging.getLogger("raykafka.driver.consumer")

POLL_WAIT = 0.2  # seconds a poll waits on one partition consumer
CLOSE_TIMEOUT = 30.0  # seconds the partition consumers get to close
MAX_HEALS = 3  # replacements of a partition consumer in a row with no record handed out between them

__all__ = ["Consumer", "ConsumerError"]


class Consumer:
    """Hand-assigned partitions, consumed by Ray actors."""

    def __init__(self, config: Mapping[str, Any], *, stats_cb: Callable[[dict], Any] | None = None):
        self.config = parse_config(config, role="consumer")  # its repr hides the passwords; the actors get it
        ensure_ray()
        self.id = uuid.uuid4().hex[:12]
        self.reports = Reports(self.id, "consumer", self.config, stats_cb, lambda: snapshots_of(
            [*self._children.values(), *self._brokers.values()], f"consumer {self.id}"))
        self._loop: LoopThread | None = None
        self._cluster: Cluster | None = None
        self._children: dict[tuple[str, int], Any] = {}
        self._ended: dict[tuple[str, int], Any] = {}  # partition consumers that failed or died: closed at close
        self.failed: dict[tuple[str, int], str] = {}  # why each of those ended
        self.positions: dict[tuple[str, int], int] = {}
        self.ends: dict[tuple[str, int], int] = {}
        self._polls: dict[Any, tuple[tuple[str, int], Any]] = {}  # poll ref -> (partition, the child asked)
        self._heals_in_a_row: dict[tuple[str, int], int] = {}
        self.heals: dict[tuple[str, int], int] = {}  # partition consumers replaced after they died
        self._seeks: dict[tuple[str, int], int] = {}
        self._ready: deque[tuple[tuple[str, int], pa.RecordBatch, int]] = deque()
        self._closed = False
        self._brokers: dict[int, Any] = {}
        self.reports.start()

    # -- metadata from the driver ---------------------------------------------

    def _run(self, coro: Any) -> Any:
        if self._loop is None:
            self._loop = LoopThread("raykafka-consumer")
            self._cluster = Cluster(self.config)
        return self._loop.run(coro, self.config["request.timeout.ms"] / 1000 * 2)

    def partitions_for(self, topic: str) -> list[int]:
        async def go() -> list[int]:
            assert self._cluster is not None
            return sorted((await self._cluster.topic(topic, refresh=True)).partitions)
        return self._run(go())

    def high_watermarks(self, topic: str, partitions: list[int] | None = None) -> dict[int, int]:
        """Where each partition ends now (from a Fetch response's high watermark)."""
        async def go() -> dict[int, int]:
            assert self._cluster is not None
            return await high_watermarks(self._cluster, topic, partitions)
        return self._run(go())

    end_offsets = high_watermarks

    # -- assignment ----------------------------------------------------------

    def assign(self, topic: str, partition: int, start: Any = "earliest") -> int:
        """Consume `topic`/`partition` from `start` (earliest/oldest, latest/newest, an offset, or
        {"timestamp": ms}); return the offset it starts at."""
        self._check_open()
        key = (topic, partition)
        if key in self._children:
            raise ValueError(f"{topic}/{partition} is already assigned")
        self._ensure_broker_consumers()
        child = self._new_child(key)
        try:
            offset = ray.get(child.start.remote(start))
        except Exception:
            ray.kill(child)
            raise
        self._children[key] = child
        self.positions[key] = offset
        return offset

    def _new_child(self, key: tuple[str, int]) -> Any:
        return ray.remote(PartitionConsumer).options(**PARTITION_CONSUMER_OPTIONS).remote(
            self.config, self.id, *key)

    consume_partition = assign

    def assign_topic(self, topic: str, start: Any = "earliest") -> dict[int, int]:
        """Every partition of `topic`; starts in parallel."""
        self._check_open()
        partitions = self.partitions_for(topic)
        self._ensure_broker_consumers()
        children = {p: self._new_child((topic, p)) for p in partitions}
        offsets = ray.get([c.start.remote(start) for c in children.values()])
        out = {}
        for (p, child), offset in zip(children.items(), offsets, strict=True):
            self._children[(topic, p)] = child
            self.positions[(topic, p)] = offset
            out[p] = offset
        return out

    def assignment(self) -> list[tuple[str, int]]:
        return sorted(self._children)

    # -- consuming -----------------------------------------------------------

    def batches(self, timeout: float | None = None, *, until_end: bool = False) -> Iterator[pa.RecordBatch]:
        """Arrow batches as they arrive. Stops after `timeout` s without data (None: never), or,
        with `until_end`, once every partition has reached the end it had when this call began."""
        self._check_open()
        last_data = time.monotonic()
        if until_end:
            for topic in {t for t, _ in self._children}:
                ps = [p for t, p in self._children if t == topic]
                for p, end in self.high_watermarks(topic, ps).items():
                    self.ends[(topic, p)] = end
        while self._children or self._ready:
            while self._ready:
                key, batch, position = self._ready.popleft()
                if key in self._children:
                    self.positions[key] = position
                    yield batch
            if not self._children:
                return
            if until_end and self.at_end():
                return
            polling = {key for key, _ in self._polls.values()}
            for key, child in self._children.items():
                if key not in polling:
                    self._polls[child.poll.remote(POLL_WAIT)] = (key, child)
            ready, _ = ray.wait(list(self._polls), num_returns=1, timeout=POLL_WAIT * 2)
            for ref in ready:
                key, asked = self._polls.pop(ref)
                if self._children.get(key) is not asked:
                    continue  # unassigned, or replaced since
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    self._heal(key, exc)
                    continue
                if result["seeks"] < self._seeks.get(key, 0):
                    continue  # answered before a seek: its batches are from the old position
                if result["error"] and not result["batches"]:  # with batches: raised at the next poll, after them
                    raise self._end(key, result["error"])
                if not until_end:
                    self.ends[key] = max(self.ends.get(key, -1), result["high_watermark"])
                batches = result["batches"]
                if batches:
                    self._heals_in_a_row.pop(key, None)
                for i, batch in enumerate(batches):
                    after = result["position"] if i == len(batches) - 1 else batch.column("offset")[-1].as_py() + 1
                    self._ready.append((key, batch, after))
                if not batches:
                    self.positions[key] = result["position"]
            if self._ready:
                last_data = time.monotonic()
            elif timeout is not None and time.monotonic() - last_data > timeout:
                return

    def _heal(self, key: tuple[str, int], died: BaseException) -> None:
        """The partition consumer of `key` died: a new one starts at the offset after the last
        record handed out; what was polled from the dead one but not yet handed out is dropped
        (the new one fetches it again). Raises the partition's `ConsumerError` if it cannot."""
        cause = str(died).strip().splitlines()[-1][:300] if str(died).strip() else type(died).__name__
        dead = self._children[key]
        self._ready = deque(item for item in self._ready if item[0] != key)
        self._polls = {ref: asked for ref, asked in self._polls.items() if asked[0] != key}
        self._seeks.pop(key, None)
        in_a_row = self._heals_in_a_row[key] = self._heals_in_a_row.get(key, 0) + 1
        if in_a_row > MAX_HEALS:
            raise self._end(key, f"partition consumer died {in_a_row} times in a row without handing out a "
                                 f"record (MAX_HEALS={MAX_HEALS}): {cause}")
        log.warning("consumer %s: %s/%d partition consumer died (%s): replacing it at offset %d", self.id, *key,
                    cause, self.positions[key])
        ray.kill(dead)
        child = self._new_child(key)
        try:
            ray.get(child.start.remote(self.positions[key]), timeout=CLOSE_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the partition ends, naming both causes
            ray.kill(child)
            raise self._end(key, f"partition consumer died ({cause}) and its replacement did not start: "
                                 f"{type(exc).__name__}: {exc}") from exc
        self._children[key] = child
        self.heals[key] = self.heals.get(key, 0) + 1

    def _end(self, key: tuple[str, int], cause: str) -> ConsumerError:
        """The partition cannot go on: left out from now on (the next call goes on with the rest)."""
        self._ended[key] = self._children.pop(key)
        self.failed[key] = cause
        return ConsumerError(f"{key[0]}/{key[1]}: {cause}")

    def at_end(self) -> bool:
        """Every partition has reached the end last seen (by a poll, or when `batches` began)."""
        return all(self.ends.get(k, -1) >= 0 and self.positions[k] >= self.ends[k] for k in self._children)

    def read_all(self, timeout: float = 30.0) -> pa.Table:
        """Everything up to the current end of every assigned partition, as one table."""
        from ..wire.serde import Deserializers, concat_batches

        schema = Deserializers.from_config(self.config).schema
        return concat_batches(list(self.batches(timeout=timeout, until_end=True)), schema)

    # -- control -------------------------------------------------------------

    def _child(self, topic: str, partition: int) -> Any:
        try:
            return self._children[(topic, partition)]
        except KeyError:
            raise ValueError(f"{topic}/{partition} is not assigned") from None

    def pause(self, topic: str, partition: int) -> None:
        ray.get(self._child(topic, partition).pause.remote())

    def resume(self, topic: str, partition: int) -> None:
        ray.get(self._child(topic, partition).resume.remote())

    def seek(self, topic: str, partition: int, offset: Any) -> int:
        child = self._child(topic, partition)
        self._ready = deque(item for item in self._ready if item[0] != (topic, partition))
        offset, seeks = ray.get(child.seek.remote(offset))
        self._seeks[(topic, partition)] = seeks  # a poll answered before the seek is dropped when it lands
        self.positions[(topic, partition)] = offset
        return offset

    def unassign(self, topic: str, partition: int) -> None:
        """Stop consuming `topic`/`partition` (also one that failed); its actor is killed even if it
        is dead or does not answer."""
        key = (topic, partition)
        child = self._children.pop(key) if key in self._children else self._ended.pop(key)
        try:
            ray.get(child.close.remote(), timeout=CLOSE_TIMEOUT)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
            log.warning("consumer %s: %s/%d did not close: %s", self.id, topic, partition,
                        str(exc).strip().splitlines()[-1][:300])
        finally:
            ray.kill(child)

    def _ensure_broker_consumers(self) -> None:
        """One broker consumer per broker, owned by this driver so they outlive any partition."""
        async def go() -> list[int]:
            assert self._cluster is not None
            return list((await self._cluster.refresh_metadata()).brokers)
        for node in self._run(go()):
            if node not in self._brokers:
                self._brokers[node] = new_broker_consumer(self.config, self.id, node)

    def broker_consumer_stats(self) -> dict[int, Any]:
        return {node: ray.get(handle.stats.remote()) for node, handle in self._brokers.items()}

    def close(self) -> dict[str, str]:
        """Stop every partition consumer and broker consumer of this consumer, dead or alive,
        within `CLOSE_TIMEOUT` s; return the partitions that could not close cleanly, with why
        (a dead actor, a close that did not answer in time)."""
        if self._closed:
            return {}
        self._closed = True
        self.reports.close()  # the last report, while the actors can still be asked
        children = {**self._ended, **self._children}
        self._children, self._ended = {}, {}
        self._polls.clear()
        unclean: dict[str, str] = {}
        refs = {c.close.remote(): key for key, c in children.items()}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=CLOSE_TIMEOUT) if refs else ([], [])
        for ref, (topic, partition) in refs.items():
            name = f"{topic}/{partition}"
            if ref not in ready:
                unclean[name] = f"close did not answer within {CLOSE_TIMEOUT:.0f}s"
                continue
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                unclean[name] = f"partition consumer died: {str(exc).strip().splitlines()[-1][:300]}"
            except Exception as exc:  # noqa: BLE001 - reported: close goes on with the rest
                unclean[name] = f"close failed: {type(exc).__name__}: {exc}"
        for c in children.values():
            ray.kill(c)
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
