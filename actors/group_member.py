"""GroupMember: one per consumer-group member; runs the user's handler on its claims' batches.

Called by: the driver's `ConsumerGroup` (`start`, `status`, `stop`). Calls: the group
coordinator (through `wire.group_coordinator`), the leaders of its claimed partitions (one
Fetch per broker for all its claims), and the user's handler.

A member lives through sessions, one per generation (Sarama's consumerGroupSession): join,
read committed offsets, `handler.setup(session)`, one thread per claim running
`handler.consume_claim(session, claim)`, and meanwhile the fetch loop, heartbeats, auto-commit
and the partition-count check. The session ends when the group rebalances (a heartbeat says
so), a subscribed topic grows, or the member stops; then claims close, `handler.cleanup`
runs, marked offsets are committed with the ending generation, and the member rejoins.

Order kept: per claim, batches reach the handler in offset order. A claim whose queue is full
(its handler is slow) is left out of fetches until it takes a batch: it pauses alone.
The member fetches its claims itself rather than through per-partition actors: claims
change at every rebalance, and a member is already one process.
`MemberRuntime` is the plain class (also run in-process by `raykafka consume -g`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from ..wire import messages
from ..wire.arrow_batches import records_to_arrow
from ..wire.cluster import Cluster
from ..wire.config import parse_config
from ..wire.errors import KafkaError
from ..wire.fetch import LEADER_ERRORS, fetch_body, fetch_version, resolve_offsets
from ..wire.group_coordinator import CoordinatorLost, Generation, GroupCoordinator, RebalanceNeeded
from ..wire.loop import LoopThread
from ..wire.serde import Deserializers

log = logging.getLogger("raykafka.actors.group_member")

CLAIM_QUEUE = 4  # Arrow batches waiting per claim before its fetching pauses
_CLOSED = object()


class Claim:
    """One partition of a session: its batches, in offset order, until the session ends."""

    def __init__(self, topic: str, partition: int, initial_offset: int,
                 deserialize: Callable[[pa.RecordBatch], pa.RecordBatch] | None = None):
        self.topic = topic
        self.partition = partition
        self.initial_offset = initial_offset
        self.high_watermark = -1
        self._queue: queue.Queue = queue.Queue(CLAIM_QUEUE)
        self._closed = threading.Event()
        self._deserialize = deserialize

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Batches in offset order, deserialized here, in the handler's thread."""
        while True:
            item = self._queue.get()
            if item is _CLOSED:
                return
            yield item if self._deserialize is None else self._deserialize(item)

    @property
    def full(self) -> bool:
        return self._queue.full()

    def put(self, batch: pa.RecordBatch) -> None:
        self._queue.put_nowait(batch)

    def close(self) -> None:
        """Drop what is queued (the next owner refetches it from the committed offset) and end."""
        self._closed.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put_nowait(_CLOSED)


class Session:
    """What a handler sees for one generation: its claims, `mark` and `commit`."""

    def __init__(self, runtime: MemberRuntime, generation: Generation, claims: dict[tuple[str, int], Claim]):
        self._runtime = runtime
        self.member_id = generation.member_id
        self.generation_id = generation.generation_id
        self.claims = {t: sorted(p for (tt, p) in claims if tt == t) for t in {t for t, _ in claims}}
        self._claims = claims
        self.marked: dict[tuple[str, int], int] = {}
        self.committed: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def mark(self, topic: str, partition: int, offset: int) -> None:
        """Record `offset` as the next one to consume in `topic`/`partition` (committed later)."""
        if (topic, partition) not in self._claims:
            raise ValueError(f"{topic}/{partition} is not claimed by this session")
        with self._lock:
            if offset > self.marked.get((topic, partition), -1):
                self.marked[(topic, partition)] = offset

    def mark_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            self.mark(batch.column("topic")[0].as_py(), batch.column("partition")[0].as_py(),
                      batch.column("offset")[-1].as_py() + 1)

    def uncommitted(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return {tp: o for tp, o in self.marked.items() if self.committed.get(tp) != o}

    def commit(self) -> None:
        """Commit what is marked, now (from a handler thread)."""
        self._runtime.run_on_loop(self._runtime.commit_session(self))


class FunctionHandler:
    """A plain function applied to each batch; the batch is marked once the function returns."""

    def __init__(self, fn: Callable[[pa.RecordBatch], Any]):
        self.fn = fn

    def setup(self, session: Session) -> None:
        pass

    def consume_claim(self, session: Session, claim: Claim) -> None:
        for batch in claim.batches():
            self.fn(batch)
            session.mark_batch(batch)

    def cleanup(self, session: Session) -> None:
        pass


def as_handler(handler: Any) -> Any:
    if hasattr(handler, "consume_claim"):
        return handler
    if callable(handler):
        return FunctionHandler(handler)
    raise TypeError(f"handler: expected a function of a batch or an object with consume_claim, got {handler!r}")


class MemberRuntime:
    """One member's life: sessions until stopped."""

    def __init__(self, config: dict[str, Any], topics: list[str], handler: Any):
        self.config = parse_config(config)
        if not self.config["group.id"]:
            raise ValueError("group.id: required for a consumer group")
        self.topics = sorted(set(topics))
        if not self.topics:
            raise ValueError("topics: a consumer group needs at least one topic")
        self.handler = as_handler(handler)
        self.deserialize = Deserializers.from_config(self.config)
        self.cluster = Cluster(self.config)
        self.coordinator = GroupCoordinator(self.cluster, self.config, self.topics)
        self.loop = LoopThread("raykafka-member")
        self.session: Session | None = None
        self.generations = 0
        self.fetched_batches = 0
        self.error: str | None = None
        self.last_end_reason = ""
        self._stop: asyncio.Event | None = None
        self._future: Any = None

    # -- life ----------------------------------------------------------------

    def start(self) -> None:
        self._future = self.loop.submit(self._run())

    def run_on_loop(self, coro: Any) -> Any:
        return self.loop.run(coro, self.config["request.timeout.ms"] / 1000 * 2)

    def stop(self, timeout: float = 60.0) -> None:
        """End the session, commit, leave the group; return once done."""
        if self._future is None:
            return
        self.loop.loop.call_soon_threadsafe(self._request_stop)
        try:
            self._future.result(timeout)
        finally:
            self.run_on_loop(self.cluster.close())
            self.loop.stop()

    def _request_stop(self) -> None:
        if self._stop is None:
            self._stop = asyncio.Event()
        self._stop.set()

    def status(self) -> dict[str, Any]:
        s = self.session
        return {"member_id": self.coordinator.member_id, "generation_id": self.coordinator.generation_id,
                "claims": dict(s.claims) if s else {}, "generations": self.generations,
                "fetched_batches": self.fetched_batches, "error": self.error,
                "committed": dict(s.committed) if s else {}, "last_end_reason": self.last_end_reason}

    async def _run(self) -> None:
        if self._stop is None:
            self._stop = asyncio.Event()
        try:
            while not self._stop.is_set():
                generation = await self.coordinator.join()
                self.generations += 1
                await self._session(generation)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("group member failed")
            raise
        finally:
            await self.coordinator.leave()

    # -- one session -----------------------------------------------------------

    async def _session(self, generation: Generation) -> None:
        claims = await self._open_claims(generation)
        session = self.session = Session(self, generation, claims)
        await asyncio.to_thread(self.handler.setup, session)
        positions = {tp: c.initial_offset for tp, c in claims.items()}
        over = asyncio.Event()
        reason: list[str] = []

        def end(why: str) -> None:
            if not over.is_set():
                reason.append(why)
                over.set()

        loop = asyncio.get_running_loop()
        threads = [threading.Thread(target=self._consume_claim, args=(session, c, loop, end), daemon=True,
                                    name=f"claim-{c.topic}-{c.partition}") for c in claims.values()]
        for t in threads:
            t.start()

        tasks = [asyncio.ensure_future(coro) for coro in (
            self._fetch_loop(claims, positions, over), self._heartbeat_loop(end),
            self._auto_commit_loop(session, over), self._partition_check(end))]
        stop_wait = asyncio.ensure_future(self._stop.wait())  # type: ignore[union-attr]
        await asyncio.wait([asyncio.ensure_future(over.wait()), stop_wait, *tasks],
                           return_when=asyncio.FIRST_COMPLETED)
        end("stop" if self._stop.is_set() else "task ended")  # type: ignore[union-attr]
        for t in tasks:
            t.cancel()
        stop_wait.cancel()
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                log.error("session task failed: %r", t.exception())
        for c in claims.values():
            c.close()
        for t in threads:
            await asyncio.to_thread(t.join, self.config["rebalance.timeout.ms"] / 1000)
        await asyncio.to_thread(self.handler.cleanup, session)
        try:
            await self.commit_session(session)
        except (RebalanceNeeded, KafkaError) as exc:
            log.warning("commit at the end of generation %d failed: %s", session.generation_id, exc)
        self.last_end_reason = reason[0] if reason else ""
        log.info("group/%s member %s generation %d ended: %s", self.coordinator.group_id,
                 session.member_id, session.generation_id, self.last_end_reason)

    async def _open_claims(self, generation: Generation) -> dict[tuple[str, int], Claim]:
        committed = await self.coordinator.fetch_offsets(generation.claims)
        claims = {}
        for topic, ps in generation.claims.items():
            missing = [p for p in ps if committed.get((topic, p), -1) < 0]
            reset = {}
            if missing:
                policy = self.config["auto.offset.reset"]
                if policy not in ("earliest", "latest"):
                    raise KafkaError(f"{topic}/{missing}: no committed offset and auto.offset.reset={policy}")
                reset = await resolve_offsets(self.cluster, topic, missing, policy)
            for p in ps:
                start = reset[p] if p in reset else committed[(topic, p)]
                claims[(topic, p)] = Claim(topic, p, start, None if self.deserialize.raw else self.deserialize)
        return claims

    def _consume_claim(self, session: Session, claim: Claim, loop: asyncio.AbstractEventLoop,
                       end: Callable[[str], None]) -> None:
        """Run the handler on one claim; as in Sarama, the first claim to stop ends the session."""
        why = f"consume_claim({claim.topic}/{claim.partition}) returned"
        try:
            self.handler.consume_claim(session, claim)
        except Exception as exc:
            log.exception("consume_claim(%s/%d) raised", claim.topic, claim.partition)
            why = self.error = f"consume_claim({claim.topic}/{claim.partition}) raised {type(exc).__name__}: {exc}"
        if not claim._closed.is_set():
            loop.call_soon_threadsafe(end, why)

    async def _fetch_loop(self, claims: dict[tuple[str, int], Claim], positions: dict[tuple[str, int], int],
                          over: asyncio.Event) -> None:
        if not claims:
            await over.wait()
            return
        await self.cluster.refresh_metadata(self.topics)
        while not over.is_set():
            by_leader: dict[int, list[tuple[str, int]]] = defaultdict(list)
            for tp, claim in claims.items():
                if not claim.full:
                    by_leader[self.cluster.metadata.leader(*tp)].append(tp)
            if not by_leader:
                await asyncio.sleep(0.02)  # every claim is full: their handlers are behind
                continue
            results = await asyncio.gather(*(self._fetch_from(leader, tps, claims, positions)
                                             for leader, tps in by_leader.items()), return_exceptions=True)
            if any(r is not None for r in results):
                for r in results:
                    if r is not None:
                        log.info("fetch: %s; refreshing metadata", r)
                await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)
                await self.cluster.refresh_metadata(self.topics)

    async def _fetch_from(self, leader: int, tps: list[tuple[str, int]], claims: dict[tuple[str, int], Claim],
                          positions: dict[tuple[str, int], int]) -> Any:
        if leader < 0:
            return f"no leader for {tps}"
        conn = await self.cluster.connection(leader)
        response = await conn.request(messages.FETCH, fetch_body(self.config, [(t, p, positions[(t, p)]) for t, p in tps]),
                                      fetch_version(conn))
        problem = None
        for t in response.responses:
            for part in t.partitions:
                tp = (t.topic, part.partition_index)
                if tp not in claims:
                    continue
                if part.error_code in LEADER_ERRORS:
                    problem = f"{tp}: error {part.error_code}"
                    continue
                if part.error_code == 1:
                    reset = await resolve_offsets(self.cluster, tp[0], [tp[1]], self.config["auto.offset.reset"])
                    positions[tp] = reset[tp[1]]
                    continue
                if part.error_code:
                    problem = f"{tp}: error {part.error_code}"
                    continue
                claims[tp].high_watermark = part.high_watermark
                if part.records:
                    batch, after = records_to_arrow(part.records, tp[0], tp[1], positions[tp],
                                                    check_crc=self.config["check.crcs"],
                                                    max_decompressed=self.config["max.decompressed.batch.bytes"])
                    if batch.num_rows:
                        claims[tp].put(batch)
                        self.fetched_batches += 1
                    positions[tp] = after
        return problem

    async def _heartbeat_loop(self, end: Callable[[str], None]) -> None:
        interval = self.config["heartbeat.interval.ms"] / 1000
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            try:
                await self.coordinator.heartbeat()
                last_ok = time.monotonic()
            except RebalanceNeeded as exc:
                end(f"rebalance ({exc})")
                return
            except (CoordinatorLost, KafkaError, OSError) as exc:
                log.info("heartbeat failed: %s", exc)
                if time.monotonic() - last_ok > self.config["session.timeout.ms"] / 1000:
                    end("session timed out")
                    return

    async def _auto_commit_loop(self, session: Session, over: asyncio.Event) -> None:
        if not self.config["enable.auto.commit"]:
            await over.wait()
            return
        interval = self.config["auto.commit.interval.ms"] / 1000
        while not over.is_set():
            await asyncio.sleep(interval)
            try:
                await self.commit_session(session)
            except RebalanceNeeded:
                return  # the heartbeat loop ends the session
            except KafkaError as exc:
                log.warning("auto-commit failed: %s", exc)

    async def _partition_check(self, end: Callable[[str], None]) -> None:
        """Sarama's loopCheckPartitionNumbers: a subscribed topic that grows means a rebalance."""
        interval = self.config["topic.metadata.refresh.interval.ms"] / 1000
        counts = {t: len(self.cluster.metadata.partitions(t)) for t in self.topics}
        while True:
            await asyncio.sleep(interval)
            try:
                metadata = await self.cluster.refresh_metadata(self.topics)
            except KafkaError:
                continue
            now = {t: len(metadata.partitions(t)) for t in self.topics}
            if any(now[t] != counts.get(t, 0) for t in self.topics if now[t]):
                end(f"partition count changed {counts} -> {now}")  # the leader's rejoin rebalances
                return
            counts = now

    async def commit_session(self, session: Session) -> None:
        offsets = session.uncommitted()
        if not offsets:
            return
        await self.coordinator.commit(offsets)
        with session._lock:
            session.committed.update(offsets)


class GroupMember:
    """The Ray actor around `MemberRuntime`."""

    def __init__(self, config: dict[str, Any], topics: list[str], handler: Any):
        self.runtime = MemberRuntime(config, topics, handler)
        self.runtime.start()

    def ping(self) -> bool:
        return True

    def status(self) -> dict[str, Any]:
        return self.runtime.status()

    def stop(self) -> dict[str, Any]:
        self.runtime.stop()
        return self.runtime.status()
